"""after_import runs a function once a module is imported: at once, or right after its import."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from aisio.core.system import imports
from aisio.core.system.imports import after_import, quietly


@pytest.fixture
def module_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory on ``sys.path`` for modules of a test's own (forgotten afterwards)."""
    sys.path.insert(0, str(tmp_path))
    before = set(sys.modules)
    pending = {name: list(functions) for name, functions in imports._PENDING.items()}
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        for name in set(sys.modules) - before:
            if name.startswith("aisio_test_"):
                del sys.modules[name]
        imports._PENDING.clear()
        imports._PENDING.update(pending)  # what the rest of the session waits for
        if not pending:
            imports.uninstall()


def test_runs_right_after_the_import_once(module_dir: Path) -> None:
    (module_dir / "aisio_test_late.py").write_text("VALUE = 1\n")
    seen: list[object] = []
    after_import("aisio_test_late", lambda: seen.append(sys.modules["aisio_test_late"].VALUE))
    assert seen == [] and "aisio_test_late" not in sys.modules
    import aisio_test_late  # type: ignore[import-not-found]

    assert seen == [1]  # after the module ran: its names are there
    assert "aisio_test_late" not in imports._PENDING  # one-shot
    del sys.modules["aisio_test_late"]
    import aisio_test_late  # type: ignore[import-not-found]  # noqa: F401,F811

    assert seen == [1]


def test_runs_at_once_when_the_module_is_imported(module_dir: Path) -> None:
    (module_dir / "aisio_test_early.py").write_text("")
    import aisio_test_early  # type: ignore[import-not-found]  # noqa: F401

    seen: list[str] = []
    after_import("aisio_test_early", lambda: seen.append("ran"))
    assert seen == ["ran"] and "aisio_test_early" not in imports._PENDING


def test_a_failing_function_made_quiet_does_not_break_the_import(module_dir: Path) -> None:
    (module_dir / "aisio_test_quiet.py").write_text("VALUE = 2\n")
    after_import("aisio_test_quiet", quietly(lambda: 1 / 0))
    import aisio_test_quiet  # type: ignore[import-not-found]

    assert aisio_test_quiet.VALUE == 2
