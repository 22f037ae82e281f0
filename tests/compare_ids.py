"""Compares two lists of pytest node ids: is every test of the first still in the second?

Tests move between files (``tests/`` mirrors the package) but keep their names, so a test is
matched by what follows its file in the node id (``test_x[param]``, ``Class::test_x``, a
doctest's dotted name), counted: a name held by two tests before must be held by two after.

Each input is a file of node ids, one a line (``pytest --collect-only -q``, or the record that
``--record-ran`` writes), or a JUnit XML report (``pytest --junitxml``: the tests it shows run,
not skipped). Several files on one side are united (the two environments of ``make test``)::

    python tests/compare_ids.py --before td09.txt td011.txt --after td09-now.txt td011-now.txt

Prints the counts and every test of ``--before`` that ``--after`` lacks; exits 1 if any.
"""

from __future__ import annotations

import argparse
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path


def node_ids(path: Path) -> set[str]:
    """Returns the node ids a file lists (a JUnit report: of the tests that ran, as
    ``module::name`` with the module as JUnit writes it)."""
    text = path.read_text()
    if text.lstrip().startswith("<"):
        ran = set()
        for case in ET.fromstring(text).iter("testcase"):
            if case.find("skipped") is None:
                ran.add(f"{case.get('classname')}::{case.get('name')}")
        return ran
    return {line.strip() for line in text.splitlines() if "::" in line}


def _without_addresses(node_ids: set[str]) -> set[str]:
    """Returns the ids with the addresses some of them name taken out (so that one test of
    two runs is one id)."""
    return {re.sub(r" object at 0x[0-9a-f]+", " object", node_id) for node_id in node_ids}


#: tests whose names changed on purpose: old name -> new name
RENAMED = {
    # ids that named an SDK object's address (different in every run) and were cut at 60
    # characters: without the address, the cut falls elsewhere
    "test_one_rule_for_every_accepted_form[<aistore.sdk.obj.object.Object object>-lis]":
        "test_one_rule_for_every_accepted_form[<aistore.sdk.obj.object.Object object>-list]",
    "test_one_rule_for_every_accepted_form[<aistore.sdk.multiobj.object_group.ObjectGroup "
    "object_0]": "test_one_rule_for_every_accepted_form[<aistore.sdk.multiobj.object_group."
                 "ObjectGroup object>-list]",
    "test_one_rule_for_every_accepted_form[<aistore.sdk.multiobj.object_group.ObjectGroup "
    "object_1]": "test_one_rule_for_every_accepted_form[<aistore.sdk.multiobj.object_group."
                 "ObjectGroup object>-load]",
}


def name_of(node_id: str) -> str:
    """Returns what identifies a test wherever its file is: the node id after the file (a
    JUnit id: after the module, whose last part may be a class)."""
    head, _, rest = node_id.partition("::")
    if "/" not in head and not head.endswith(".py"):  # JUnit: module[.Class]::name
        last = head.rsplit(".", 1)[-1]
        return f"{last}::{rest}" if last[:1].isupper() else rest
    return rest


def compare(before: set[str], after: set[str]) -> tuple[Counter[str], Counter[str]]:
    """Returns (names ``before`` holds more often than ``after``, and the other way round)."""
    old = Counter(RENAMED.get(name, name) for name in map(name_of, before))
    new = Counter(map(name_of, after))
    return old - new, new - old


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", nargs="+", type=Path, required=True)
    parser.add_argument("--after", nargs="+", type=Path, required=True)
    args = parser.parse_args(argv)
    before = _without_addresses(set().union(*(node_ids(p) for p in args.before)))
    after = _without_addresses(set().union(*(node_ids(p) for p in args.after)))
    lost, gained = compare(before, after)
    print(f"before: {len(before)} tests; after: {len(after)} tests; "
          f"lost: {sum(lost.values())}; new: {sum(gained.values())}")
    for name, count in sorted(lost.items()):
        print(f"  lost: {name}" + (f" (x{count})" if count > 1 else ""))
    for name, count in sorted(gained.items()):
        print(f"  new:  {name}" + (f" (x{count})" if count > 1 else ""))
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
