"""The same pipeline on every loader this environment has: DataLoader2 (torchdata < 0.10),
DataLoader, StatefulDataLoader, torchdata.nodes (torchdata >= 0.10), against the real node."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import aisio
from aisio.core.client import Client
from aisio.core.urls import Bucket
from tests.conftest import LOADERS, needs_dataloader2, write_shards

OPTIONS = {"shuffle_buffer": 16, "tuple_fields": ("__key__", "cls"), "batch_size": 4}


@pytest.fixture
def shards(ais_client: Client, bucket: Bucket, tmp_path: Path) -> tuple[str, list[str]]:
    return write_shards(ais_client, bucket, tmp_path, shards=5, per_shard=9)


def keys_of(loader: Any) -> list[str]:
    return [key for names, _ in loader for key in names]


@pytest.fixture(params=sorted(LOADERS))
def make(request: pytest.FixtureRequest) -> Any:
    return LOADERS[request.param]


def test_two_workers_deliver_every_sample_once_per_epoch(
        make: Any, ais_endpoint: str, shards: tuple[str, list[str]]) -> None:
    template, keys = shards
    loader = make(template, url=ais_endpoint, num_workers=2, seed=3, **OPTIONS)
    try:
        first, second = keys_of(loader), keys_of(loader)
    finally:
        loader.shutdown()
    assert Counter(first) == Counter(keys) == Counter(second)
    assert first != second  # every epoch is reshuffled


def test_seed_reproduces_the_order(make: Any, ais_endpoint: str,
                                   shards: tuple[str, list[str]]) -> None:
    template, _ = shards
    runs = []
    for _ in range(2):
        loader = make(template, url=ais_endpoint, num_workers=2, seed=11, **OPTIONS)
        runs.append((keys_of(loader), keys_of(loader)))
        loader.shutdown()
    assert runs[0] == runs[1]


def test_more_workers_than_shards(make: Any, ais_endpoint: str, ais_client: Client,
                                  bucket: Bucket, tmp_path: Path) -> None:
    template, keys = write_shards(ais_client, bucket, tmp_path, shards=2, per_shard=3)
    loader = make(template, url=ais_endpoint, num_workers=3, **OPTIONS)
    try:
        assert sorted(keys_of(loader)) == sorted(keys)
    finally:
        loader.shutdown()


@pytest.mark.parametrize("workers", [(2, 1), (2, 3), (2, 2)])
def test_resume_mid_epoch_on_other_worker_counts(make: Any, ais_endpoint: str,
                                                 shards: tuple[str, list[str]],
                                                 workers: tuple[int, int]) -> None:
    template, keys = shards
    loader = make(template, url=ais_endpoint, num_workers=workers[0], seed=5, **OPTIONS)
    before: list[str] = []
    for step, (names, _) in enumerate(loader):
        before += names
        if step == 4:
            state = json.loads(json.dumps(loader.state_dict()))  # what a checkpoint keeps
            break
    loader.shutdown()
    assert state["delivered"] == len(before) == 20
    resumed = make(template, url=ais_endpoint, num_workers=workers[1], seed=5, **OPTIONS)
    resumed.load_state_dict(state)
    try:
        after = keys_of(resumed)
        assert Counter(before + after) == Counter(keys)  # the rest of the epoch, each once
        assert Counter(keys_of(resumed)) == Counter(keys)  # then a whole epoch
    finally:
        resumed.shutdown()


def _in_shard_order(batch: list[str], keys: list[str]) -> bool:
    at = [keys.index(k) for k in batch]
    return at == list(range(at[0], at[0] + len(at)))


def test_samples_are_shuffled_by_default_and_zero_turns_it_off(
        make: Any, ais_endpoint: str, shards: tuple[str, list[str]]) -> None:
    """The README's quick start (no shuffle_buffer given) trains shuffled on every loader."""
    template, keys = shards
    first = {}
    for buffer in (None, 0):
        extra = {} if buffer is None else {"shuffle_buffer": buffer}
        loader = make(template, url=ais_endpoint, tuple_fields=("__key__", "cls"), batch_size=6,
                      num_workers=2, seed=0, **extra)
        try:
            batches = list(loader)  # the whole epoch: no reader left running in the background
            first[buffer] = list(batches[0][0])
        finally:
            loader.shutdown()
    assert not _in_shard_order(first[None], keys), first[None]
    assert _in_shard_order(first[0], keys), first[0]


def test_a_state_from_another_shard_list_or_a_corrupt_file_is_refused(
        make: Any, ais_endpoint: str, shards: tuple[str, list[str]]) -> None:
    template, _ = shards
    loader = make(template, url=ais_endpoint, **OPTIONS)
    state = loader.state_dict()
    other = make(template.replace("0004", "0003"), url=ais_endpoint, **OPTIONS)
    with pytest.raises(aisio.StateMismatchError, match="another shard list"):
        other.load_state_dict(state)
    with pytest.raises(aisio.StateMismatchError, match="corrupt"):
        loader.load_state_dict({**state, "done": "garbage"})
    with pytest.raises(aisio.StateMismatchError, match="not an aisio loader state"):
        loader.load_state_dict({"model": 1})


@needs_dataloader2
def test_a_hand_made_dataloader2_over_aisio_datapipes_finishes(
        ais_endpoint: str, ais_client: Client, bucket: Bucket, tmp_path: Path) -> None:
    from torchdata.dataloader2 import DataLoader2, MultiProcessingReadingService

    from aisio.datapipes.base import IterableWrapper

    template, keys = write_shards(ais_client, bucket, tmp_path, shards=10, per_shard=2)
    names = list(aisio.AISFileLister(template, url=ais_endpoint))
    pipe = aisio.AISFileLoader(IterableWrapper(names).sharding_filter(), url=ais_endpoint)
    loader = DataLoader2(pipe.ais_parse_webdataset(),
                         reading_service=MultiProcessingReadingService(num_workers=4))
    try:
        assert sorted(s["__key__"] for s in loader) == sorted(keys)
    finally:
        loader.shutdown()


def test_the_loaders_a_torchdata_generation_lacks_say_what_to_use() -> None:
    missing = {"dataloader2", "nodes"} - set(LOADERS)
    assert len(missing) == 1  # each environment has exactly one of the two
    make = aisio.webdataset_loader if "dataloader2" in missing else aisio.webdataset_node_loader
    with pytest.raises(aisio.LoaderUnavailableError, match="torchdata"):
        make("ais://b/s-{0..1}.tar", url="http://127.0.0.1:9")
