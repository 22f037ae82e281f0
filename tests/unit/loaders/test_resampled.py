"""``resampled=True, samples_per_epoch=N`` on every loader (issue #29, item 3), over a
MemoryStore: N samples per epoch, drawn anew each epoch; no mid-epoch state (StateMismatchError)
and, on the loaders that seed their own readers, ``set_epoch(e)`` draws epoch e again."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import aisio
from aisio.core.store.memory import MemoryStore
from aisio.core.store.urls import Bucket
from tests.conftest import LOADERS, write_shards

SAMPLES = 30


def keys_of(loader: Any) -> list[str]:
    return [key for keys, _ in loader for key in keys]


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_every_loader_resamples_an_epoch_of_n_samples(kind: str, store: MemoryStore, bucket: Bucket,
                                                      tmp_path: Path) -> None:
    template, keys = write_shards(store, bucket, tmp_path, shards=3, per_shard=4)
    loader = LOADERS[kind](template, store=store, resampled=True,
                           samples_per_epoch=SAMPLES, num_workers=2, batch_size=4, seed=7,
                           tuple_fields=("__key__", "cls"), shuffle_buffer=4)
    try:
        first, second = keys_of(loader), keys_of(loader)
        assert len(first) == len(second) == SAMPLES  # more than the 15 samples there are
        assert set(first) <= set(keys) and max(Counter(first).values()) > 1
        assert first != second
        with pytest.raises(aisio.StateMismatchError, match="set_epoch"):
            loader.state_dict()
        if kind != "dataloader2":  # DataLoader2 seeds its workers itself: a new draw
            loader.set_epoch(0)
            assert keys_of(loader) == first
    finally:
        loader.shutdown()


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_samples_per_epoch_goes_with_resampled(kind: str) -> None:
    with pytest.raises(ValueError, match="resampled=True"):
        LOADERS[kind]("ais://b/s-{0..1}.tar", samples_per_epoch=4)
