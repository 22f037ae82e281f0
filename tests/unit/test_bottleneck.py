"""aisio.tools.bottleneck: which of loader and training step bounds a run."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

import aisio.tools
from aisio.core.timing import StageTimes


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
