"""Tests for aisio.core.order.reorder's own parts: what a rank refuses from its readers, and
what its state says at a shard's end. Its order over real readers is tested in
tests/unit/core/order/test_streams.py and test_loader.py."""

from __future__ import annotations

import pytest

from aisio.core.order.reader import reader_rounds
from aisio.core.order.reorder import Reorderer
from aisio.core.order.streams import OrderPlan
from tests.unit.core.order.test_streams import Store


def test_a_chunk_not_due_on_the_rank_is_refused() -> None:
    """Round 0 sent twice (a loader that hands an item out again), or a chunk of another
    rank's stream: either is a loader bug, never a sample delivered twice or lost."""
    store = Store([6, 6, 6, 6], seed=2)
    plan = OrderPlan(store.refs, seed=2, epoch=0, streams=2, batch=2, buffer=0)
    packs = list(reader_rounds(plan, [0, 1], store.open))
    assert len(packs) > 2 and packs[0][0].round == 0
    again = [packs[0], packs[1], packs[0], *packs[2:]]
    with pytest.raises(AssertionError, match="is not due on this rank"):
        list(Reorderer(plan).batches(again))
    with pytest.raises(AssertionError, match="is not due on this rank"):
        list(Reorderer(plan, rank=1, world=2).batches(packs))  # stream 0 is rank 0's


def test_at_a_shards_end_the_state_names_the_next_shard_from_its_first_sample() -> None:
    """A stream without a buffer has delivered its first shard whole: its entry says the
    next shard, byte 0, sample 0 (as it says the first shard at the epoch's start)."""
    store = Store([4, 4], seed=1)
    plan = OrderPlan(store.refs, seed=1, epoch=0, streams=1, batch=2, buffer=0)
    reorderer = Reorderer(plan)
    assert reorderer.state_dict()["state"]["0"][:5] == [0, 0, 0, 0, 0]
    batches = reorderer.batches(reader_rounds(plan, [0], store.open))
    first = plan.stream_shards(0)[0]
    assert [s["__key__"] for _ in range(2) for s in next(batches)] == store.samples(first)
    assert reorderer.state_dict()["state"]["0"][:5] == [4, 4, 1, 0, 0]


@pytest.mark.parametrize("sizes", [[4, 3], [5]])
def test_streams_taken_sample_by_sample_to_their_end_are_done(sizes: list[int]) -> None:
    """One sample at a time (a checkpoint may fall inside a round), a stream is marked done as
    its last sample is taken, and a stream with no shard as its empty last chunk passes: a
    state saved then says the epoch's end, not a place in it."""
    store = Store(sizes, seed=1)
    plan = OrderPlan(store.refs, seed=1, epoch=0, streams=2, batch=2, buffer=0)
    reorderer = Reorderer(plan)
    samples = reorderer.samples(reader_rounds(plan, [0, 1], store.open))
    for _ in range(sum(sizes)):
        next(samples)
    assert next(samples, None) is None
    assert reorderer.state_dict()["state"] == {"0": "done", "1": "done"}
