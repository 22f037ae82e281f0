"""What each loader's state promises, over a MemoryStore: map= resumes exactly once on every
loader; post=, resampled=True and make_loader refuse to checkpoint instead of replaying;
samples_per_epoch counts samples; a shard overwritten since the checkpoint is not read on."""

from __future__ import annotations

import io
import json
import tarfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import aisio
from aisio.core.pipeline.spec import PipelineSpec
from aisio.core.store.memory import MemoryStore
from aisio.core.store.urls import AISPath, Bucket
from tests.conftest import LOADERS, needs_dataloader2, write_shards


def shout(item: tuple[str]) -> tuple[str]:
    """A per-sample function (module level, so it pickles into workers); a batch would fail."""
    (key,) = item
    return (key.upper(),)


def add_rows(pipe: Any) -> Any:
    """A ``post=`` function: it receives the batched pipe."""
    return pipe.map(len)


@pytest.fixture
def shards(store: MemoryStore, bucket: Bucket, tmp_path: Path) -> tuple[str, list[str]]:
    return write_shards(store, bucket, tmp_path, shards=4, per_shard=49)  # 202 samples


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_map_runs_per_sample_and_resumes_exactly_once(
        name: str, store: MemoryStore, shards: tuple[str, list[str]]) -> None:
    template, keys = shards
    options = {"store": store, "tuple_fields": ("__key__",), "map": shout,
               "batch_size": 4, "shuffle_buffer": 8, "num_workers": 2, "seed": 5}
    loader = LOADERS[name](template, **options)
    got: list[str] = []
    try:
        for step, (batch,) in enumerate(loader):
            got.extend(batch)
            if step == 19:  # 80 samples received
                state = json.loads(json.dumps(loader.state_dict()))
                break
    finally:
        loader.shutdown()
    resumed = LOADERS[name](template, **{**options, "num_workers": 1})
    resumed.load_state_dict(state)
    try:
        got.extend(key for (batch,) in resumed for key in batch)
    finally:
        resumed.shutdown()
    assert Counter(got) == Counter(key.upper() for key in keys)


@needs_dataloader2
@pytest.mark.parametrize("how", ["post", "resampled", "make_loader"])
def test_a_loader_without_positions_refuses_to_checkpoint(
        how: str, store: MemoryStore, shards: tuple[str, list[str]]) -> None:
    """Before: DataLoader2's own pickled state, accepted back silently; the "resumed" run
    replayed the epoch (80 of 200 samples delivered twice)."""
    template, _ = shards
    options: dict[str, Any] = {"store": store, "num_workers": 2, "seed": 0,
                               "shuffle_shards": False}
    if how == "post":
        loader = aisio.webdataset_loader(template, post=add_rows, batch_size=4, **options)
    elif how == "resampled":
        loader = aisio.webdataset_loader(template, resampled=True, samples_per_epoch=200,
                                         **options)
    else:
        seed = options.pop("seed")
        loader = aisio.make_loader(aisio.webdataset_pipe(template, store=options.pop("store"),
                                                         shuffle_shards=False), seed=seed,
                                   **{"num_workers": options["num_workers"]})
    items = iter(loader)
    try:
        for _ in range(20):
            next(items)
        with pytest.raises(aisio.StateMismatchError, match="map="):
            loader.state_dict()
    finally:
        loader.shutdown()
    with pytest.raises(aisio.StateMismatchError, match="no resumable state"):
        loader.load_state_dict({"anything": 1})


@needs_dataloader2
@pytest.mark.parametrize(("total", "workers"), [(10, 2), (11, 2), (7, 0), (5, 3)])
def test_samples_per_epoch_counts_samples(total: int, workers: int, store: MemoryStore,
                                          shards: tuple[str, list[str]]) -> None:
    loader = aisio.webdataset_loader(shards[0], store=store, resampled=True,
                                     samples_per_epoch=total, batch_size=16,
                                     tuple_fields=("__key__",), num_workers=workers, seed=1)
    try:
        epochs = [[len(keys) for (keys,) in loader] for _ in range(2)]
    finally:
        loader.shutdown()
    assert [sum(sizes) for sizes in epochs] == [total, total]
    assert all(len(sizes) == min(max(workers, 1), total) for sizes in epochs)  # a batch each


@needs_dataloader2
def test_an_unpicklable_map_is_named(store: MemoryStore, shards: tuple[str, list[str]]) -> None:
    with pytest.raises(aisio.ConfigError, match="<lambda>"):
        aisio.webdataset_loader(shards[0], store=store, num_workers=2,
                                map=lambda sample: sample)


def test_map_must_be_a_function(store: MemoryStore, shards: tuple[str, list[str]]) -> None:
    with pytest.raises(aisio.ConfigError, match="map="):
        aisio.webdataset_pipe(shards[0], store=store, map="upper")


