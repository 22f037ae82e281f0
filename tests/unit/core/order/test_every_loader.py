"""``order="deterministic"`` on every one-call loader, over a MemoryStore: the same batches
with 0, 1 and 2 workers, and a run interrupted at any step and resumed on another number of
workers and ranks continues with exactly the batches the uninterrupted run would have yielded
next."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aisio
import aisio.runtime.setup
from aisio.core.store.memory import MemoryStore
from aisio.core.store.urls import AISPath, Bucket
from tests import order_model
from tests.conftest import LOADERS, child_pids, tar_bytes, write_shards

OPTS: dict[str, Any] = dict(order="deterministic", streams=4, batch_size=8, shuffle_buffer=6,
                            seed=5, tuple_fields=("__key__", "cls"),
                            decode=aisio.Decoder(image=None))


@pytest.fixture
def shards(store: MemoryStore, bucket: Bucket, tmp_path: Path) -> tuple[str, list[str]]:
    return write_shards(store, bucket, tmp_path, shards=7, per_shard=12)


def _keys(batches: Any, stop: int | None = None) -> list[list[str]]:
    out: list[list[str]] = []
    for keys, labels in batches:
        assert isinstance(labels, torch.Tensor) and len(labels) == len(keys)
        out.append(list(keys))
        if stop is not None and len(out) == stop:
            break
    return out


def _model(keys: list[str], epoch: int, buffer: int = OPTS["shuffle_buffer"]) -> list[list[str]]:
    """The batches of one rank, from the order's definition (tests/order_model.py)."""
    shards: dict[str, list[str]] = {}
    for key in keys:  # write_shards' keys: shard by shard, each in tar order
        shards.setdefault(key.split("/")[0], []).append(key)
    seq = order_model.sequence(list(shards.values()), seed=OPTS["seed"], epoch=epoch,
                               streams=OPTS["streams"], batch=OPTS["batch_size"], buffer=buffer)
    return [[key for t, key in seq if t == r] for r in range(seq[-1][0] + 1)]


def _loader(kind: str, template: str, store: MemoryStore, workers: int, **extra: Any) -> Any:
    return LOADERS[kind](template, store=store, num_workers=workers, **{**OPTS, **extra})


def _run(kind: str, template: str, store: MemoryStore, workers: int) -> list[list[str]]:
    loader = _loader(kind, template, store, workers)
    try:
        return _keys(loader)
    finally:
        loader.shutdown()


@pytest.fixture(params=sorted(LOADERS))
def kind(request: pytest.FixtureRequest) -> Iterator[str]:
    yield request.param


def test_same_batches_on_any_workers_and_after_a_resume(
        kind: str, shards: tuple[str, list[str]], store: MemoryStore) -> None:
    template, keys = shards
    whole = _run(kind, template, store, 0)
    assert whole == _model(keys, epoch=0)  # shards dealt and shuffled in each stream as defined
    assert _model(keys, epoch=0) != _model(keys, epoch=0, buffer=0)  # (the buffer reorders)
    for workers in (1, 2):
        assert _run(kind, template, store, workers) == whole, workers
    for before, after, kill in [(2, 1, 3), (0, 2, 5)]:
        first = _loader(kind, template, store, before)
        got = _keys(first, stop=kill)
        state = json.loads(json.dumps(first.state_dict()))
        if kill == 3:  # the same loader, left mid-epoch, takes the state back too
            first.load_state_dict(state)
            assert got + _keys(first) == whole
        first.shutdown()
        second = _loader(kind, template, store, after)
        second.load_state_dict(state)
        assert second.epoch == 0
        assert got + _keys(second) == whole, (before, after, kill)
        # the next epoch: whole, reshuffled, and the uninterrupted run's epoch 1
        next_epoch = _keys(second)
        second.shutdown()
        assert sorted(k for b in next_epoch for k in b) == sorted(keys)
        assert next_epoch != whole
    assert next_epoch == _model(keys, epoch=1)
    fresh = _loader(kind, template, store, 1)
    fresh.set_epoch(1)
    assert _keys(fresh) == next_epoch
    fresh.shutdown()


