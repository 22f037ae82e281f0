"""PoolMapper: torchdata.nodes' mapping with workers that live across resets."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

nodes = pytest.importorskip("torchdata.nodes", reason="torchdata.nodes needs torchdata >= 0.10")

from aisio.loaders.nodes_pool import PoolMapper  # noqa: E402
from tests.conftest import thread_token  # noqa: E402


class Counting(nodes.BaseNode):  # type: ignore[misc]
    """Yields 0..n-1 after each reset; counts how far it was read."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self.at = 0

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self.at = 0

    def next(self) -> int:
        if self.at >= self.n:
            raise StopIteration
        self.at += 1
        return self.at - 1

    def get_state(self) -> dict[str, Any]:
        return {"at": self.at}


def _slow_square(x: int) -> tuple[int, tuple[int, int]]:
    time.sleep(0.02 if x % 3 == 0 else 0.001)  # every third one finishes late
    assert threading.current_thread().name.startswith("aisio-map")
    return x * x, thread_token()


def test_in_order_results_from_the_same_threads_every_epoch() -> None:
    mapper = PoolMapper(Counting(12), _slow_square, 3)
    threads = []
    try:
        for _ in range(3):
            mapper.reset()
            got = _drain(mapper)
            assert [value for value, _ in got] == [x * x for x in range(12)]
            threads.append({token for _, token in got})
    finally:
        mapper.shutdown()
    served = threads[0] | threads[1] | threads[2]  # (which thread maps what: the pool's choice)
    assert 1 <= len(served) <= 3 and thread_token() not in served  # the pool's 3, every epoch


def test_out_of_order_hands_out_what_finished_first_and_loses_nothing() -> None:
    mapper = PoolMapper(Counting(30), _slow_square, 3, in_order=False)
    try:
        mapper.reset()
        got = [value for value, _ in _drain(mapper)]
    finally:
        mapper.shutdown()
    assert sorted(got) == [x * x for x in range(30)]
    assert got != [x * x for x in range(30)]  # the late ones came later


def test_a_reset_mid_epoch_drops_what_was_in_flight() -> None:
    source = Counting(20)
    mapper = PoolMapper(source, _slow_square, 2)
    try:
        mapper.reset()
        assert mapper.next()[0] == 0
        assert source.at == 4  # read ahead: 2 x workers in flight
        mapper.reset()
        assert [value for value, _ in _drain(mapper)] == [x * x for x in range(20)]
    finally:
        mapper.shutdown()


def _drain(mapper: PoolMapper) -> list[Any]:
    out = []
    while True:
        try:
            out.append(mapper.next())
        except StopIteration:
            return out


def _square(x: int) -> int:
    return x * x


def test_processes_send_and_return_batches_through_widened_pipes() -> None:
    """Both pipes of the process pool (items out, results back) are widened, and what goes
    through them arrives whole (see aisio.runtime.workers.widen_pipe)."""
    import fcntl

    from aisio.runtime.workers import pipe_size

    wide = pipe_size()
    mapper = PoolMapper(Counting(20), _square, 2, method="process")
    try:
        mapper.reset()
        assert _drain(mapper) == [x * x for x in range(20)]
        pool = mapper._pool
        sizes = [fcntl.fcntl(queue._reader.fileno(), fcntl.F_GETPIPE_SZ)
                 for queue in (pool._call_queue, pool._result_queue)]
        assert sizes == [wide, wide]
    finally:
        mapper.shutdown()