def _read_some(make: Any, template: str, **options: Any) -> tuple[list[str], dict[str, Any]]:
    loader = make(template, tuple_fields=("__key__",), batch_size=4, num_workers=1, seed=2,
                  **options)
    got: list[str] = []
    try:
        for step, (batch,) in enumerate(loader):
            got.extend(batch)
            if step == 14:
                return got, json.loads(json.dumps(loader.state_dict()))
    finally:
        loader.shutdown()
    raise AssertionError("the epoch ended before the checkpoint")


@pytest.mark.parametrize("name", sorted(LOADERS))
@pytest.mark.parametrize("versioned", [True, False])
def test_a_shard_overwritten_since_the_checkpoint_is_not_read_on(
        name: str, versioned: bool, store: MemoryStore, bucket: Bucket,
        tmp_path: Path) -> None:
    store.versioned = versioned  # False: answers name no version (nor checksum) at all
    template, _ = write_shards(store, bucket, tmp_path, shards=3, per_shard=40)
    _, state = _read_some(LOADERS[name], template, store=store)
    assert state["partial"] and set(state["versions"]) == set(state["partial"])
    if not versioned:  # nothing names the version: only the size is known
        assert all(v.startswith("size=") for v in state["versions"].values())
    write_shards(store, bucket, tmp_path, shards=3, per_shard=45)  # new content, same names
    resumed = LOADERS[name](template, store=store, tuple_fields=("__key__",), batch_size=4,
                            num_workers=1, seed=2)
    resumed.load_state_dict(state)
    try:
        with pytest.raises(aisio.ObjectChangedError, match="changed since the checkpoint"):
            list(resumed)
    finally:
        resumed.shutdown()


def test_a_state_without_versions_still_resumes(store: MemoryStore,
                                                bucket: Bucket, tmp_path: Path) -> None:
    make = LOADERS["dataloader"]
    template, keys = write_shards(store, bucket, tmp_path, shards=3, per_shard=40)
    got, state = _read_some(make, template, store=store)
    del state["versions"]  # as saved before states recorded them
    resumed = make(template, store=store, tuple_fields=("__key__",), batch_size=4)
    resumed.load_state_dict(state)
    got.extend(key for (batch,) in resumed for key in batch)
    assert Counter(got) == Counter(keys)


def test_runs_of_small_samples_resume_exactly_once(store: MemoryStore,
                                                   bucket: Bucket) -> None:
    """The one-call loader in one process over shards of small samples, in their stored order:
    the path where regular samples come in runs (aisio.core.format.tar.runs), stopped mid-epoch
    and resumed: every sample once, each batch as the per-sample path makes it."""
    template, keys = _ustar_shards(store, bucket, shards=3, per_shard=150)
    options: dict[str, Any] = {
        "store": store, "batch_size": 16, "shuffle_buffer": 0, "shuffle_shards": False,
        "decode": aisio.Decoder(None, only=["cls"]), "tuple_fields": ("__key__", "bin", "cls"),
        "num_workers": 0, "seed": 1}
    assert PipelineSpec.build(**{k: v for k, v in options.items()
                                 if k not in ("num_workers", "seed")}).runs() is not None
    per_sample = aisio.webdataset_dataloader(template, **options, map=_same)
    expected = [(list(k), list(b), c.tolist()) for k, b, c in per_sample]
    loader = aisio.webdataset_dataloader(template, **options)
    got = []
    for step, (k, b, c) in enumerate(loader):
        got.append((list(k), list(b), c.tolist()))
        if step == 12:
            state = json.loads(json.dumps(loader.state_dict()))
            break
    resumed = aisio.webdataset_dataloader(template, **options)
    resumed.load_state_dict(state)
    got.extend((list(k), list(b), c.tolist()) for k, b, c in resumed)
    assert got == expected
    assert Counter(key for k, _, _ in got for key in k) == Counter(keys)


def _ustar_shards(store: MemoryStore, bucket: Bucket, *, shards: int, per_shard: int
                  ) -> tuple[str, list[str]]:
    """Writes shards of ``(bin, cls)`` samples written as plain ustar members (as tarfile
    and GNU tar write them; ``write_shards`` writes webdataset's way, a pax mtime header
    before each member); returns (template, keys)."""
    keys = []
    for s in range(shards):
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for i in range(per_shard + s):
                key = f"s{s:04d}/sample{i:05d}"
                for suffix, data in (("bin", bytes([i % 256]) * (40 + i % 50)),
                                     ("cls", str((s + i) % 10).encode())):
                    info = tarfile.TarInfo(f"{key}.{suffix}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                keys.append(key)
        store.put(AISPath(bucket, f"runs-{s:04d}.tar"), out.getvalue())
    return bucket.uri(f"runs-{{0000..{shards - 1:04d}}}.tar"), keys


def _same(item: Any) -> Any:
    """A map= that changes nothing: it keeps the loader on the per-sample path."""
    return item
