"""The Python snippets of the README and the docs, and what each says about how it is tested.

Every ```python block of README.md and docs/ is run against a real AIStore by
tests/integration/test_snippets.py, unless the line just before its fence says otherwise:

- ``<!-- snippet: runs in tests/FILE.py::test_name -->``: another test runs it (as written);
- ``<!-- snippet: not run: WHY -->``: it cannot run here as written (8 GPUs, a torchrun
  launch, ...), and why.

tests/unit/test_readme.py holds every note to this form (an existing test, a reason given).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_BLOCK = re.compile(r"(?:^<!-- snippet: (?P<note>.*?) -->\n)?^```python\n(?P<code>.*?)^```",
                    re.M | re.S)


@dataclass(frozen=True)
class Snippet:
    """One ```python block: where it is, its code, and the note before it (None: run it)."""

    page: str
    line: int
    code: str
    note: str | None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def snippets() -> list[Snippet]:
    """Returns every Python snippet of the README and the docs, in page order."""
    found = []
    for page in pages():
        text = page.read_text()
        for match in _BLOCK.finditer(text):
            line = text.count("\n", 0, match.start("code"))
            found.append(Snippet(str(page.relative_to(ROOT)), line, match.group("code"),
                                 match.group("note")))
    return found
