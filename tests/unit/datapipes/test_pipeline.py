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
