"""Is my loader the bottleneck? The streaming-benchmark method, on your own training step.

Three timings, per batch: the loader alone, your step on batches as they stream in, and the same
step repeated on one batch held in memory. When the streamed step costs about what the cached
step does, the step bounds the run (a faster loader buys nothing); when it costs clearly more,
the loader does, by the difference.
"""

from __future__ import annotations

import itertools
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

_SLACK = 1.10
"""Streamed steps within 10% of cached ones count as bound by the step."""


@dataclass(frozen=True)
class Bottleneck:
    """Seconds per batch: loader alone, step on streamed batches, step on one cached batch."""

    loader: float
    streamed: float
    cached: float
    batches: int

    @property
    def bound_by(self) -> str:
        """``"loader"`` or ``"step"``: what limits the run."""
        return "loader" if self.streamed > self.cached * _SLACK else "step"

    def verdict(self) -> str:
        """Returns one line saying what bounds the run and by how much."""
        ms = 1e3
        if self.bound_by == "loader":
            return (f"the loader bounds the run: a streamed step takes {self.streamed * ms:.1f} ms,"
                    f" the same step on a cached batch {self.cached * ms:.1f} ms; each step waits "
                    f"~{(self.streamed - self.cached) * ms:.1f} ms for data (loader alone "
                    f"{self.loader * ms:.1f} ms/batch): add workers, cache or batch_get")
        return (f"the training step bounds the run: a streamed step takes "
                f"{self.streamed * ms:.1f} ms, on a cached batch {self.cached * ms:.1f} ms "
                f"(loader alone {self.loader * ms:.1f} ms/batch): a faster loader would not help")

    def __repr__(self) -> str:
        return f"Bottleneck({self.verdict()}; {self.batches} batches)"


def _per_batch(batches: Iterable[Any], n: int, skip: int, fn: Callable[[Any], Any] | None,
               clock: Callable[[], float]) -> tuple[float, int]:
    iterator = iter(batches)
    for batch in itertools.islice(iterator, skip):
        if fn is not None:
            fn(batch)
    done = 0
    start = clock()
    for batch in itertools.islice(iterator, n):
        if fn is not None:
            fn(batch)
        done += 1
    if not done:
        raise ValueError("the loader yielded no batches after the warm-up; lower warmup= or "
                         "give it more data")
    return (clock() - start) / done, done


def bottleneck(loader: Iterable[Any], step: Callable[[Any], Any], batches: int = 50, *,
               warmup: int = 3, clock: Callable[[], float] = time.perf_counter) -> Bottleneck:
    """Times ``step`` on streamed batches against the same step on one cached batch.

    Args:
        loader: anything iterable over batches (a DataLoader2, a DataLoader, a DataPipe); it is
            iterated twice (it must start over each time, as loaders do per epoch).
        step: your training step, called with one batch (synchronise the GPU inside it, e.g.
            ``torch.cuda.synchronize()``, or the timing only sees the launch).
        batches: batches timed in each of the three runs (each run is one pass over the
            loader: an epoch shorter than ``warmup + batches`` warns, and the timings rest on
            the batches it had).
        warmup: batches run first and not timed (worker start-up, first-batch latency).
        clock: what the timings read (seconds); ``time.perf_counter`` unless you pass your own.

    Example:
        A step that takes 5 ms, on a clock that only the step moves (so that the example reads
        the same on any machine); your own run leaves ``clock`` out.

        >>> now = [0.0]
        >>> def train_step(batch):
        ...     now[0] += 0.005
        >>> result = bottleneck([[1]] * 12, train_step, batches=8, clock=lambda: now[0])
        >>> result.bound_by, round(result.cached * 1e3, 3), round(result.loader * 1e3, 3)
        ('step', 5.0, 0.0)
    """
    if batches < 1:
        raise ValueError(f"batches={batches} must be at least 1")
    loader_alone, done = _per_batch(loader, batches, warmup, None, clock)
    streamed, done_streamed = _per_batch(loader, batches, warmup, step, clock)
    done = min(done, done_streamed)
    if done < batches:
        warnings.warn(
            f"bottleneck(): the loader's epoch gave only {done} batch(es) after the {warmup} "
            f"warm-up batch(es), not batches={batches}: each timing rests on {done}, and "
            "includes the epoch's start (workers, first reads); give it more data or pass "
            f"batches={done} or fewer", stacklevel=2)
    held = next(iter(loader))
    cached, _ = _per_batch(itertools.repeat(held), done, warmup, step, clock)
    return Bottleneck(loader_alone, streamed, cached, done)


__all__ = ["Bottleneck", "bottleneck"]
