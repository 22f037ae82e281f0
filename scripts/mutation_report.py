"""Sums up the last `make mutate` run (mutmut's results in mutants/) in Markdown, on stdout.

Per module: mutants made, killed, survived, not reached by a test, timed out, and the survival
rate. Then every survivor, with the line it changed, sorted into two kinds:

- ``text``: only a message changed (a string inside a ``raise``, a warning or a log call, or
  anything inside an f-string); no sample depends on one;
- ``code``: anything else. Each of these is either killed by a test or explained in
  docs/mutation.md.

Usage: .venv/bin/python scripts/mutation_report.py [--all]  (--all: list text survivors too)
"""

from __future__ import annotations

import ast
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

MUTANTS = Path("mutants")
KILLED = {1, 3, 37}
SURVIVED = {0}
NO_TESTS = {5, 33}
TIMEOUT = {24, -24, 36, 152, 255}
#: calls whose string arguments are messages (a warning, a log line, an exception)
MESSAGE_CALLS = {"warn", "warn_in_user_code", "debug", "info", "warning", "error", "exception"}


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
    """Whether a string under these ancestors is the text of a message."""
    for node in reversed(parents):
        if isinstance(node, (ast.Raise, ast.JoinedStr)):
            return True
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in MESSAGE_CALLS or name.endswith(("Error", "Warning")):
                return True
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id in ("message", "msg") for t in node.targets):
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
    text = bool(found) and all(
        any(isinstance(pa, ast.JoinedStr) for pa, _ in parents)  # inside an f-string's text
        or (isinstance(a, str) and isinstance(b, str) and parents
            and isinstance(parents[-1][0], ast.Constant)
            and is_message([pa for pa, _ in parents]))
        for a, b, parents in found)
    return ("text" if text else "code"), line


def main() -> int:
    show_text = "--all" in sys.argv
    metas = sorted(MUTANTS.glob("aisio/**/*.py.meta"))
    if not metas:
        print("no results in mutants/: run `make mutate` first", file=sys.stderr)
        return 1
    rows, survivors = [], []
    totals: Counter[str] = Counter()
    for meta in metas:
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        if not codes:
            continue
        source_path = meta.with_suffix("")
        source = source_path.read_text()
        lines = source.splitlines()
        funcs = functions(ast.parse(source))
        count = Counter(
            "killed" if c in KILLED else "survived" if c in SURVIVED else "no tests"
            if c in NO_TESTS else "timeout" if c in TIMEOUT else "unchecked" if c is None
            else "other" for c in codes.values())
        count["total"] = len(codes)
        module = source_path.relative_to(MUTANTS).as_posix()
        text = 0
        for name, code in sorted(codes.items(), key=lambda kv: _order(kv[0])):
            if code not in SURVIVED and code not in NO_TESTS:
                continue
            short = name.rsplit(".", 1)[1]
            base = short.rsplit("__mutmut_", 1)[0]
            how, line = kind(funcs[base + "__mutmut_orig"], funcs[short])
            text += how == "text"
            if how == "code" or show_text:
                status = "survived" if code in SURVIVED else "no tests"
                changed = lines[line - 1].strip() if line else ""
                survivors.append((module, short, status, how, changed))
        count["text"] = text
        totals.update(count)
        rows.append((module, count))
    print("| module | mutants | checked | killed | survived (text) | no tests | timeout "
          "| survival |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for module, c in [*rows, ("**all**", totals)]:
        alive, checked = c["survived"] + c["no tests"], c["total"] - c["unchecked"]
        rate = 100 * alive / checked if checked else 0
        print(f"| `{module}` | {c['total']} | {checked} | {c['killed']} | {c['survived']} "
              f"({c['text']}) | {c['no tests']} | {c['timeout']} | {rate:.1f}% |")
    if totals["unchecked"]:
        print(f"\n{totals['unchecked']} mutants not checked (yet): survival is of those checked.")
    print("\n| module | mutant | status | kind | the changed line (mutant) |")
    print("| --- | --- | --- | --- | --- |")
    for module, short, status, how, changed in survivors:
        cell = changed.replace("|", "\\|")
        print(f"| `{module}` | `{short}` | {status} | {how} | `{cell}` |")
    return 0


def _order(name: str) -> tuple[str, int]:
    base, _, n = name.rpartition("__mutmut_")
    return base, int(n) if n.isdigit() else 0


if __name__ == "__main__":
    sys.exit(main())
