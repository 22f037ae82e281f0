"""The deterministic order on torch's DataLoader (aisio.loaders.ordered, staging), against the
real AIStore: the same batches with 0, 1 and 2 workers, and after a resume on another number."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aisio.core.client import Client
from aisio.core.errors import StateMismatchError
from aisio.core.urls import Bucket
from aisio.loaders.ordered import OrderedLoader
from tests.conftest import write_shards


def _keys(batches: object) -> list[list[str]]:
    return [[s["__key__"] for s in batch] for batch in batches]  # type: ignore[attr-defined]


def test_same_batches_on_any_workers_and_after_a_resume(
        ais_client: Client, ais_endpoint: str, bucket: Bucket, tmp_path: Path) -> None:
    template, keys = write_shards(ais_client, bucket, tmp_path, shards=7, per_shard=12)
    opts = dict(endpoint=ais_endpoint, streams=4, batch_size=8, shuffle_buffer=6, seed=5,
                collate=False)
    whole = _keys(OrderedLoader(template, num_workers=0, **opts))
    assert sorted(k for b in whole for k in b) == sorted(keys)
    assert all(len(b) == 8 for b in whole[:5])
    for workers in (1, 2):
        assert _keys(OrderedLoader(template, num_workers=workers, **opts)) == whole
    for before, after, kill in [(2, 1, 3), (0, 2, 5), (1, 0, 1)]:
        first = OrderedLoader(template, num_workers=before, **opts)
        got = []
        for batch in first:
            got.append([s["__key__"] for s in batch])
            if len(got) == kill:
                break
        state = json.loads(json.dumps(first.state_dict()))
        second = OrderedLoader(template, num_workers=after, **opts)
        second.load_state_dict(state)
        assert got + _keys(second) == whole, (before, after, kill)
    # the next epoch is whole and reshuffled
    assert sorted(k for b in _keys(second) for k in b) == sorted(keys)
    other = OrderedLoader(template, num_workers=0, **{**opts, "streams": 2})
    with pytest.raises(StateMismatchError, match="canonical streams"):
        other.load_state_dict(state)
