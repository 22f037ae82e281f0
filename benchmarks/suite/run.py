"""Runs each benchmark arm in a fresh process and measures its time and peak memory.

Parent side: :func:`run_isolated` starts the arm in a child forked from a *forkserver* (a clean
process that has imported aisio, torch, the SDK and webdataset once, so each arm starts in
milliseconds without inheriting the suite's own memory), polls the resident memory of the child
and all its descendants (DataLoader2 workers, curl) from ``/proc`` every 20 ms, and reads the
child's JSON result.

An arm of the other torchdata environment (``.venv-td011``) starts the same way from that
environment's own server (:class:`_Server`: ``python -m benchmarks.suite.run --serve``, started
once per suite run, which imports the same modules once and forks a child per arm), not from
a new interpreter per arm (3-4 s each, mostly importing torch).

Child side: :func:`run_job` sets the arm up, runs the warm-up passes, then the timed passes,
checking every pass's byte and sample counts against the dataset.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import multiprocessing
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.forkserver import serve
from benchmarks.suite.arms import ARMS, Counts, Job

_PAGE = os.sysconf("SC_PAGE_SIZE")
_POLL_SECONDS = 0.02
_PRELOAD = ["benchmarks.suite.run", "benchmarks.suite.keepup", "webdataset", "aistore.sdk"]
_context: Any = None


def self_rss() -> int:
    """Returns this process's resident set size in bytes."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * _PAGE


def descendants(pid: int) -> list[int]:
    """Returns the pids of every descendant of ``pid`` (children, their children, ...)."""
    found: list[int] = []
    stack = [pid]
    while stack:
        each = stack.pop()
        try:
            for tid in os.listdir(f"/proc/{each}/task"):
                with open(f"/proc/{each}/task/{tid}/children") as fh:
                    children = [int(child) for child in fh.read().split()]
                found.extend(children)
                stack.extend(children)
        except (OSError, ValueError):
            continue  # the process ended while we looked
    return found


def rss(pid: int) -> int:
    """Returns the resident set size of ``pid`` in bytes (0 once it has ended)."""
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, ValueError):
        return 0


def private_memory(pid: int) -> int:
    """Returns the memory only ``pid`` uses (private clean + dirty pages), in bytes."""
    total = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith(("Private_Clean:", "Private_Dirty:")):
                    total += int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return 0
    return total


class PeakMemory:
    """Tracks the peak memory of a process tree: the root's RSS plus its descendants' own pages.

    A forked child (a DataLoader2 worker, a fork about to exec curl) shares its parent's pages
    copy-on-write; its RSS would count them again, so a descendant counts with its *private*
    pages only (``smaps_rollup``: what it copied or allocated itself). That file is slow to read
    (several ms), so descendants are re-read every ``private_every`` seconds; the root's RSS is
    read at every poll.
    """

    def __init__(self, pid: int, private_every: float = 0.25) -> None:
        self.pid = pid
        self.peak = 0
        self.private_every = private_every
        self._private: dict[int, int] = {}
        self._read_at = 0.0

    def poll(self) -> None:
        """Reads the tree once and updates :attr:`peak`."""
        now = time.monotonic()
        if now - self._read_at >= self.private_every:
            self._private = {child: private_memory(child) for child in descendants(self.pid)}
            self._read_at = now
        self.peak = max(self.peak, rss(self.pid) + sum(self._private.values()))


def _maxrss(who: int) -> int:
    return resource.getrusage(who).ru_maxrss * 1024  # kilobytes on Linux


def _check(job: Job, counts: Counts) -> None:
    nbytes, samples = counts
    if nbytes != job.nbytes or samples != job.samples:
        raise AssertionError(
            f"arm {job.arm} read {nbytes:,} bytes / {samples:,} samples of {job.workload}; "
            f"the dataset has {job.nbytes:,} / {job.samples:,}"
        )


def run_job(job: Job) -> dict[str, Any]:
    """Returns the timings of ``job`` (child side): warm-up passes, then ``job.repeat`` timed.

    Raises:
        AssertionError: a pass read a different number of bytes or samples than the dataset has.
    """
    run = ARMS[job.kind][job.arm].setup(job)
    try:
        base = self_rss()
        for _ in range(job.warmup):
            _check(job, run())
        times, epoch_times = [], []
        for _ in range(job.repeat):
            start = time.perf_counter()
            counts = run()
            times.append(time.perf_counter() - start)
            _check(job, counts)
            epoch_times.append(list(getattr(run, "epoch_times", [])))
    finally:
        close = getattr(run, "close", None)
        if close is not None:
            close()
    return {"times": times, "epoch_times": epoch_times, "base_rss": base,
            "self_maxrss": _maxrss(resource.RUSAGE_SELF),
            "children_maxrss": _maxrss(resource.RUSAGE_CHILDREN)}


def _child(fn: Callable[[Any], dict[str, Any]], arg: Any, out: str, start_method: str) -> None:
    # A forkserver child inherits the forkserver start method; DataLoader2 workers must start the
    # way they do in the user's process (fork on Linux), not from the suite's forkserver.
    multiprocessing.set_start_method(start_method, force=True)
    try:
        result = {"ok": True, **fn(arg)}
    except BaseException as exc:  # reported to the parent, which goes on with the next arm
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                  "traceback": traceback.format_exc(limit=8)}
    Path(out).write_text(json.dumps(result))


