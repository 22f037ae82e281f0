"""torch.distributed as the loaders use it (aisio.runtime.dist), on two real gloo ranks: forked
processes over a file store in a temporary folder, no network. Rank 0's seed and values reach
every rank, ``uneven="drop"`` stops the ranks together and says what each dropped, and the
ranks' states merge into one, with or without a loader's exchange. (The trainer tests run the
same code under DDP; these make each rule checkable per mutant, in seconds.)"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import torch.distributed as dist

from aisio.core.epochs.progress import EpochProgress
from aisio.core.store.sources import ObjectRef
from aisio.core.store.urls import parse_ais_url
from aisio.runtime import dist as aisio_dist

WORLD = 2
SHARDS = [ObjectRef(parse_ais_url(f"ais://b/s-{n}.tar")) for n in range(4)]


def _join(rank: int, init: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD,
                            timeout=timedelta(seconds=60))


def _rank_main(work: Callable[[int], Any], rank: int, init: str, answer: Any) -> None:
    try:
        _join(rank, init)
        try:
            answer.send((True, work(rank)))
        finally:
            dist.destroy_process_group()
    except BaseException:
        answer.send((False, traceback.format_exc()))
    finally:
        os._exit(0)  # (not pytest's exit handlers: this is a forked copy of the test process)


def on_ranks(work: Callable[[int], Any]) -> list[Any]:
    """Runs ``work(rank)`` on each rank of a gloo job of two and returns what each returned:
    rank 0 in this process (so that what it calls is seen here, by coverage and mutation
    runs alike), rank 1 in a process forked before this one joins the group."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    with tempfile.TemporaryDirectory() as folder:
        init = f"file://{folder}/store"
        other = context.Process(target=_rank_main, args=(work, 1, init, send))
        other.start()
        try:
            _join(0, init)
            try:
                mine = work(0)
            finally:
                dist.destroy_process_group()
            ok, theirs = receive.recv() if receive.poll(120) else (False, "no answer in 120 s")
        finally:
            other.join(timeout=30)
            if other.is_alive():
                other.kill()
    if not ok:
        pytest.fail(f"rank 1:\n{theirs}")
    return [mine, theirs]


def _seeds(rank: int) -> tuple[int, int, tuple[int, int]]:
    return (aisio_dist.shared_seed(10 + rank), aisio_dist.shared_seed(None),
            aisio_dist.rank_and_world())


def test_every_rank_takes_rank_zeros_seed() -> None:
    """Each rank shuffles the shards with one seed: rank 0's, given or drawn."""
    given, drawn = zip(*[(a, b) for a, b, _ in on_ranks(_seeds)], strict=True)
    assert given == (10, 10)
    assert drawn[0] == drawn[1]
    assert [world for _, _, world in on_ranks(_seeds)] == [(0, 2), (1, 2)]
    assert aisio_dist.shared_seed(7) == 7  # one process: its own
    assert aisio_dist.rank_and_world() == (0, 1)


def _stops(rank: int) -> tuple[Any, ...]:
    sync = aisio_dist.drop_sync("drop")
    assert isinstance(sync, aisio_dist.DropSync)
    assert aisio_dist.drop_sync("keep") is None
    return sync(True), sync(rank == 0), sync(rank == 1), sync(False)


def test_ranks_under_uneven_drop_go_on_only_while_every_rank_has_an_item() -> None:
    assert on_ranks(_stops) == [(True, False, False, False)] * WORLD
    assert aisio_dist.drop_sync("drop") is None  # one process: nothing to wait for
    with pytest.raises(ValueError, match="uneven='even' must be 'drop' or 'keep'"):
        aisio_dist.drop_sync("even")


def _dropped(rank: int) -> tuple[list[int], list[str], list[int], list[str]]:
    sync = aisio_dist.drop_sync("drop")
    assert sync is not None
    with warnings.catch_warnings(record=True) as some:
        warnings.simplefilter("always")
        counts = sync.dropped(3, 2 * rank)
    with warnings.catch_warnings(record=True) as none:
        warnings.simplefilter("always")
        zeros = sync.dropped(4, 0)
    return counts, [str(w.message) for w in some], zeros, [str(w.message) for w in none]


def test_the_ranks_say_what_each_dropped_and_rank_zero_warns_once() -> None:
    """A stop of ``uneven="drop"`` gives every rank each rank's count; rank 0 alone warns, and
    only when a sample was dropped (issue #37: 13% of an epoch went silently)."""
    (counts0, warned0, zeros0, quiet0), (counts1, warned1, zeros1, quiet1) = on_ranks(_dropped)
    assert counts0 == counts1 == [0, 2]
    assert zeros0 == zeros1 == [0, 0]
    assert warned1 == [] and quiet0 == quiet1 == []
    assert len(warned0) == 1
    assert "epoch 3 ended when the first of the 2 ranks ran out" in warned0[0]
    assert "dropped [0, 2] samples (by rank; 2 in all)" in warned0[0]
    assert 'uneven="keep" trains on every sample' in warned0[0]


