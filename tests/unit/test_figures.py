"""The package's comments and docstrings give no measured figure of their own (a rate, a
speed-up, a time in micro- or nanoseconds): each one points to ``benchmarks/README.md``, where
it says what measured it (issue #39). Figures in code go stale; the benchmark log dates them."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "aisio"

#: A measured figure: a rate, a speed-up or slow-down, a time in micro- or nanoseconds.
FIGURE = re.compile(r"\d[\d,.]*\s?(?:[KMG]i?B/s|(?:samples|objects|images|requests|batches)/s"
                    r"|x (?:faster|slower)|(?:us|µs|ns)\b)")
#: Lines around a figure that may say where it was measured.
NEAR = 3


def figures(source: str) -> list[tuple[int, str]]:
    """Returns ``(line, text)`` of each figure in ``source``'s comments and docstrings that no
    line within :data:`NEAR` of it points to benchmarks/ (doctest output lines, quoted, are
    examples, not figures)."""
    found: list[tuple[int, str]] = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in (tokenize.COMMENT, tokenize.STRING):
            continue
        text = token.string
        if token.type == tokenize.STRING:
            text = text.lstrip("rbufRBUF")
            if not text.startswith(('"""', "'''")):
                continue
            text = text[3:-3]
        lines = text.splitlines()
        for at, line in enumerate(lines):
            if not FIGURE.search(line) or line.strip().startswith(("'", '"', ">>>")):
                continue
            near = lines[max(0, at - NEAR):at + NEAR + 1]
            if not any("benchmarks/" in each for each in near):
                found.append((token.start[0] + at, line.strip()))
    return found


def test_no_figure_in_the_package_without_its_measurement() -> None:
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}: {text}"
             for path in sorted(PACKAGE.rglob("*.py"))
             for line, text in figures(path.read_text())]
    assert found == []


def test_the_rule_sees_a_figure() -> None:
    source = '''
def f():
    """Pickled: ~580 MB/s; through shared memory 18x faster."""
    # the hook costs about 1 us a sample
    # 2 KiB samples: 147,844 samples/s (benchmarks/README.md)
    return "100 MB/s"  # a string, not a docstring: 3 ms
'''
    assert [line for line, _ in figures(source)] == [3, 4]