def test_samples_carry_the_same_fields_in_both_orders(
        kind: str, shards: tuple[str, list[str]], store: MemoryStore) -> None:
    """Positions and shard content ids are aisio's bookkeeping: neither order leaves them in
    a user's samples."""
    template, _ = shards
    fields = {}
    for order in ("fast", "deterministic"):
        loader = LOADERS[kind](template, store=store, batch_size=8, collate=False, seed=5,
                               order=order)
        try:
            fields[order] = {name for sample in next(iter(loader)) for name in sample}
        finally:
            loader.shutdown()
    assert fields["deterministic"] == fields["fast"] == {"__key__", "__url__", "bin", "cls"}


def test_a_shard_rewritten_since_the_checkpoint_is_refused(
        kind: str, store: MemoryStore, bucket: Bucket,
        tmp_path: Path) -> None:
    """The same names and sample layout, new bytes (and 5 more samples per shard): the state
    names the content of every shard a resume reads again, so the resume refuses it rather
    than go on from byte offsets into other data."""
    template, _ = write_shards(store, bucket, tmp_path, shards=4, per_shard=40)
    loader = _loader(kind, template, store, 1)
    try:
        _keys(loader, stop=6)
        state = json.loads(json.dumps(loader.state_dict()))
    finally:
        loader.shutdown()
    named = {shard for entry in state["state"].values() if entry != "done" for shard in entry[6]}
    assert named, state["state"]
    write_shards(store, bucket, tmp_path, shards=4, per_shard=45)
    resumed = _loader(kind, template, store, 1)
    resumed.load_state_dict(state)
    try:
        with pytest.raises(aisio.ObjectChangedError, match="changed since the checkpoint"):
            _keys(resumed)
    finally:
        resumed.shutdown()


def test_a_state_of_another_plan_or_order_is_refused(
        shards: tuple[str, list[str]], store: MemoryStore) -> None:
    template, _ = shards
    loader = _loader("dataloader", template, store, 0)
    _keys(loader, stop=2)
    state = loader.state_dict()
    other = _loader("dataloader", template, store, 0, streams=2)
    with pytest.raises(aisio.StateMismatchError, match="canonical streams"):
        other.load_state_dict(state)
    fast = aisio.webdataset_dataloader(template, store=store, batch_size=8, seed=5)
    with pytest.raises(aisio.StateMismatchError):
        fast.load_state_dict(state)
    with pytest.raises(aisio.StateMismatchError, match="deterministic-order"):
        loader.load_state_dict(fast.state_dict())
    with pytest.raises(aisio.StateMismatchError, match="gather_state"):
        aisio.merge_states([state, state])


@pytest.mark.parametrize("kind", [k for k in ("dataloader", "dataloader2") if k in LOADERS])
def test_workers_live_across_epochs_and_a_bad_shard_keeps_its_error(
        kind: str, shards: tuple[str, list[str]], store: MemoryStore,
        bucket: Bucket) -> None:
    template, keys = shards
    before = child_pids()
    loader = _loader(kind, template, store, 2)
    try:
        _keys(loader)
        current = loader.current
        workers = child_pids() - before  # the loader's worker processes
        assert len(workers) == 2, workers
        assert len(_keys(loader)) > 0 and loader.current is current and loader.epoch == 2
        assert child_pids() - before == workers  # the same two served the second epoch
    finally:
        loader.shutdown()
    # a shard whose first tar header is corrupt (its checksum field overwritten)
    corrupt = bytearray(tar_bytes([(f"c{i}.cls", b"1") for i in range(3)]))
    corrupt[148:156] = b"9999999\0"
    store.put(AISPath(bucket, "corrupt.tar"), bytes(corrupt))
    mixed = [template, bucket.uri("corrupt.tar")]
    failing = _loader(kind, mixed, store, 2)
    try:
        with pytest.raises(aisio.ShardFormatError, match=r"corrupt\.tar") as info:
            _keys(failing)
        assert info.value.url == bucket.uri("corrupt.tar") and info.value.offset == 0
    finally:
        failing.shutdown()
    skipping = _loader(kind, mixed, store, 2, on_error="skip")
    try:
        assert sorted(k for b in _keys(skipping) for k in b) == sorted(keys)
        assert [(r["shard"], r["error"]) for r in skipping.report.records()] == [
            (bucket.uri("corrupt.tar"), "ShardFormatError")]
    finally:
        skipping.shutdown()


