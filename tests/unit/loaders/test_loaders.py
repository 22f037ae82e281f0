"""The same pipeline on every loader this environment has: DataLoader2 (torchdata < 0.10),
DataLoader, StatefulDataLoader, torchdata.nodes (torchdata >= 0.10), over a MemoryStore (what
the loaders do with HTTP and the cluster: tests/integration)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

import aisio
from aisio.core.store.memory import MemoryStore
from aisio.core.store.urls import Bucket
from tests.conftest import LOADERS, child_pids, needs_dataloader2, thread_token, write_shards

OPTIONS = {"shuffle_buffer": 16, "tuple_fields": ("__key__", "cls"), "batch_size": 4}


@pytest.fixture
def shards(store: MemoryStore, bucket: Bucket, tmp_path: Path) -> tuple[str, list[str]]:
    return write_shards(store, bucket, tmp_path, shards=5, per_shard=9)


def keys_of(loader: Any) -> list[str]:
    return [key for names, _ in loader for key in names]


@pytest.fixture(params=sorted(LOADERS))
def make(request: pytest.FixtureRequest) -> Any:
    return LOADERS[request.param]


def test_two_workers_deliver_every_sample_once_per_epoch(
        make: Any, store: MemoryStore, shards: tuple[str, list[str]]) -> None:
    template, keys = shards
    loader = make(template, store=store, num_workers=2, seed=3, **OPTIONS)
    try:
        first, second = keys_of(loader), keys_of(loader)
    finally:
        loader.shutdown()
    assert Counter(first) == Counter(keys) == Counter(second)
    assert first != second  # every epoch is reshuffled


def test_seed_reproduces_the_order(make: Any, store: MemoryStore,
                                   shards: tuple[str, list[str]]) -> None:
    template, _ = shards
    runs = []
    for _ in range(2):
        loader = make(template, store=store, num_workers=2, seed=11, **OPTIONS)
        runs.append((keys_of(loader), keys_of(loader)))
        loader.shutdown()
    assert runs[0] == runs[1]


def test_more_workers_than_shards(make: Any, store: MemoryStore,
                                  bucket: Bucket, tmp_path: Path) -> None:
    template, keys = write_shards(store, bucket, tmp_path, shards=2, per_shard=3)
    loader = make(template, store=store, num_workers=3, **OPTIONS)
    try:
        assert sorted(keys_of(loader)) == sorted(keys)
    finally:
        loader.shutdown()


@pytest.mark.parametrize("workers", [(2, 1), (2, 3), (2, 2), (0, 2), (2, 0)])
def test_resume_mid_epoch_on_other_worker_counts(make: Any, store: MemoryStore,
                                                 shards: tuple[str, list[str]],
                                                 workers: tuple[int, int]) -> None:
    template, keys = shards
    loader = make(template, store=store, num_workers=workers[0], seed=5, **OPTIONS)
    before: list[str] = []
    for step, (names, _) in enumerate(loader):
        before += names
        if step == 4:
            state = json.loads(json.dumps(loader.state_dict()))  # what a checkpoint keeps
            break
    loader.shutdown()
    assert state["delivered"] == len(before) == 20
    resumed = make(template, store=store, num_workers=workers[1], seed=5, **OPTIONS)
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
        make: Any, store: MemoryStore, shards: tuple[str, list[str]]) -> None:
    """The README's quick start (no shuffle_buffer given) trains shuffled on every loader."""
    template, keys = shards
    first = {}
    for buffer in (None, 0):
        extra = {} if buffer is None else {"shuffle_buffer": buffer}
        loader = make(template, store=store, tuple_fields=("__key__", "cls"), batch_size=6,
                      num_workers=2, seed=0, **extra)
        try:
            batches = list(loader)  # the whole epoch: no reader left running in the background
            first[buffer] = list(batches[0][0])
        finally:
            loader.shutdown()
    assert not _in_shard_order(first[None], keys), first[None]
    assert _in_shard_order(first[0], keys), first[0]


