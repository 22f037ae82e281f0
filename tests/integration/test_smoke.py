"""The smoke test `make check` runs: an install reads shards from a real AIStore into batches
with the default loader's worker processes, and resumes an epoch mid-way, every sample once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import aisio
from aisio.core.store.client import Client
from aisio.core.store.urls import Bucket
from tests.conftest import write_shards


def test_shards_to_batches_and_a_resume_every_sample_once(
        ais_endpoint: str, ais_client: Client, bucket: Bucket, tmp_path: Path) -> None:
    shards, keys = write_shards(ais_client, bucket, tmp_path, shards=4, per_shard=6)
    options = dict(url=ais_endpoint, tuple_fields="bin cls __key__", batch_size=4,
                   num_workers=2, seed=0)
    loader = aisio.webdataset_dataloader(shards, **options)
    trained: list[str] = []
    try:
        for step, (data, labels, batch_keys) in enumerate(loader):
            assert len(data) == len(labels) == len(batch_keys) <= 4
            trained += batch_keys
            if step == 2:
                state = loader.state_dict()
                break
    finally:
        loader.shutdown()
    resumed = aisio.webdataset_dataloader(shards, **options)
    try:
        resumed.load_state_dict(state)
        trained += [key for _, _, batch_keys in resumed for key in batch_keys]
    finally:
        resumed.shutdown()
    assert Counter(trained) == Counter(keys)
