"""aisio.tools.bottleneck: which of loader and training step bounds a run."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

import aisio.tools
from aisio.core.system.timing import StageTimes


class Clock:
    """A clock that moves only when the code under test 'works' (no timing, no load)."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    """A clock for bottleneck(clock=...) that SlowLoader and step_of advance (no sleeping)."""
    return Clock()


class SlowLoader:
    """Yields ``n`` batches, each after ``delay`` seconds (a loader that streams)."""

    def __init__(self, delay: float, n: int = 40, clock: Clock | None = None) -> None:
        self.delay = delay
        self.n = n
        self.sleep = clock.sleep if clock is not None else time.sleep

    def __iter__(self) -> Iterator[list[int]]:
        for i in range(self.n):
            self.sleep(self.delay)
            yield [i]


def step_of(seconds: float, clock: Clock):  # type: ignore[no-untyped-def]
    def step(batch: list[int]) -> None:
        clock.sleep(seconds)

    return step


def test_slow_loader_is_named(clock: Clock) -> None:
    result = aisio.tools.bottleneck(SlowLoader(0.01, clock=clock), step_of(0.001, clock),
                                    batches=10, warmup=2, clock=clock.perf_counter)
    assert result.bound_by == "loader"
    assert "the loader bounds the run" in result.verdict() and "\n" not in repr(result)
    assert result.streamed > result.cached


def test_slow_step_is_named(clock: Clock) -> None:
    result = aisio.tools.bottleneck(SlowLoader(0.0, clock=clock), step_of(0.005, clock),
                                    batches=10, warmup=2, clock=clock.perf_counter)
    assert result.bound_by == "step"
    assert "training step bounds the run" in repr(result)


def test_too_few_batches_is_a_clear_error(clock: Clock) -> None:
    with pytest.raises(ValueError, match="no batches after the warm-up"):
        aisio.tools.bottleneck(SlowLoader(0.0, n=2), step_of(0.0, clock), warmup=3,
                                clock=clock.perf_counter)


def test_stage_times_wait_and_summary() -> None:
    times = StageTimes.temporary()
    assert len(list(times.wait_on(SlowLoader(0.005, n=4)))) == 4
    totals = times.totals()
    assert totals["wait_n"] == 4 and totals["wait"] >= 0.015
    assert "training loop waited" in times.summary()


def test_an_epoch_shorter_than_batches_warns_and_times_what_it_had(clock: Clock) -> None:
    with pytest.warns(UserWarning, match=r"only 10 batch\(es\).*not batches=50") as caught:
        result = aisio.tools.bottleneck(SlowLoader(0.0, n=13), step_of(0.0, clock),
                                        batches=50, clock=clock.perf_counter)
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
