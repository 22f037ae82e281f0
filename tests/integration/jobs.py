"""Job processes for the integration tests, forked from one warm process instead of started cold.

The resume tests run training jobs (``_train_job.py``, ``_dist_job.py``) as processes of their
own: killed mid-epoch, resumed in a new process, several ranks at once; about 30 per loader.
A new interpreter spends 3-5 s importing torch, torchdata and aisio before the job's first line,
more than most jobs take after it. :class:`JobServer` imports them once (``python -m
tests.integration.jobs``, one per test session) and forks a child per job, which runs the
script as ``__main__`` with its arguments, in a session (and process group) of its own, its
stdout to /dev/null and its stderr to a file: what ``subprocess.Popen(..., start_new_session=
True)`` of the script gives, less the imports. :class:`Job` is the handle (``pid``, ``poll``,
``wait``, ``returncode``); ``os.killpg(job.pid, SIGKILL)`` kills the job and its workers.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: what the server imports before it forks (what every job imports first)
PRELOAD = ("torch", "torch.distributed", "aisio", "aisio.loaders.torch", "aisio.loaders.nodes",
           "aisio.datapipes.dataloader2", "webdataset")
_POLL = 0.01
_LEFT = 10.0
"""Seconds the server waits for jobs still running when the session ends, then kills them."""


class Job:
    """A job the server forked: ``poll()``/``wait()``/``returncode`` as a ``Popen`` has them
    (``-9`` for a job killed by SIGKILL); ``pid`` is also its process group."""

    def __init__(self, pid: int, exit_file: Path) -> None:
        self.pid = pid
        self.exit_file = exit_file
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and self.exit_file.exists():
            text = self.exit_file.read_text()
            if text.endswith("\n"):  # written whole
                self.returncode = int(text)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"job {self.pid}", timeout or 0.0)
            time.sleep(_POLL)
        assert self.returncode is not None
        return self.returncode


class JobServer:
    """The session's server (see the module's doc); :meth:`shared` starts it on first use."""

    _shared: JobServer | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.integration.jobs"], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._count = 0

    @classmethod
    def shared(cls) -> JobServer:
        with cls._lock:
            if cls._shared is None or cls._shared.proc.poll() is not None:
                cls._shared = cls()
                atexit.register(cls._shared.close)
            return cls._shared

    def start(self, argv: list[str], stderr: Path) -> Job:
        """Returns the job running ``argv`` (``[script, args...]``), its stderr to ``stderr``."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._count += 1
        exit_file = stderr.with_name(f"{stderr.name}.exit{self._count}")
        order = {"argv": [str(a) for a in argv], "stderr": str(stderr), "exit": str(exit_file)}
        self.proc.stdin.write(json.dumps(order) + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer.strip():
            raise RuntimeError(f"the job server ended (exit code {self.proc.poll()})")
        return Job(int(answer), exit_file)

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def popen(cmd: list[str], stderr: Path) -> Job | subprocess.Popen[bytes]:
    """Starts ``cmd`` (``[sys.executable, script, args...]``) from the job server; anything else
    as a new process, as ``Popen(..., start_new_session=True)`` with stderr to ``stderr``."""
    if cmd[0] == sys.executable and cmd[1].endswith(".py"):
        return JobServer.shared().start(cmd[1:], stderr)
    with open(stderr, "w") as err:
        return subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL,
                                stderr=err)


# ---- the server ------------------------------------------------------------------------------


def _run_job(order: dict[str, str], closing: list[int], ready: int) -> None:
    """In the forked child: becomes the job, and exits with its exit code."""
    code = 1
    try:
        os.setsid()
        os.write(ready, b".")  # its group exists: the server may answer its pid
        for fd in [*closing, ready]:
            os.close(fd)
        null = os.open(os.devnull, os.O_RDWR)
        err = os.open(order["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(err, 2)
        sys.argv = order["argv"]
        sys.path[0] = str(Path(order["argv"][0]).resolve().parent)  # as `python script.py`
        try:
            runpy.run_path(order["argv"][0], run_name="__main__")
            code = 0
        except SystemExit as exc:  # sys.exit(n), sys.exit("message") or sys.exit()
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve() -> None:
    """Imports :data:`PRELOAD`, then for each JSON order on stdin forks a job, answers its pid
    on stdout, and writes its exit code to the order's exit file once it has ended. Ends when
    stdin closes and every job has ended."""
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything an import prints goes to stderr, not into the answers
    for name in PRELOAD:
        with contextlib.suppress(ImportError):  # (DataLoader2, nodes: one environment each)
            importlib.import_module(name)
    stdin = sys.stdin.fileno()
    children: dict[int, str] = {}
    pending, open_ = b"", True
    closed_at = 0.0
    while open_ or children:
        if not open_ and time.monotonic() - closed_at > _LEFT:
            for pid in children:  # left running by a test that failed: their groups go
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
            closed_at = time.monotonic()
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                exit_file = Path(children.pop(pid))
                with contextlib.suppress(OSError):  # (its folder may be gone)
                    staging = exit_file.with_name(exit_file.name + ".new")
                    staging.write_text(f"{os.waitstatus_to_exitcode(status)}\n")
                    os.replace(staging, exit_file)
        if not open_:
            time.sleep(_POLL)
            continue
        ready, _, _ = select.select([stdin], [], [], _POLL)
        if not ready:
            continue
        chunk = os.read(stdin, 65536)
        if not chunk:
            open_, closed_at = False, time.monotonic()
            continue
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            order = json.loads(line)
            ready, told = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(ready)
                _run_job(order, [stdin, answers.fileno()], told)
            os.close(told)
            os.read(ready, 1)  # as Popen(start_new_session=True) returns: after the setsid
            os.close(ready)
            children[pid] = order["exit"]
            answers.write(f"{pid}\n")
            answers.flush()


if __name__ == "__main__":
    serve()