def _get_context() -> Any:
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(_PRELOAD)
    return _context


def run_arm(job: Job, *, timeout: float) -> dict[str, Any]:
    """Returns :func:`run_job` of ``job`` from a fresh process: forked from the forkserver, or,
    for an arm of the other torchdata environment, that environment's interpreter."""
    python = ARMS[job.kind][job.arm].python
    if python is None:
        return run_isolated(run_job, job, timeout=timeout)
    with tempfile.TemporaryDirectory(prefix="aisio-bench-") as tmp:
        spec, out = Path(tmp, "job.json"), Path(tmp, "result.json")
        spec.write_text(json.dumps(dataclasses.asdict(job)))
        server = _Server.of(python)
        pid = server.start(spec, out)
        if pid is None:
            return {"ok": False, "error": f"the arm server of {python} is gone",
                    "peak_rss": 0}
        exit_file = Path(f"{out}.exit")

        def poll() -> int | None:
            try:
                return int(exit_file.read_text())
            except (OSError, ValueError):
                return None

        def kill() -> None:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 5
            while poll() is None and time.monotonic() < deadline:
                time.sleep(_POLL_SECONDS)

        return _watch(pid, poll, kill, out, timeout)


class _Server:
    """A process of another environment's interpreter that has imported the arms' modules and
    forks a child per arm (``python -m benchmarks.suite.run --serve``). One per interpreter
    for the suite's run; it ends when the suite does (its stdin closes)."""

    def __init__(self, python: str) -> None:
        root = Path(__file__).resolve().parents[2]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(root), *filter(None, [os.environ.get("PYTHONPATH")])])}
        self.proc = subprocess.Popen([python, "-m", "benchmarks.suite.run", "--serve"],
                                     cwd=root, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    @classmethod
    def of(cls, python: str) -> _Server:
        """Returns the running server of ``python``, started on first use."""
        with _SERVERS_LOCK:
            server = _SERVERS.get(python)
            if server is None or server.proc.poll() is not None:
                server = _SERVERS[python] = cls(python)
                atexit.register(server.close)
            return server

    def start(self, spec: Path, out: Path) -> int | None:
        """Starts the arm of ``spec`` (its result goes to ``out``, its exit code to
        ``<out>.exit``); returns the arm's pid, None if the server has ended."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(f"{spec}\t{out}\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except (OSError, ValueError):
            return None
        return int(line) if line.strip() else None

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


_SERVERS: dict[str, _Server] = {}
_SERVERS_LOCK = threading.Lock()


def _serve() -> None:
    """``python -m benchmarks.suite.run --serve``: imports the arms' modules once, then runs
    each arm in a child forked from it (:func:`benchmarks.forkserver.serve`)."""
    serve(["torch", "aisio", *_PRELOAD], lambda job, out: _main([job, out]),
          poll_seconds=_POLL_SECONDS)


def _watch(pid: int, poll: Callable[[], Any], kill: Callable[[], None], out: Path,
           timeout: float) -> dict[str, Any]:
    """Returns the result an arm's process writes to ``out``, with the peak memory of its tree."""
    memory = PeakMemory(pid)
    deadline = time.monotonic() + timeout
    while poll() is None:
        memory.poll()
        if time.monotonic() > deadline:
            kill()
            return {"ok": False, "error": f"timed out after {timeout:.0f} s",
                    "peak_rss": memory.peak}
        time.sleep(_POLL_SECONDS)
    try:
        result: dict[str, Any] = json.loads(out.read_text())
    except (OSError, ValueError):
        result = {"ok": False, "error": f"the arm's process died (exit code {poll()})"}
    result["peak_rss"] = max(memory.peak, int(result.get("self_maxrss", 0)))
    return result


def run_isolated(fn: Callable[[Any], dict[str, Any]], arg: Any, *, timeout: float
                 ) -> dict[str, Any]:
    """Returns ``fn(arg)`` run in a fresh process, with ``peak_rss`` (bytes) of its process tree.

    The result has ``ok``; on failure (an exception, a crash, or ``timeout`` seconds passed) it
    has ``error`` instead of ``fn``'s keys.
    """
    with tempfile.TemporaryDirectory(prefix="aisio-bench-") as tmp:
        out = os.path.join(tmp, "result.json")
        method = multiprocessing.get_start_method()
        proc = _get_context().Process(target=_child, args=(fn, arg, out, method), daemon=False)
        proc.start()
        assert proc.pid is not None

        def poll() -> int | None:
            proc.join(0)
            return proc.exitcode

        def kill() -> None:
            proc.kill()
            proc.join()

        return _watch(proc.pid, poll, kill, Path(out), timeout)


def _main(argv: list[str]) -> None:
    """``python -m benchmarks.suite.run JOB.json OUT.json``: one arm in this interpreter."""
    fields = json.loads(Path(argv[0]).read_text())
    job = Job(**{**fields, "names": tuple(fields["names"])})
    _child(run_job, job, argv[1], multiprocessing.get_start_method())


__all__ = ["PeakMemory", "descendants", "private_memory", "rss", "run_arm", "run_isolated",
           "run_job", "self_rss"]

if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        _serve()
    else:
        _main(sys.argv[1:])