def test_a_state_from_another_shard_list_or_a_corrupt_file_is_refused(
        make: Any, store: MemoryStore, shards: tuple[str, list[str]]) -> None:
    template, _ = shards
    loader = make(template, store=store, **OPTIONS)
    state = loader.state_dict()
    other = make(template.replace("0004", "0003"), store=store, **OPTIONS)
    with pytest.raises(aisio.StateMismatchError, match="another shard list"):
        other.load_state_dict(state)
    with pytest.raises(aisio.StateMismatchError, match="corrupt"):
        loader.load_state_dict({**state, "done": "garbage"})
    with pytest.raises(aisio.StateMismatchError, match="not an aisio loader state"):
        loader.load_state_dict({"model": 1})


@needs_dataloader2
def test_a_hand_made_dataloader2_over_aisio_datapipes_finishes(
        store: MemoryStore, bucket: Bucket, tmp_path: Path) -> None:
    from torchdata.dataloader2 import DataLoader2, MultiProcessingReadingService

    from aisio.datapipes.base import IterableWrapper

    template, keys = write_shards(store, bucket, tmp_path, shards=10, per_shard=2)
    names = list(aisio.AISFileLister(template, store=store))
    pipe = aisio.AISFileLoader(IterableWrapper(names).sharding_filter(), store=store)
    loader = DataLoader2(pipe.ais_parse_webdataset(),
                         reading_service=MultiProcessingReadingService(num_workers=4))
    try:
        assert sorted(s["__key__"] for s in loader) == sorted(keys)
    finally:
        loader.shutdown()


@pytest.mark.torchdata
def test_the_loaders_a_torchdata_generation_lacks_say_what_to_use() -> None:
    missing = {"dataloader2", "nodes"} - set(LOADERS)
    assert len(missing) == 1  # each environment has exactly one of the two
    make = aisio.webdataset_loader if "dataloader2" in missing else aisio.webdataset_node_loader
    with pytest.raises(aisio.LoaderUnavailableError, match="torchdata"):
        make("ais://b/s-{0..1}.tar", url="http://127.0.0.1:9")


def test_no_loader_warns_on_a_plain_run(make: Any, store: MemoryStore,
                                        shards: tuple[str, list[str]]) -> None:
    """A user who did nothing to cause a warning sees none (StatefulDataLoader calls a torch
    API that torch deprecates: aisio silences that one where it builds the loader)."""
    template, keys = shards
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", message=".*(DataPipes|DataLoader2).*",
                                module="torchdata")  # torchdata 0.9 on import: the point of aisio
        loader = make(template, store=store, num_workers=1, seed=0, **OPTIONS)
        try:
            got = keys_of(loader)
        finally:
            loader.shutdown()
    assert Counter(got) == Counter(keys)
    assert [str(w.message) for w in caught] == []


def _pid(data: bytes) -> int:
    """A field decoder that says which process decoded the sample."""
    return os.getpid()


def _thread(data: bytes) -> tuple[int, int]:
    """A field decoder that says which thread of which process decoded the sample."""
    return thread_token()


PID_OPTIONS = {"tuple_fields": ("__key__", "bin"), "batch_size": 4, "collate": False,
               "decode": aisio.Decoder(None, custom={"bin": _pid})}


def test_worker_processes_start_once_and_serve_every_epoch(
        make: Any, store: MemoryStore, shards: tuple[str, list[str]]) -> None:
    """The same 2 workers decode every epoch: processes, or on nodes threads of this process,
    told apart by a number each thread draws once (names and idents are reused)."""
    template, keys = shards
    loader = make(template, store=store, num_workers=2, seed=2,
                  **{**PID_OPTIONS, "decode": aisio.Decoder(None, custom={"bin": _thread})})
    epochs, underlying = [], []
    try:
        for _ in range(3):
            got = [(key, tuple(thread)) for batch in loader for key, thread in batch]
            assert Counter(key for key, _ in got) == Counter(keys)
            epochs.append({thread for _, thread in got})
            underlying.append(loader.current)  # one loader (one nodes graph) for all epochs
    finally:
        loader.shutdown()
    assert underlying[0] is underlying[1] is underlying[2]
    served = epochs[0] | epochs[1] | epochs[2]
    if make is LOADERS.get("nodes"):  # nodes decodes in its mapper's threads, in this process
        assert {pid for pid, _ in served} == {os.getpid()} and thread_token() not in served
        assert 1 <= len(served) <= 2  # (which thread maps which batch: the pool's choice)
    else:  # processes (DataLoader2's may run an epoch in a thread of its own)
        pids = [{pid for pid, _ in threads} for threads in epochs]
        assert pids[0] == pids[1] == pids[2]
        assert len(pids[0]) == 2 and os.getpid() not in pids[0]


