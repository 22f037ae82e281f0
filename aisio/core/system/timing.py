"""Where a loader spends its time, per stage: cheap enough to leave on.

Each process keeps running totals (seconds and counts) per stage: ``read`` (waiting on the
network or cache inside tar parsing), ``parse`` (tar parsing and grouping, reads excluded),
``decode`` (decoding and picking fields). Adding to them costs two ``perf_counter`` calls per
member or sample. :class:`StageTimes` gathers the totals of every process that iterates a
pipeline (DataLoader2 workers included, through a 48-byte file each process rewrites after
every decoded sample and every 256 tar members) and adds ``wait``, the time the training loop
waited for the next batch.
"""

from __future__ import annotations

import os
import struct
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

STAGES = ("read", "parse", "decode")

_totals: dict[str, float] = dict.fromkeys(STAGES, 0.0)
_counts: dict[str, int] = dict.fromkeys(STAGES, 0)
_RECORD = struct.Struct("<3d3q")  # seconds per stage, then counts per stage
_sink: Path | None = None
_sink_fd: int | None = None
_follows_forks = False  # the fork handler is registered in this process (and its forks)


def add(stage: str, seconds: float, count: int = 1) -> None:
    """Adds ``seconds`` (and ``count`` items) to this process's total for ``stage``."""
    _totals[stage] += seconds
    _counts[stage] += count


def snapshot() -> dict[str, Any]:
    """Returns this process's totals: ``{stage: seconds, "<stage>_n": count}``."""
    out: dict[str, Any] = dict(_totals)
    out.update({f"{stage}_n": n for stage, n in _counts.items()})
    return out


def reset() -> None:
    """Sets this process's totals to zero."""
    for stage in STAGES:
        _totals[stage] = 0.0
        _counts[stage] = 0


def attach(directory: Path) -> None:
    """Makes this process write its totals into ``directory`` (one small file per process);
    a process forked from it from then on starts from zero and writes a file of its own."""
    global _sink, _sink_fd, _follows_forks
    if not _follows_forks:  # registered here, where it is first needed, not at import
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _follows_forks = True
    path = directory / f"{os.getpid()}.times"
    if _sink == path:
        return
    if _sink_fd is not None:
        os.close(_sink_fd)
    _sink = path
    _sink_fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    flush()


def flush() -> None:
    """Writes this process's totals to its file (one 48-byte ``pwrite``; no-op unattached)."""
    if _sink_fd is not None:
        os.pwrite(_sink_fd, _RECORD.pack(*_totals.values(), *_counts.values()), 0)


def _after_fork_in_child() -> None:
    """A forked worker starts from zero and reports to a file of its own."""
    global _sink
    reset()
    if _sink is not None:
        directory, _sink = _sink.parent, None
        attach(directory)


def _read_record(path: Path) -> dict[str, Any] | None:
    data = path.read_bytes()
    if len(data) != _RECORD.size:
        return None
    values = _RECORD.unpack(data)
    out: dict[str, Any] = dict(zip(STAGES, values[:3], strict=True))
    out.update({f"{stage}_n": n for stage, n in zip(STAGES, values[3:], strict=True)})
    return out


def _alive(path: Path) -> bool:
    """Whether the process a ``<pid>.times`` file belongs to is running."""
    try:
        os.kill(int(path.stem), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


class StageTimes:
    """The per-stage totals of every process iterating a pipeline, and the training loop's wait.

    Picklable: a pipeline stage holding it attaches each worker process to its directory.

    Example:
        >>> times = StageTimes.temporary()
        >>> for batch in times.wait_on([1, 2, 3]):
        ...     pass
        >>> times.totals()["wait_n"]
        3
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self._wait = 0.0
        self._waits = 0
        self._base: dict[str, Any] = {}
        self._bases: dict[Path, dict[str, Any]] = {}  # other processes' totals at reset()

    @classmethod
    def temporary(cls) -> StageTimes:
        """Returns a StageTimes over a new temporary directory, counting from now."""
        times = cls(tempfile.mkdtemp(prefix="aisio-times-"))
        times.start()
        return times

    def start(self) -> None:
        """Counts from now: this process's earlier totals are left out."""
        attach(self.directory)
        self._base = snapshot()
        self._wait = 0.0
        self._waits = 0
        for stale in self.directory.glob("*.times"):
            if stale != _sink:
                stale.unlink(missing_ok=True)

    def reset(self) -> None:
        """Counts from now in every process (the loaders call it as each epoch starts, so that
        ``loader.timings`` covers the current or last epoch): totals so far are left out, and
        the training loop's wait starts at zero."""
        flush()
        self._base = snapshot()
        self._wait = 0.0
        self._waits = 0
        self._bases = {}
        for path in self.directory.glob("*.times"):
            if path == _sink:
                continue
            if not _alive(path):  # a past epoch's worker: its file could be a new one's later
                path.unlink(missing_ok=True)
                continue
            try:
                record = _read_record(path)
            except OSError:
                continue
            if record is not None:
                self._bases[path] = record

    def attach(self) -> None:
        """Makes the calling process report to this StageTimes (called from worker stages)."""
        attach(self.directory)

    def wait_on(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """Yields from ``iterable``, adding the time spent waiting for each item to ``wait``."""
        iterator = iter(iterable)
        while True:
            start = time.perf_counter()
            try:
                item = next(iterator)
            except StopIteration:
                return
            self._wait += time.perf_counter() - start
            self._waits += 1
            yield item

    def totals(self) -> dict[str, Any]:
        """Returns the summed totals of every process, and ``wait``/``wait_n``."""
        flush()
        total: dict[str, Any] = dict.fromkeys(STAGES, 0.0)
        total.update({f"{stage}_n": 0 for stage in STAGES})
        for path in self.directory.glob("*.times"):
            try:
                each = _read_record(path)
            except OSError:
                continue
            if each is None:
                continue
            base = self._base if path == _sink else self._bases.get(path, {})
            each = {k: v - base.get(k, 0) for k, v in each.items()}  # since start() or reset()
            for key, value in each.items():
                total[key] = total.get(key, 0) + value
        total["wait"] = self._wait
        total["wait_n"] = self._waits
        return total

    def summary(self) -> str:
        """Returns one line: seconds per stage (summed over processes) and the loop's wait,
        since the current (or last) epoch began."""
        t = self.totals()
        parts = [f"{stage} {t[stage]:.2f} s" for stage in STAGES]
        return (f"{', '.join(parts)} (summed over processes; {t['parse_n']} tar members, "
                f"{t['decode_n']} samples); training loop waited {t['wait']:.2f} s for "
                f"{t['wait_n']} batches")

    def __repr__(self) -> str:
        return f"StageTimes({self.summary()})"

    def __getstate__(self) -> dict[str, Any]:
        return {"directory": self.directory}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["directory"])  # type: ignore[misc]
        attach(self.directory)  # unpickled in a worker process: report there


__all__ = ["STAGES", "StageTimes", "add", "attach", "flush", "reset", "snapshot"]
