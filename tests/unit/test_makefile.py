"""`make check` checks an install quickly (#41 item 3): the lint and type checks, the unit tests
and one smoke test against a real AIStore; the README and the quick start name it, and keep
their two set-up commands."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import ROOT


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_check_is_lint_unit_tests_and_one_smoke_test() -> None:
    done = subprocess.run(["make", "-n", "check"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=True)
    commands = done.stdout
    assert "ruff check" in commands and "mypy" in commands
    [pytest_line] = [line for line in commands.splitlines() if "-m pytest" in line]
    assert pytest_line.split()[-2:] == ["tests/unit", "tests/integration/test_smoke.py"]
    assert (ROOT / "tests/integration/test_smoke.py").exists()


def test_the_readme_and_the_quick_start_name_it_beside_their_two_commands() -> None:
    for page in (ROOT / "README.md", ROOT / "docs" / "quickstart.md"):
        text = page.read_text()
        assert ("```bash\nmake demo    # the main job: a real pipeline from a local AIStore into "
                "a training loop\nmake test    # lint, type checks, unit and integration tests "
                "against a real local AIStore\n```") in text, page
        assert "`make check`" in text, page
