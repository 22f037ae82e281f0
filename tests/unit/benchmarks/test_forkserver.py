"""The benchmarks' fork server ends what a job leaves behind (processes, no sockets)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

SERVER = """
import os, sys, time
from pathlib import Path
from benchmarks.forkserver import serve

def run(job, out):
    pid = os.fork()
    if pid == 0:  # a worker that outlives its job, as a hung DataLoader worker did
        time.sleep(120)
        os._exit(0)
    Path(job).write_text(str(pid))
    Path(out).write_text("{}")

serve([], run, poll_seconds=0.02)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_job_s_leftover_processes_end_with_it(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[3]
    server = subprocess.Popen([sys.executable, "-c", SERVER], cwd=root, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": str(root)})
    assert server.stdin is not None and server.stdout is not None
    job, out = tmp_path / "job", tmp_path / "out.json"
    try:
        server.stdin.write(f"{job}\t{out}\n")
        server.stdin.flush()
        int(server.stdout.readline())
        deadline = time.monotonic() + 30
        while not Path(f"{out}.exit").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert Path(f"{out}.exit").read_text() == "0"
        worker = int(job.read_text())
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(worker)
    finally:
        server.stdin.close()
        server.wait(30)
        server.stdout.close()
