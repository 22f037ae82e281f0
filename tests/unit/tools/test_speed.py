"""aisio.tools.bottleneck: which of loader and training step bounds a run."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

import aisio.tools
from aisio.core.system.timing import StageTimes


class SlowLoader:
    """Yields ``n`` batches, each after ``delay`` seconds (a loader that streams)."""

    def __init__(self, delay: float, n: int = 40) -> None:
        self.delay = delay
        self.n = n

    def __iter__(self) -> Iterator[list[int]]:
        for i in range(self.n):
            time.sleep(self.delay)
            yield [i]


def step_of(seconds: float):  # type: ignore[no-untyped-def]
    def step(batch: list[int]) -> None:
        time.sleep(seconds)

    return step


def test_slow_loader_is_named() -> None:
    result = aisio.tools.bottleneck(SlowLoader(0.01), step_of(0.001), batches=10, warmup=2)
    assert result.bound_by == "loader"
    assert "the loader bounds the run" in result.verdict() and "\n" not in repr(result)
    assert result.streamed > result.cached


def test_slow_step_is_named() -> None:
    result = aisio.tools.bottleneck(SlowLoader(0.0), step_of(0.005), batches=10, warmup=2)
    assert result.bound_by == "step"
    assert "training step bounds the run" in repr(result)


def test_too_few_batches_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no batches after the warm-up"):
        aisio.tools.bottleneck(SlowLoader(0.0, n=2), step_of(0.0), warmup=3)


def test_stage_times_wait_and_summary() -> None:
    times = StageTimes.temporary()
    assert len(list(times.wait_on(SlowLoader(0.005, n=4)))) == 4
    totals = times.totals()
    assert totals["wait_n"] == 4 and totals["wait"] >= 0.015
    assert "training loop waited" in times.summary()


def test_an_epoch_shorter_than_batches_warns_and_times_what_it_had() -> None:
    with pytest.warns(UserWarning, match=r"only 10 batch\(es\).*not batches=50") as caught:
        result = aisio.tools.bottleneck(SlowLoader(0.0, n=13), step_of(0.0), batches=50)
    assert result.batches == 10
    assert caught[0].filename == __file__  # the warning points at the call


def test_stage_times_reset_leaves_out_what_came_before() -> None:
    from aisio.core.system import timing

    times = StageTimes.temporary()
    timing.add("decode", 1.5, 3)
    list(times.wait_on([1, 2]))
    assert times.totals()["decode_n"] == 3 and times.totals()["wait_n"] == 2
    times.reset()  # what a loader does as each epoch starts
    timing.add("decode", 0.5, 1)
    totals = times.totals()
    assert totals["decode_n"] == 1 and totals["decode"] == pytest.approx(0.5)
    assert totals["wait_n"] == 0
