"""Runs the mutants that have no kept result yet (`make mutate`), and keeps their results.

mutmut keeps its results in ``mutants/``, which git ignores: a fresh checkout would start over.
This keeps them in the repository, in ``docs/mutation/results.json``, keyed by each mutated
function's name and a hash of its source (mutmut's own: its AST, wherever it sits). A function
whose source changed is run again; one that did not keeps its results, even if its module moved
(it is found by name and hash in the module it came from). So each run continues the last:

1. make the mutants (mutmut's own step; ``mutants/`` is its cache, each file made again only
   when its source changed), and read every mutant's name from mutmut's records; forget what
   mutmut recorded of the tests whose file changed, so that it traces them again;
2. restore the kept results into those records; what has none is still to do, and so is a
   "no tests" (mutmut answers it at once, from the tests as they are now);
3. ``mutmut run`` with those names only, at most ``--budget`` seconds (stopped then; every
   mutant that finished has its result);
4. write each finished mutant's result back into the kept file (with, for a survivor, its
   changed line and whether only a message changed: ``scripts/mutation_report.py`` reads it).

Usage (from the checkout's root; ``make mutate`` runs it under ``nice``):
    .venv/bin/python scripts/mutate.py [--budget SECONDS] [--again] [--examples N] [PATTERN ...]

PATTERN narrows the run to the mutants whose name matches (fnmatch), e.g.
``'aisio.core.faults.policy.*'``; ``--again`` runs them even where a result is kept (a
survivor, after a test was added for it). ``--list`` prints what is still to do and runs
nothing. mutmut is pinned (the locks) and this uses its internals: check them on an upgrade.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mutation_report  # (this directory's)

KEPT = mutation_report.KEPT
#: kept for a mutant that changes only a message's text (``mutation_report.kind``): not run
#: unless ``--messages`` (no sample is delivered, skipped or counted by a message)
MESSAGE = 38
LOG = Path("mutants/mutate.log")
#: mutmut's exit codes, as kept (a mutant interrupted by the budget, or killed by a signal
#: from outside, has no result: it is run again)
STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests",
          24: "timeout", -24: "timeout", 36: "timeout", 152: "timeout",
          # (not 255, which mutmut's table calls a timeout: its fork server's worker exits -1
          # when running the tests raised, e.g. pytest's usage error; no test ran, so no result)
          # (-9: SIGKILLed by mutmut's runner past its time limit, e.g. a test left waiting on
          # a rank that never answers: mutmut calls it a segfault; the tests did not pass)
          -9: "timeout",
          34: "skipped", 35: "suspicious", 37: "type check", MESSAGE: "message"}
#: the bounded profile: each property test's examples under mutation, at most (the same ones
#: every run). A survivor that only a longer draw would kill is a test to write: the draw in
#: make test is random, a kept result must not be.
EXAMPLES = 30
ORDER = ("killed", "survived", "no tests", "timeout", "skipped", "suspicious", "type check",
         "message")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("patterns", nargs="*", help="only the mutants whose name matches")
    parser.add_argument("--budget", type=float, default=3600.0, help="seconds, at most")
    parser.add_argument("--again", action="store_true", help="even where a result is kept")
    parser.add_argument("--list", action="store_true", help="print what is to do, run nothing")
    parser.add_argument("--workers", type=int, default=1,
                        help="mutants run at once (mutmut's --max-children)")
    parser.add_argument("--messages", action="store_true",
                        help="run the mutants that change only a message's text too")
    parser.add_argument("--examples", type=int, default=EXAMPLES,
                        help="property tests' examples, at most (0: as the tests say)")
    args = parser.parse_args()
    start = time.monotonic()
    kept = load_kept()
    generate()
    records = read_records()
    restored = restore(records, kept)
    todo = [name for name, (_, code) in sorted(all_mutants(records).items())
            if (code is None or args.again)
            and (not args.patterns or any(fnmatch.fnmatch(name, p) for p in args.patterns))]
    total = len(all_mutants(records))
    messages = set() if args.messages else messages_only(records, todo)
    todo = [name for name in todo if name not in messages]
    print(f"{total} mutants in scope, {restored} with a kept result, {len(messages)} that "
          f"change only a message kept as such, {len(todo)} to run now")
    if args.list:
        print("\n".join(todo))
        return 0
    if todo:
        run(todo, args.budget - (time.monotonic() - start), args.examples, args.workers)
    records = read_records()
    ran = set(todo)
    failed = [name for name, (_, code) in all_mutants(records).items()
              if code == 255 and name in ran]
    if failed:
        print(f"{len(failed)} mutants got no verdict: mutmut could not run their tests (exit "
              "255; e.g. pytest refused a test id it cannot select again, see "
              f"tests/unit/conftest.py); they stay to do. The first: {failed[0]}")
    finished = save_kept(records, kept, ran, dict.fromkeys(messages, MESSAGE))
    left = total - sum(len(entry["codes"]) for entry in kept.values())
    print(f"{finished} of the {len(todo)} run have a result; {left} of {total} have none yet "
          f"({time.monotonic() - start:.0f} s)")
    return 0


Records = dict[str, dict[str, Any]]
"""mutmut's record of each in-scope file (its ``.meta``), by the file's path."""


def generate() -> None:
    """Makes the mutants as ``mutmut run`` does (only the files changed since), in a process of
    its own (mutmut's steps change the working process)."""
    code = ("import mutmut.__main__ as m\n"
            "m.copy_src_dir(); m.copy_also_copy_files(); m.setup_source_paths()\n"
            "m.store_lines_covered_by_tests(); m.create_mutants(1)\n")
    os.makedirs("mutants", exist_ok=True)
    forget_gone_files()
    forget_changed_tests()
    with LOG.open("a") as log:
        subprocess.run([sys.executable, "-c", code], check=True, stdout=log, stderr=log)


def forget_gone_files() -> None:
    """Removes from ``mutants/`` the copies of source and test files that no longer exist (a
    module that moved would otherwise be imported from its old place, or shadow its new one;
    a test file that moved would be collected twice, its old copy importing the old place)."""
    for copy in [*Path("mutants/aisio").rglob("*"), *Path("mutants/tests").rglob("*")]:
        source = copy.relative_to("mutants")
        for suffix in (".meta", ".spans"):
            if copy.name.endswith(".py" + suffix):
                source = source.with_name(copy.name[:-len(suffix)])
        if copy.is_file() and source.suffix == ".py" and not source.exists():
            copy.unlink()


STATS = Path("mutants/mutmut-stats.json")
TEST_HASHES = Path("mutants/aisio-test-hashes.json")


def forget_changed_tests() -> None:
    """Takes out of mutmut's record of which tests reach which functions every test whose file
    changed since that record was made (a helper or ``conftest.py``: every test in its folder),
    so that mutmut records them again. mutmut itself records only tests with a new name: a test
    whose body changed kept what its old body reached (``runtime/dist.py``'s two-rank tests,
    once rank 0 ran in the test's process, still reached nothing). With no hashes kept, every
    test is taken out (recorded again once)."""
    hashes = {str(path): hashlib.sha256(path.read_bytes()).hexdigest()
              for path in sorted(Path("tests").rglob("*.py"))}
    old = json.loads(TEST_HASHES.read_text()) if TEST_HASHES.exists() else {}
    changed = [path for path in hashes.keys() | old.keys() if hashes.get(path) != old.get(path)]
    if STATS.exists() and changed:
        stats = json.loads(STATS.read_text())
        prefixes = tuple(f"{path}::" if Path(path).name.startswith("test_")
                         else f"{Path(path).parent}/" for path in changed)
        stale = {test for test in stats["duration_by_test"] if test.startswith(prefixes)}
        for test in stale:
            del stats["duration_by_test"][test]
        for function, tests in stats["tests_by_mangled_function_name"].items():
            stats["tests_by_mangled_function_name"][function] = [
                test for test in tests if test not in stale]
        STATS.write_text(json.dumps(stats, indent=4))
        print(f"{len(changed)} test files changed: {len(stale)} tests to be traced again")
    TEST_HASHES.write_text(json.dumps(hashes, indent=1))


def in_scope() -> list[Path]:
    """The files mutmut mutates (``[tool.mutmut]``'s ``only_mutate``), relative paths."""
    from mutmut.utils.file_utils import walk_mutatable_files
    return sorted(walk_mutatable_files())


def read_records() -> Records:
    records = {}
    for path in in_scope():
        meta = Path("mutants") / f"{path}.meta"
        if meta.exists():
            records[str(path)] = json.loads(meta.read_text())
    return records


def all_mutants(records: Records) -> dict[str, tuple[str, int | None]]:
    """Every mutant's name: its file and its result in mutmut's records (None: none)."""
    return {name: (path, code) for path, record in records.items()
            for name, code in record["exit_code_by_key"].items()}


def messages_only(records: Records, names: list[str]) -> set[str]:
    """The mutants of ``names`` that change only a message's text (``mutation_report.kind``,
    on mutmut's mutated copy of their file)."""
    paths = all_mutants(records)
    found: set[str] = set()
    by_path: dict[str, list[str]] = {}
    for name in names:
        by_path.setdefault(paths[name][0], []).append(name)
    for path, group in by_path.items():
        functions = mutation_report.functions(ast.parse((Path("mutants") / path).read_text()))
        for name in group:
            function = function_of(name)[1]
            number = name.rpartition("__mutmut_")[2]
            original = functions.get(f"{function}__mutmut_orig")
            mutant = functions.get(f"{function}__mutmut_{number}")
            if original is not None and mutant is not None and (
                    mutation_report.kind(original, mutant)[0] == "text"):
                found.add(name)
    return found


def function_of(name: str) -> tuple[str, str]:
    """``(module, mangled function)`` of a mutant's name."""
    base = name.partition("__mutmut_")[0]
    module, _, function = base.rpartition(".")
    return module, function


#: the exit code kept for each status (the file keeps statuses)
CODE = {"killed": 1, "survived": 0, "no tests": 33, "timeout": 36, "skipped": 34,
        "suspicious": 35, "type check": 37, "message": MESSAGE}


#: "no tests" is a fact about the tests, not the mutant: it is asked again every run (mutmut
#: answers it at once, from its record of which tests reach which functions)
NO_TESTS = tuple(code for code, status in STATUS.items() if status == "no tests")


def load_kept() -> dict[str, Any]:
    """The kept results, by ``module.function``: ``hash``, ``mutants``, ``codes`` (each
    mutant's number, as a string, to its exit code) and ``lines`` (survivors' lines)."""
    if not KEPT.exists():
        return {}
    kept = {}
    for key, row in json.loads(KEPT.read_text(encoding="utf-8"))["functions"].items():
        codes = {str(n): CODE[status] for status in ORDER
                 for n in mutation_report.unspan(row.get(status, ""))}
        codes.update(row.get("other", {}))
        kept[key] = {"hash": row["hash"], "mutants": row["mutants"], "codes": codes,
                     "lines": dict(row.get("lines", {}))}
    return kept


def restore(records: Records, kept: dict[str, Any]) -> int:
    """Writes the kept results of unchanged functions into mutmut's records (and takes away
    any result there of a function whose kept result is of another source); returns how many
    mutants have one."""
    by_hash: dict[tuple[str, str], dict[str, Any]] = {}
    for key, entry in kept.items():
        by_hash.setdefault((key.rpartition(".")[2], entry["hash"]), entry)
    count = 0
    for path, record in records.items():
        hashes = record["hash_by_function_name"]
        codes = record["exit_code_by_key"]
        for name in codes:
            module, function = function_of(name)
            entry = kept.get(f"{module}.{function}")
            if entry is None or entry["hash"] != hashes.get(function):
                entry = by_hash.get((function, hashes.get(function, "")))  # moved here?
            number = name.rpartition("__mutmut_")[2]
            code = None if entry is None else entry["codes"].get(number)
            codes[name] = None if code in NO_TESTS else code  # (asked again: see NO_TESTS)
            count += codes[name] is not None
        (Path("mutants") / f"{path}.meta").write_text(json.dumps(record))
    return count


def run(names: list[str], budget: float, examples: int, workers: int = 1) -> None:
    """``mutmut run`` of ``names`` in ``workers`` processes, stopped after ``budget`` seconds;
    property tests draw at most ``examples`` (tests/unit/conftest.py)."""
    print(f"running {len(names)} mutants for at most {budget:.0f} s (log: {LOG})", flush=True)
    with LOG.open("a") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "mutmut", "run", "--max-children", str(workers), *names],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "AISIO_MUTATION_EXAMPLES": str(examples)})
        try:
            process.wait(timeout=max(budget, 1.0))
        except subprocess.TimeoutExpired:
            print("budget spent: stopping mutmut", flush=True)
            os.killpg(process.pid, signal.SIGINT)  # mutmut stops its workers and saves
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def save_kept(records: Records, kept: dict[str, Any], ran: set[str],
              decided: dict[str, int] | None = None) -> int:
    """Writes the results of the mutants in ``ran`` that finished, and those ``decided``
    without a run (name -> code), into the kept file, and keeps there only the functions now
    in scope (under their module now); returns how many finished."""
    decided = decided or {}
    previous = dict(kept)
    by_hash = {(key.rpartition(".")[2], entry["hash"]): entry for key, entry in kept.items()}
    kept.clear()
    finished = 0
    for path, record in records.items():
        hashes = record["hash_by_function_name"]
        functions: dict[str, ast.FunctionDef] = {}
        lines: list[str] = []
        if (Path("mutants") / path).exists():  # every survivor's line, classified as now
            mutated = (Path("mutants") / path).read_text()
            functions = mutation_report.functions(ast.parse(mutated))
            lines = mutated.splitlines()
        for name, code in record["exit_code_by_key"].items():
            module, function = function_of(name)
            key = f"{module}.{function}"
            if key not in kept:
                old = previous.get(key)
                if old is None or old["hash"] != hashes.get(function):
                    old = by_hash.get((function, hashes.get(function, "")))
                kept[key] = {"hash": hashes.get(function, ""), "mutants": 0,
                             "codes": dict(old["codes"]) if old is not None else {},
                             "lines": dict(old["lines"]) if old is not None else {}}
            entry = kept[key]
            entry["mutants"] += 1
            number = name.rpartition("__mutmut_")[2]
            if name in decided:
                entry["codes"][number] = decided[name]
                continue
            status = STATUS.get(code) if code is not None else None
            if name in ran and status is not None:
                entry["codes"][number] = code
                finished += 1
            if (entry["codes"].get(number) in (0, *NO_TESTS)
                    and f"{function}__mutmut_{number}" in functions):
                how, line = mutation_report.kind(functions[f"{function}__mutmut_orig"],
                                                 functions[f"{function}__mutmut_{number}"])
                entry["lines"][number] = [how, lines[line - 1].strip() if line else ""]
    write_kept(kept)
    return finished


