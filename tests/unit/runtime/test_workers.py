"""The pipe from worker processes to the training process (aisio.runtime.workers.widen_pipe)."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import queue

from aisio.runtime.workers import pipe_size, widen_pipe

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