@pytest.mark.skipif("nodes" not in LOADERS, reason="torchdata.nodes needs torchdata >= 0.10")
def test_nodes_mapper_processes_start_once_and_serve_every_epoch(
        store: MemoryStore, shards: tuple[str, list[str]]) -> None:
    """torchdata.nodes with ``method="process"``: the same 2 mapper processes serve every epoch
    (nodes' own ParallelMapper starts new ones at each reset: 6 in 3 epochs), and none is left
    after shutdown(). Which of them maps which batch is the pool's choice."""
    template, keys = shards
    loader = LOADERS["nodes"](template, store=store, num_workers=2, seed=2,
                              method="process", **PID_OPTIONS)
    before = child_pids()
    epochs, pools = [], []
    try:
        for _ in range(3):
            got = [(key, pid) for batch in loader for key, pid in batch]
            assert Counter(key for key, _ in got) == Counter(keys)
            epochs.append({pid for _, pid in got})
            pools.append(child_pids() - before)  # the processes the loader started
    finally:
        loader.shutdown()
    served = epochs[0] | epochs[1] | epochs[2]
    assert len(pools[0]) == 2 and pools[0] == pools[1] == pools[2], pools
    assert served <= pools[0]
    for pid in pools[0]:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.skipif("nodes" not in LOADERS, reason="torchdata.nodes needs torchdata >= 0.10")
def test_a_killed_nodes_mapper_process_is_named_and_the_next_epoch_runs(
        store: MemoryStore, shards: tuple[str, list[str]]) -> None:
    template, keys = shards
    loader = LOADERS["nodes"](template, store=store, num_workers=2, seed=2,
                              method="process", **PID_OPTIONS)
    try:
        with pytest.raises(aisio.WorkerDiedError, match=r"mapper process.*state_dict"):
            for step, batch in enumerate(loader):
                if step == 0:
                    os.kill(batch[0][1], signal.SIGKILL)  # as the OOM killer does
                time.sleep(0.05)
        got = [key for batch in loader for key, _ in batch]  # a new pool for the next epoch
        assert Counter(got) == Counter(keys)
    finally:
        loader.shutdown()


@pytest.mark.parametrize("kind", sorted({"dataloader2", "dataloader"} & set(LOADERS)))
def test_persistent_workers_false_starts_them_each_epoch(kind: str, store: MemoryStore,
                                                        shards: tuple[str, list[str]]) -> None:
    template, keys = shards
    loader = LOADERS[kind](template, store=store, num_workers=2, seed=2,
                           persistent_workers=False, **PID_OPTIONS)
    try:
        epochs = []
        for _ in range(2):
            got = [(key, pid) for batch in loader for key, pid in batch]
            assert Counter(key for key, _ in got) == Counter(keys)
            epochs.append({pid for _, pid in got})
    finally:
        loader.shutdown()
    assert not epochs[0] & epochs[1]


