"""Sums up the kept mutation results (docs/mutation/results.json, see scripts/mutate.py) in
Markdown, on stdout: what every `make mutate` run so far found, for the sources as they are.

Per module: mutants made, run, killed, survived, not reached by a test, timed out, not run
yet, and the survival rate. Then every survivor, with the line it changed (as kept when it was
run), sorted into two kinds:

- ``text``: only a message changed (a string, or anything inside an f-string, where it is
  the text of a ``raise``, a warning, a log call or a variable named as a message); no sample
  depends on one;
- ``code``: anything else. Each of these is either killed by a test or explained in
  docs/mutation.md.

Usage: .venv/bin/python scripts/mutation_report.py [--all] [--page]  (--all: list text
survivors too; --page: as the docs site's page, docs/mutation/report.md, which make mutate
writes)
"""

from __future__ import annotations

import ast
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

KEPT = Path("docs/mutation/results.json")
#: calls whose string arguments are messages (a warning, a log line, an exception)
MESSAGE_CALLS = {"warn", "warn_in_user_code", "debug", "info", "warning", "error", "exception"}
#: variables that hold (a part of) a message
MESSAGE_NAMES = ("message", "msg", "what")


def functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """The mutated file's functions by name, mutmut's copies included."""
    found: dict[str, ast.FunctionDef] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            found[node.name] = node
    return found


Difference = tuple[Any, Any, tuple[Any, ...]]


def differences(a: Any, b: Any, parents: tuple[Any, ...] = ()) -> list[Difference]:
    """The smallest pairs of nodes where ``a`` and ``b`` differ, each with its ancestors as
    pairs (``a``'s, ``b``'s)."""
    if type(a) is not type(b):
        return [(a, b, parents)]
    if isinstance(a, ast.AST):
        found: list[Difference] = []
        for field in a._fields:
            found += differences(getattr(a, field), getattr(b, field), (*parents, (a, b)))
        return found
    if isinstance(a, list):
        if len(a) != len(b):
            return [(a, b, parents)]
        found = []
        for x, y in zip(a, b, strict=True):
            found += differences(x, y, parents)
        return found
    return [] if a == b else [(a, b, parents)]


def is_message(parents: list[ast.AST]) -> bool:
    """Whether a string under these ancestors is the text of a message (an f-string is one
    only where it is a message: ``random.Random(f"{seed}:...")`` makes a seed, not a text)."""
    for node in reversed(parents):
        if isinstance(node, ast.Raise):
            return True
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in MESSAGE_CALLS or name.endswith(("Error", "Warning")):
                return True
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id in MESSAGE_NAMES for t in node.targets):
            return True
    return False


def kind(original: ast.FunctionDef, mutant: ast.FunctionDef) -> tuple[str, int]:
    """``text`` or ``code``, and the line (in the mutated file) of the first change in
    ``mutant``."""
    found = differences(original.body, mutant.body)
    line = 0
    for _, b, parents in found:
        nodes = [b, *(pb for _, pb in reversed(parents))]
        line = next((n.lineno for n in nodes if hasattr(n, "lineno")), 0)
        if line:
            break
    text = bool(found) and all(_in_message(a, b, parents) for a, b, parents in found)
    return ("text" if text else "code"), line


def _in_message(a: Any, b: Any, parents: tuple[Any, ...]) -> bool:
    """Whether one difference changes only a message: a string, or anything inside an
    f-string, where the string is a message's text."""
    ancestors = [pa for pa, _ in parents]
    in_fstring = any(isinstance(node, ast.JoinedStr) for node in ancestors)
    string = (isinstance(a, str) and isinstance(b, str) and bool(ancestors)
              and isinstance(ancestors[-1], ast.Constant))
    return (in_fstring or string) and is_message(ancestors)


def main() -> int:
    show_text = "--all" in sys.argv
    if not KEPT.exists():
        print(f"no results in {KEPT}: run `make mutate` first", file=sys.stderr)
        return 1
    if "--page" in sys.argv:
        print("# Mutation results, as kept\n\nWritten by `scripts/mutation_report.py --page` "
              "(`make mutate`) from `docs/mutation/results.json`: every mutant's last result, "
              "for the sources as they are. What each survivor means: "
              "[Mutation testing](../mutation.md).\n")
    rows: dict[str, Counter[str]] = {}
    survivors = []
    for key, entry in json.loads(KEPT.read_text(encoding="utf-8"))["functions"].items():
        module, _, function = key.rpartition(".")
        count = rows.setdefault(module, Counter())
        count["total"] += entry["mutants"]
        for status in ("killed", "survived", "no tests", "timeout"):
            count[status] += len(unspan(entry.get(status, "")))
        count["checked"] += sum(len(unspan(entry.get(status, ""))) for status in (
            "killed", "survived", "no tests", "timeout", "skipped", "suspicious", "type check"))
        count["message"] += len(unspan(entry.get("message", "")))
        count["checked"] += len(entry.get("other", {}))
        survived = set(unspan(entry.get("survived", "")))
        for number, (how, changed) in entry.get("lines", {}).items():
            status = "survived" if int(number) in survived else "no tests"
            count["text"] += how == "text" and status == "survived"
            if how == "code" or show_text:
                survivors.append((module, f"{function}__mutmut_{number}", status, how, changed))
    totals: Counter[str] = Counter()
    for count in rows.values():
        totals.update(count)
    print("| module | mutants | run | killed | survived (text) | no tests | timeout "
          "| message only | not run | survival |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for module, c in [*sorted(rows.items()), ("**all**", totals)]:
        alive, checked = c["survived"] + c["no tests"], c["checked"]
        rate = 100 * alive / checked if checked else 0
        name = f"`{module.replace('.', '/')}.py`" if module != "**all**" else module
        print(f"| {name} | {c['total']} | {checked} | {c['killed']} | {c['survived']} "
              f"({c['text']}) | {c['no tests']} | {c['timeout']} | {c['message']} "
              f"| {c['total'] - checked - c['message']} | {rate:.1f}% |")
    print("\n| module | mutant | status | kind | the changed line (mutant) |")
    print("| --- | --- | --- | --- | --- |")
    for module, short, status, how, changed in sorted(survivors, key=_order):
        cell = changed.replace("|", "\\|")
        print(f"| `{module.replace('.', '/')}.py` | `{short}` | {status} | {how} | `{cell}` |")
    return 0


def unspan(text: str) -> list[int]:
    """``"1-3,5"`` -> ``[1, 2, 3, 5]``."""
    numbers: list[int] = []
    for part in filter(None, text.split(",")):
        a, _, b = part.partition("-")
        numbers.extend(range(int(a), int(b or a) + 1))
    return numbers


def _order(row: tuple[str, ...]) -> tuple[str, str, int]:
    base, _, n = row[1].rpartition("__mutmut_")
    return row[0], base, int(n) if n.isdigit() else 0


if __name__ == "__main__":
    sys.exit(main())
