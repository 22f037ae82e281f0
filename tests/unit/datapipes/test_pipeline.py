"""Tests for aisio.datapipes.pipeline without a cluster (the pipeline against AIStore:
tests/integration/datapipes/test_pipeline.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aisio.datapipes.pipeline import ResampledShards


def test_resampled_shards_takes_one_template_string() -> None:
    shards = ResampledShards("ais://b/s-{00..09}.tar", seed=3)
    assert shards.names == [f"ais://b/s-{i:02d}.tar" for i in range(10)]
    drawn = [name for name, _ in zip(shards, range(50), strict=False)]
    assert set(drawn) <= set(shards.names) and len(set(drawn)) > 3
    assert ResampledShards("ais://b/one.tar").names == ["ais://b/one.tar"]
    with pytest.raises(TypeError):
        ResampledShards(b"ais://b/one.tar")  # type: ignore[arg-type]


class _Counting:
    """A reader (see aisio.core.pipeline.epoch) of the items 0..9, every N-th for worker w."""

    def read(self, worker: int = 0, workers: int = 1) -> Iterator[int]:
        return iter(range(worker, 10, workers))


def test_the_reader_pipe_runs_outside_torchs_hook_and_still_invalidates_an_old_iterator(
) -> None:
    """The one-call loaders' DataPipe (the core's reader as one DataPipe) yields without
    torch's per-item wrapper; an iterator that a new iter() replaced still stops."""
    from aisio.datapipes.pipeline import ReaderPipe
    from aisio.datapipes.pipes import WebDatasetParser

    assert "__iter__" not in vars(ReaderPipe) and "__iter__" not in vars(WebDatasetParser)
    pipe = ReaderPipe(_Counting(), world=2)
    first = iter(pipe)
    assert next(first) == 0
    assert list(pipe) == list(range(10))
    with pytest.raises(RuntimeError, match="invalidated"):
        list(first)


def test_the_reader_pipe_reads_as_the_worker_the_loaders_sharding_names() -> None:
    from torch.utils.data.datapipes.iter.sharding import SHARDING_PRIORITIES

    from aisio.datapipes.pipeline import ReaderPipe

    pipe = ReaderPipe(_Counting(), world=2)
    pipe.apply_sharding(4, 3)  # torch's DataLoader: N x R instances, w x R + rank
    assert list(pipe) == [1, 3, 5, 7, 9]  # worker 1 of 2
    pipe.apply_sharding(2, 1, SHARDING_PRIORITIES.DISTRIBUTED)  # the reader deals the ranks
    assert list(pipe) == [1, 3, 5, 7, 9]
    pipe.apply_sharding(3, 0, SHARDING_PRIORITIES.MULTIPROCESSING)  # DataLoader2's workers
    assert list(pipe) == [0, 3, 6, 9]
    with pytest.raises(ValueError, match=r"after torch\.distributed"):
        pipe.apply_sharding(3, 0)