def test_a_loop_left_mid_epoch_then_a_new_epoch_and_a_resume(
        make: Any, store: MemoryStore, shards: tuple[str, list[str]]) -> None:
    """Workers that live across epochs: after a break, the next iter() is a whole epoch, and
    a state loaded into the same loader resumes on the same workers, each sample once."""
    template, keys = shards
    loader = make(template, store=store, num_workers=2, seed=8, **OPTIONS)
    try:
        before: list[str] = []
        for step, (names, _) in enumerate(loader):
            before += names
            if step == 2:
                state = json.loads(json.dumps(loader.state_dict()))
                break
        assert Counter(keys_of(loader)) == Counter(keys)
        for step, _ in enumerate(loader):  # leave another epoch mid-way
            if step == 1:
                break
        loader.load_state_dict(state)
        after = keys_of(loader)
        assert Counter(before + after) == Counter(keys)
        assert Counter(keys_of(loader)) == Counter(keys)
    finally:
        loader.shutdown()


@pytest.mark.parametrize("kind", ["dataloader", "stateful"])
def test_dataloader_options_reach_the_dataloader(kind: str, store: MemoryStore,
                                                 shards: tuple[str, list[str]]) -> None:
    """pin_memory, prefetch_factor, timeout, persistent_workers, multiprocessing_context pass
    through to torch's DataLoader; without an accelerator torch warns and goes on (with one,
    it pins: no warning)."""
    template, keys = shards
    options: dict[str, Any] = {"pin_memory": True, "prefetch_factor": 3, "timeout": 60,
                               "persistent_workers": True, "multiprocessing_context": "fork"}
    if kind == "dataloader":
        options["in_order"] = False  # StatefulDataLoader has it from torchdata 0.10 on
    loader = LOADERS[kind](template, store=store, num_workers=2, seed=1, **options,
                           **OPTIONS)
    try:
        accelerator = getattr(torch, "accelerator", None)
        pins = (accelerator.is_available() if accelerator is not None
                else torch.cuda.is_available())
        with contextlib.nullcontext() if pins else pytest.warns(UserWarning, match="pin_memory"):
            assert Counter(keys_of(loader)) == Counter(keys)
        dataloader = loader.current
        assert {name: getattr(dataloader, name) for name in options} == {
            **options, "multiprocessing_context": dataloader.multiprocessing_context}
        assert dataloader.multiprocessing_context.get_start_method() == "fork"
    finally:
        loader.shutdown()


def test_drop_last_drops_each_readers_short_batch_and_still_resumes_exactly(
        make: Any, store: MemoryStore, shards: tuple[str, list[str]]) -> None:
    template, keys = shards
    loader = make(template, store=store, num_workers=2, seed=6, drop_last=True, **OPTIONS)
    try:
        batches = [names for names, _ in loader]
        assert all(len(names) == OPTIONS["batch_size"] for names in batches)
        got = [key for names in batches for key in names]
        assert len(set(got)) == len(got) and set(got) <= set(keys)
        # README: up to batch_size - 1 dropped per worker (2 here) and rank per epoch
        assert len(keys) - len(got) <= 2 * (OPTIONS["batch_size"] - 1)
        before: list[str] = []
        for step, (names, _) in enumerate(loader):
            before += names
            if step == 3:
                state = json.loads(json.dumps(loader.state_dict()))
                break
    finally:
        loader.shutdown()
    resumed = make(template, store=store, num_workers=1, seed=6, drop_last=True,
                   **OPTIONS)
    resumed.load_state_dict(state)
    try:
        after = keys_of(resumed)
    finally:
        resumed.shutdown()
    both = before + after
    assert len(set(both)) == len(both)  # nothing twice, dropped positions recorded
    # 4 batches in, no reader of the first run had ended (each has 19 samples or more):
    # only the resumed run's one reader drops, and nothing else is lost
    assert len(before) == 4 * OPTIONS["batch_size"]
    assert len(keys) - len(both) <= OPTIONS["batch_size"] - 1


def test_a_bucket_is_listed_from_the_loaders_store(make: Any, store: MemoryStore,
                                                   bucket: Bucket,
                                                   shards: tuple[str, list[str]]) -> None:
    """The shards' listing comes from ``store=`` too (no endpoint is set: a listing of the
    cluster would fail)."""
    _, keys = shards
    loader = make(bucket.uri(), store=store, num_workers=0, **OPTIONS)
    try:
        assert Counter(keys_of(loader)) == Counter(keys)
    finally:
        loader.shutdown()