@contextlib.contextmanager
def _as_rank(monkeypatch: pytest.MonkeyPatch, rank: int, world: int) -> Iterator[None]:
    """Builds a loader as rank ``rank`` of ``world`` in this process: every loader reads its
    rank from ``rank_and_world`` in its set-up (:mod:`aisio.runtime.setup`) when it is built
    (its workers get it in the plan)."""
    with monkeypatch.context() as patch:
        patch.setattr(aisio.runtime.setup, "rank_and_world", lambda: (rank, world))
        yield


def _ranks(kind: str, template: str, store: MemoryStore, world: int, workers: int,
           monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    loaders = []
    for rank in range(world):
        with _as_rank(monkeypatch, rank, world):
            loaders.append(_loader(kind, template, store, workers, uneven="keep"))
    return loaders


def _lockstep(loaders: list[Any], stop: int | None = None) -> list[list[str]]:
    """Steps every rank's loader in turn (``uneven="keep"``); returns the global batches: each
    step's rank parts merged in rank order. A rank whose streams have all ended has no part
    (streams only end, so until then its step ``t`` is round ``t``)."""
    its = [iter(loader) for loader in loaders]
    out: list[list[str]] = []
    while stop is None or len(out) < stop:
        parts = [part for part in (next(it, None) for it in its) if part is not None]
        if not parts:
            break
        out.append([k for batch in _keys(parts) for k in batch])
    return out


@pytest.mark.torchdata
@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_resume_at_any_step_on_any_workers_and_ranks(
        shards: tuple[str, list[str]], store: MemoryStore, data: st.DataObject,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """1 or 2 ranks (built in this process, as each rank builds its loader) x 0-3 workers,
    interrupted at any step and resumed on any other such topology: the global batches, merged
    per step in rank order, are the 1-rank sequence element for element."""
    template, _ = shards
    kind = data.draw(st.sampled_from(sorted(LOADERS)), label="loader")
    whole = _WHOLE.setdefault((template, kind), _run(kind, template, store, 0))
    kill = data.draw(st.integers(1, len(whole) - 1), label="kill step")
    (r1, w1), (r2, w2) = (data.draw(st.tuples(st.integers(1, 2), st.integers(0, 3)),
                                    label=f"ranks, workers {when}") for when in ("before",
                                                                                  "after"))
    first = _ranks(kind, template, store, r1, w1, monkeypatch)
    final: dict[int, dict[str, Any]] = {}  # as gather_state's exchange keeps a finished rank's
    for rank, loader in enumerate(first):
        loader.on_finish = lambda epoch, state, rank=rank: final.setdefault(rank, state)
    try:
        got = _lockstep(first, stop=kill)
        states = [json.loads(json.dumps(final.get(rank) or loader.state_dict()))
                  for rank, loader in enumerate(first)]
    finally:
        for loader in first:
            loader.shutdown()
    second = _ranks(kind, template, store, r2, w2, monkeypatch)
    try:
        for loader in second:
            loader.load_state_dict(states)  # every rank's part, merged by the loader
        assert got + _lockstep(second) == whole
    finally:
        for loader in second:
            loader.shutdown()


_WHOLE: dict[tuple[str, str], list[list[str]]] = {}
