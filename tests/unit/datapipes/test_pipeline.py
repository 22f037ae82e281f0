"""Tests for aisio.datapipes.pipeline without a cluster (the pipeline against AIStore:
tests/integration/datapipes/test_pipeline.py)."""

from __future__ import annotations

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


def test_epoch_shuffle_runs_outside_torchs_hook_and_still_invalidates_an_old_iterator() -> None:
    """EpochShuffle yields samples without torch's per-item wrapper (its cost is the price of a
    2 KiB sample's parse); an iterator that a new iter() replaced still stops, at its source's
    next shard."""
    from aisio.core.epochs.plan import EpochPlan
    from aisio.datapipes.pipeline import EpochShuffle
    from aisio.datapipes.pipes import WebDatasetParser
    from tests.unit.core.format.test_samples_against_tarfile import _Shards

    assert "__iter__" not in vars(EpochShuffle) and "__iter__" not in vars(WebDatasetParser)
    pipe = EpochShuffle(WebDatasetParser(_Shards()), 1, plan=EpochPlan(), seed=0, rank=0)
    first = iter(pipe)
    assert next(first)["__key__"] == "a"
    assert sorted(s["__key__"] for s in pipe) == ["a", "b", "c"]
    with pytest.raises(RuntimeError, match="invalidated"):
        list(first)
    # shuffled through a buffer: a bigger one reorders, the same seed and epoch repeat
    big = EpochShuffle(WebDatasetParser(_Shards()), 3, plan=EpochPlan(), seed=0, rank=0)
    orders = {tuple(s["__key__"] for s in big) for _ in range(2)}
    assert len(orders) == 1 and sorted(next(iter(orders))) == ["a", "b", "c"]
