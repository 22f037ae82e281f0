"""The pipe from worker processes to the training process (aisio.runtime.workers.widen_pipe),
and what a worker does as it starts."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import queue
from pathlib import Path
from typing import Any

import pytest

from aisio.core.faults.errors import ConfigError
from aisio.runtime.workers import PIPE_BYTES, pipe_bytes, pipe_size, widen_pipe

_LIMIT = pipe_size()


def _written_without_a_reader(results: multiprocessing.queues.Queue, size: int) -> int:
    """Returns how many of ``size`` bytes a worker's write puts in the pipe with nobody
    reading (the write would block at that point)."""
    fd = results._writer.fileno()  # type: ignore[attr-defined]
    os.set_blocking(fd, False)
    written = 0
    try:
        while written < size:
            written += os.write(fd, bytes(min(65536, size - written)))
    except BlockingIOError:
        pass
    return written


def test_a_widened_pipe_takes_a_batch_of_small_samples_without_waiting() -> None:
    """A batch of 64 x 2 KiB samples pickles to about 135 KB: a default pipe (64 KiB) takes
    half of it before the writer waits for the reader, a widened one takes it whole."""
    context = multiprocessing.get_context("fork")
    default, widened = context.Queue(), context.Queue()
    try:
        assert widen_pipe(widened)
        assert fcntl.fcntl(widened._reader.fileno(), fcntl.F_GETPIPE_SZ) == _LIMIT
        assert _written_without_a_reader(default, 135_000) < 135_000
        assert _written_without_a_reader(widened, 135_000) == 135_000
    finally:
        for results in (default, widened):
            results.close()


def test_what_has_no_pipe_to_widen_is_left_as_it_is() -> None:
    closed = multiprocessing.get_context("fork").Queue()
    closed._reader.close()  # type: ignore[attr-defined]
    assert not widen_pipe(object())
    assert not widen_pipe(queue.Queue())  # a thread queue
    assert not widen_pipe(closed)
    closed.close()


class _Finalized:
    """Records in a file which process finalized it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.cycle = self  # only the collector frees it

    def __del__(self) -> None:
        with open(self.path, "a") as out:
            out.write(f"{os.getpid()}\n")


def _collect_in_child() -> None:
    import gc

    from aisio.runtime.workers import keep_inherited

    keep_inherited()
    gc.collect()


def test_the_training_process_garbage_is_never_finalized_in_a_worker(tmp_path: Path) -> None:
    import gc

    from aisio.runtime.workers import collect_before_fork

    log = tmp_path / "finalized"
    gc.disable()  # the garbage below waits for a collection, as a dropped loader may
    try:
        _Finalized(str(log))
        worker = multiprocessing.get_context("fork").Process(target=_collect_in_child)
        worker.start()
        worker.join(10)
        # a worker that collected it would have finalized the parent's object
        assert not log.exists()
        _Finalized(str(log))
        collect_before_fork()
        assert log.read_text().split() == [str(os.getpid())] * 2  # here, both
    finally:
        gc.enable()


def _collect_at_once() -> None:
    import gc

    gc.collect()  # before any worker_init_fn could freeze what it inherited


def _fork(target: Any) -> None:
    worker = multiprocessing.get_context("fork").Process(target=target)
    worker.start()
    worker.join(10)
    assert worker.exitcode == 0


def test_forking_with_no_worker_alive_leaves_the_garbage_to_the_training_process(
        tmp_path: Path) -> None:
    """No full collection before the fork (nothing of a loader's to stop), yet a worker that
    collects at once never finalizes what it inherited: the training process does, later."""
    import gc

    from aisio.runtime.workers import forking

    log = tmp_path / "finalized"
    gc.disable()
    try:
        assert not multiprocessing.active_children()
        _Finalized(str(log))
        with forking():
            _fork(_collect_at_once)
        assert not log.exists()
        gc.collect()
        assert log.read_text().split() == [str(os.getpid())]
    finally:
        gc.enable()


def test_forking_beside_live_workers_collects_first(tmp_path: Path) -> None:
    """A dropped loader's workers are alive: its garbage is collected before the fork."""
    import gc

    from aisio.runtime.workers import forking

    log = tmp_path / "finalized"
    context = multiprocessing.get_context("fork")
    stop = context.Event()
    live = context.Process(target=stop.wait, args=(10,))
    live.start()
    gc.disable()
    try:
        _Finalized(str(log))
        with forking():
            assert log.read_text().split() == [str(os.getpid())]
    finally:
        gc.enable()
        stop.set()
        live.join(10)


def test_forking_leaves_the_users_own_freeze_alone() -> None:
    import gc

    from aisio.runtime.workers import forking

    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with forking():
            pass
        # Frozen objects may still die meanwhile (another thread's: pytest-xdist's), so the
        # count may fall a little; forking() undoing the user's freeze would make it 0.
        assert gc.get_freeze_count() > frozen // 2 > 0
    finally:
        gc.unfreeze()


def test_aisio_pipe_bytes_is_read_as_a_pipe_is_widened(monkeypatch: pytest.MonkeyPatch) -> None:
    """AISIO_PIPE_BYTES is read when a pipe is widened (it was read once, at import); a value
    that is not a size is a ConfigError naming it and the fix."""
    monkeypatch.delenv("AISIO_PIPE_BYTES", raising=False)
    assert pipe_bytes() == PIPE_BYTES
    monkeypatch.setenv("AISIO_PIPE_BYTES", "0")
    assert pipe_bytes() == 0
    results = multiprocessing.get_context("fork").Queue()
    try:
        assert not widen_pipe(results)  # 0: left as the system makes it
    finally:
        results.close()
    for wrong in ("1MiB", "-1"):
        monkeypatch.setenv("AISIO_PIPE_BYTES", wrong)
        with pytest.raises(ConfigError, match=f"AISIO_PIPE_BYTES='{wrong}' .* whole number"):
            pipe_bytes()