def _job(rank: int) -> tuple[Any, list[bool], list[bool], tuple[int, int]]:
    ranks = aisio_dist.job_ranks()
    assert ranks is not None
    return (ranks.broadcast({"from": rank}), ranks.flags(rank == 1), ranks.flags(True),
            (ranks.rank, ranks.world))


def test_the_job_ranks_hear_rank_zero_and_each_others_flags_by_rank() -> None:
    assert on_ranks(_job) == [({"from": 0}, [False, True], [True, True], (rank, WORLD))
                              for rank in range(WORLD)]
    assert aisio_dist.job_ranks() is None  # one process


def _progress(rank: int) -> EpochProgress:
    progress = EpochProgress(SHARDS, 5, 0)
    progress.record([(rank, 0, 100, False), (rank, 1, 200, True)])
    return progress


class _Plain:
    """A loader without an exchange: its state is gathered by a collective."""

    def __init__(self, rank: int, ordered: bool = False) -> None:
        self.rank, self.ordered = rank, ordered

    def state_dict(self) -> dict[str, Any]:
        if self.ordered:  # (order="deterministic": each rank holds its own streams)
            return {"order": "deterministic", "epoch": 0, "state": {str(self.rank): [self.rank]}}
        return _progress(self.rank).state_dict()


def _merged_plain(rank: int) -> tuple[dict[str, Any], dict[str, Any]]:
    return (aisio_dist.gather_state(_Plain(rank)),
            aisio_dist.gather_state(_Plain(rank, ordered=True)))


def test_a_state_gathered_without_an_exchange_is_every_ranks_merged() -> None:
    (first, ordered), (second, ordered_too) = on_ranks(_merged_plain)
    assert first == second
    assert first["done"] == [[0, 1]] and first["delivered"] == 4
    assert ordered == ordered_too == {"order": "deterministic", "epoch": 0,
                                      "state": {"0": [0], "1": [1]}}
    alone = _Plain(1).state_dict()
    assert aisio_dist.gather_state(_Plain(1)) == alone  # one process: its own


class _Exchanging:
    """A loader of aisio's surface for the exchange: its shards, seed, position and state."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.shards, self.seed, self.state = SHARDS, 5, state
        self.exchange: Any = None
        self.on_finish: Any = None

    def position_and_state(self) -> tuple[tuple[int, int], dict[str, Any]]:
        return (0, 2), self.state


def _merged_exchanges(rank: int) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """Two loaders over the same shards and seed on each rank (say, train and a second pass):
    each gathers its own ranks' states, never the other loader's."""
    first = aisio_dist.with_exchange(_Exchanging(_progress(rank).state_dict()))
    other = EpochProgress(SHARDS, 5, 0)
    other.record([(2 + rank, 0, 100, True)])
    second = aisio_dist.with_exchange(_Exchanging(other.state_dict()))
    try:
        bound = (first.on_finish == first.exchange.finished
                 and isinstance(second.exchange, aisio_dist.StateExchange))
        return aisio_dist.gather_state(second), aisio_dist.gather_state(first), bound
    finally:
        first.exchange.stop()
        second.exchange.stop()


def test_each_loader_gathers_its_own_ranks_states_through_its_exchange() -> None:
    results = on_ranks(_merged_exchanges)
    for second, first, bound in results:
        assert bound
        assert first["done"] == [[0, 1]] and first["delivered"] == 4
        assert second["done"] == [[2, 3]] and second["delivered"] == 2
    plain = _Exchanging({"x": 1})
    assert aisio_dist.with_exchange(plain) is plain and plain.exchange is None  # one process


def _only_rank_zero_asks(rank: int) -> dict[str, Any] | None:
    """Rank 0 asks for the state (``if accelerator.is_main_process: save_state()``); rank 1
    does not, and waits for it at the same step, as at ``wait_for_everyone()`` (here on a key
    of the store: no collective it could answer by mistake)."""
    loader = aisio_dist.with_exchange(_Exchanging(_progress(rank).state_dict()))
    store = loader.exchange.store
    try:
        if rank == 0:
            state = aisio_dist.gather_state(loader)
            store.set("saved", "1")
            return state
        for _ in range(12_000):  # (at most two minutes; on_ranks gives up at the same time)
            if store.check(["saved"]):
                return None
            time.sleep(0.01)
        raise AssertionError("rank 0 never saved")
    finally:
        loader.exchange.stop()


def test_a_state_asked_by_rank_zero_alone_is_every_ranks_through_the_exchange() -> None:
    """The save on the main process alone (issue #37): rank 1's answering thread gives its
    state while it waits; a collective here would wait for rank 1 until the group's timeout."""
    state, waited = on_ranks(_only_rank_zero_asks)
    assert waited is None
    assert state["done"] == [[0, 1]] and state["delivered"] == 4
