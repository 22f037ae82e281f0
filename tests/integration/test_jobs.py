"""The job server (tests/integration/jobs.py) gives a job what ``Popen(..., start_new_session=
True)`` of its script gives: the script as ``__main__`` with its arguments, its exit code (a
SIGKILL's as -9), its stderr in a file, a process group of its own."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from tests.integration.jobs import Job, popen

SCRIPT = """
import os, sys, time
print("to /dev/null")
print(f"{__name__} {sys.argv[1:]} {os.getpgid(0) == os.getpid()}", file=sys.stderr)
how = sys.argv[1]
if how == "exit3":
    os._exit(3)
if how == "exit2":
    sys.exit(2)
if how == "message":
    sys.exit("a message")
if how == "raise":
    raise ValueError("in the job")
if how == "sleep":
    time.sleep(60)
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent(SCRIPT))
    return path


@pytest.mark.parametrize(("how", "code", "said"), [
    ("end", 0, "__main__ ['end', 'x'] True"),
    ("exit3", 3, "__main__ ['exit3', 'x'] True"),
    ("exit2", 2, "__main__ ['exit2', 'x'] True"),
    ("message", 1, "a message"),
    ("raise", 1, "ValueError: in the job"),
])
def test_a_job_ends_as_its_script_does(script: Path, tmp_path: Path, how: str, code: int,
                                       said: str) -> None:
    log = tmp_path / "stderr.txt"
    job = popen([sys.executable, str(script), how, "x"], log)
    assert isinstance(job, Job)
    assert job.wait(timeout=60) == code
    assert said in log.read_text() and "to /dev/null" not in log.read_text()


def test_a_job_killed_with_its_group_ends_with_minus_nine(script: Path, tmp_path: Path) -> None:
    job = popen([sys.executable, str(script), "sleep"], tmp_path / "stderr.txt")
    assert job.poll() is None
    os.killpg(job.pid, signal.SIGKILL)
    assert job.wait(timeout=60) == -signal.SIGKILL
