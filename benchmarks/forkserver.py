"""A fork server for benchmark jobs: imports the heavy modules once, then forks a child per job.

Standard library only: the suite runs it in the project's environments
(``benchmarks.suite.run --serve``) and in each peer's (``benchmarks.peers.side --serve``),
where aisio is not installed.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import select
import signal
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path


def serve(preload: Iterable[str], run: Callable[[str, str], None], *,
          poll_seconds: float) -> None:
    """Imports ``preload`` (those that import), then for each ``JOB.json<TAB>OUT.json`` line on
    stdin forks a child that calls ``run(job, out)``, answers its pid on stdout, and writes its
    exit code to ``OUT.json.exit`` once it has ended. Single-threaded (the children are forked
    from it). Each job runs in a process group of its own, killed whole once the job has
    ended (nothing it started outlives it); when stdin closes, the jobs still running are
    killed too, and the server ends once every child is reaped."""
    answers = os.fdopen(os.dup(1), "w")  # the pids; anything else printed goes to stderr
    os.dup2(2, 1)
    for name in preload:
        with contextlib.suppress(ImportError):  # (not every module is in every environment)
            importlib.import_module(name)
    children: dict[int, str] = {}
    stdin = sys.stdin.fileno()
    pending, open_ = b"", True
    while open_ or children:
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                # Whatever the job left behind in its process group goes with it: a DataLoader
                # worker whose job ended on an error can hang for ever (one forked after the
                # AWS CRT's threads started was found asleep on a futex, reparented to init).
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
                with contextlib.suppress(OSError):  # (its folder is gone if it was given up)
                    Path(f"{children.pop(pid)}.exit").write_text(
                        str(os.waitstatus_to_exitcode(status)))
        if not open_:
            time.sleep(poll_seconds)
            continue
        ready, _, _ = select.select([stdin], [], [], poll_seconds)
        if not ready:
            continue
        chunk = os.read(stdin, 65536)
        if not chunk:  # the suite is done with us (or was interrupted): no job outlives it
            open_ = False
            for pid in children:
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
            continue
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            job, out = line.decode().split("\t")
            pid = os.fork()
            if pid == 0:  # the job, in a process group of its own (its workers join it)
                code = 1
                try:
                    os.setpgid(0, 0)
                    os.close(stdin)
                    answers.close()
                    run(job, out)
                    code = 0
                finally:
                    os._exit(code)
            children[pid] = out
            answers.write(f"{pid}\n")
            answers.flush()