def write_kept(kept: dict[str, Any]) -> None:
    """One function a line, sorted: a later run's diff shows what changed."""
    rows = []
    for key in sorted(kept):
        entry = kept[key]
        codes = {int(n): c for n, c in entry["codes"].items()}
        row: dict[str, Any] = {"hash": entry["hash"], "mutants": entry["mutants"]}
        for status in ORDER:
            numbers = sorted(n for n, c in codes.items() if STATUS.get(c) == status)
            if numbers:
                row[status] = spans(numbers)
        other = {str(n): c for n, c in codes.items() if c not in STATUS}
        if other:
            row["other"] = other
        lines = {n: v for n, v in entry.get("lines", {}).items()
                 if codes.get(int(n)) in (0, 5, 33)}
        if lines:
            row["lines"] = dict(sorted(lines.items(), key=lambda kv: int(kv[0])))
        rows.append(f"  {json.dumps(key, ensure_ascii=False)}: "
                    f"{json.dumps(row, ensure_ascii=False)}")
    KEPT.parent.mkdir(parents=True, exist_ok=True)
    KEPT.write_text('{"functions": {\n' + ",\n".join(rows) + "\n}}\n", encoding="utf-8")


def spans(numbers: list[int]) -> str:
    """``[1, 2, 3, 5]`` -> ``"1-3,5"``."""
    out: list[str] = []
    first = last = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == last + 1:
            last = n
            continue
        out.append(str(first) if first == last else f"{first}-{last}")
        if n is not None:
            first = last = n
    return ",".join(out)


if __name__ == "__main__":
    sys.exit(main())
