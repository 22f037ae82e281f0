"""Which rank reads which shard: a fresh epoch deals the shards in turn, and a resumed one on as
many ranks leaves every rank what it would have read next in the uninterrupted epoch (under
``uneven="drop"`` a rank with more than the others loses the surplus: issue #37's lost sample
after a resume under Lightning DDP, with a shuffle buffer, from a checkpoint late in the epoch)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from aisio.core.epochs.progress import (
    EpochProgress,
    ShardTask,
    epoch_tasks,
    merge_states,
    shard_order,
)
from aisio.core.epochs.split import Deal, epoch_split, owners_of
from aisio.core.pipeline.shuffle import shuffle_buffer
from aisio.core.store.sources import ObjectRef
from aisio.core.store.urls import parse_ais_url


def refs(count: int) -> list[ObjectRef]:
    return [ObjectRef(parse_ais_url(f"ais://b/s-{i:03d}.tar")) for i in range(count)]


def samples(task: ShardTask, per_shard: int) -> Iterator[tuple[int, int, int, bool]]:
    for ordinal in range(task.first, per_shard):
        if ordinal not in task.skip:
            yield task.index, ordinal, 100 * (ordinal + 1), ordinal == per_shard - 1


def rank_stream(share: Sequence[ShardTask], per_shard: int, workers: int, buffer: int,
                seed: str) -> Iterator[tuple[int, int, int, bool]]:
    """The rank's samples as its loader yields them: each worker its share of the rank's tasks
    in turn, through its own shuffle buffer, the workers' batches one after another."""
    streams = [shuffle_buffer((s for t in share[w::workers] for s in samples(t, per_shard)),
                              buffer, random.Random(f"{seed}:{w}")) for w in range(workers)]
    while streams:
        for stream in list(streams):
            sample = next(stream, None)
            if sample is None:
                streams.remove(stream)
            else:
                yield sample


def test_a_fresh_epoch_deals_the_shards_in_turn() -> None:
    shards = refs(7)
    order = [t.index for t in epoch_tasks(shards, 5, 2, shuffle=True)]
    shares = epoch_split(shards, 5, 2, shuffle=True, world=3)
    assert [[t.index for t in share] for share in shares] == [order[r::3] for r in range(3)]
    assert owners_of(shares) == {index: p % 3 for p, index in enumerate(order)}


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 10), st.integers(2, 4), st.integers(1, 3), st.integers(1, 3),
       st.integers(1, 12), st.integers(1, 6), st.integers(0, 2**16), st.data())
def test_a_resume_on_as_many_ranks_leaves_each_rank_its_own_rest(
        count: int, world: int, workers: int, workers_after: int, buffer: int, batch: int,
        seed: int, data: st.DataObject) -> None:
    per_shard = data.draw(st.integers(1, 12))
    shards = refs(count)
    fresh = epoch_split(shards, seed, 0, shuffle=True, world=world)
    share_size = [len(share) * per_shard for share in fresh]
    steps = data.draw(st.integers(0, min(share_size) // batch))
    states, trained = [], Counter[tuple[int, int]]()
    for rank, share in enumerate(fresh):
        progress = EpochProgress(shards, seed, 0)
        progress.world, progress.owners = world, owners_of(fresh)
        stream = rank_stream(share, per_shard, workers, buffer, f"{seed}:{rank}")
        for _ in range(steps):
            got = [next(stream) for _ in range(batch)]
            progress.record(got)
            trained.update((s, o) for s, o, _, _ in got)
        states.append(progress.state_dict())
    merged = merge_states(states)
    resumed = epoch_split(shards, seed, 0, shuffle=True, world=world, resume=merged)
    for rank in range(world):
        rest = list(rank_stream(resumed[rank], per_shard, workers_after, buffer, "after"))
        assert len(rest) == share_size[rank] - steps * batch  # what it had left, no more
        trained.update((s, o) for s, o, _, _ in rest)
    assert trained == Counter((s, o) for s in range(count) for o in range(per_shard))


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 9), st.integers(1, 3), st.integers(1, 4), st.integers(1, 8),
       st.integers(0, 2**16))
def test_a_resume_on_other_ranks_reads_the_rest_once(count: int, world: int, world_after: int,
                                                     per_shard: int, seed: int) -> None:
    shards = refs(count)
    fresh = epoch_split(shards, seed, 1, shuffle=True, world=world)
    states = []
    for share in fresh:
        progress = EpochProgress(shards, seed, 1)
        progress.world, progress.owners = world, owners_of(fresh)
        progress.record(list(rank_stream(share, per_shard, 1, 3, "x"))[: per_shard + 1])
        states.append(progress.state_dict())
    merged = merge_states(states)
    resumed = epoch_split(shards, seed, 1, shuffle=True, world=world_after, resume=merged)
    left = Counter((s, o) for share in resumed for t in share for s, o, _, _ in
                   samples(t, per_shard))
    done = EpochProgress.from_state(merged, shards)
    assert sum(left.values()) + done.delivered == count * per_shard
    assert max(left.values(), default=1) == 1
    assert all(0 <= rank < world_after for rank in owners_of(resumed).values())


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 60), st.integers(1, 5), st.integers(0, 3), st.booleans(), st.data())
def test_a_deal_gives_each_rank_its_share_and_each_shard_its_owner(
        count: int, world: int, seed: int, resume: bool, data: st.DataObject) -> None:
    """Deal.tasks(rank) is epoch_split's share of that rank, and deal[shard] the rank whose
    share holds it, made one rank and one shard at a time."""
    from aisio.core.epochs.progress import EpochProgress
    from aisio.core.epochs.split import Deal

    shards = refs(count)
    progress = None
    if resume:
        progress = EpochProgress(shards, seed, 0)
        for index in data.draw(st.sets(st.integers(0, count - 1), max_size=count)):
            progress.record([(index, 0, 10, data.draw(st.booleans()))])  # done, or in progress
        progress.world = world
        progress.owners = {index: data.draw(st.integers(0, world)) for index in progress.partial}
    shares = epoch_split(shards, seed, 0, shuffle=True, world=world, resume=progress)
    deal = Deal(shards, seed, 0, shuffle=True, world=world, resume=progress)
    assert [deal.tasks(rank) for rank in range(world)] == shares
    assert dict(deal) == owners_of(shares)


def test_shards_in_progress_without_an_owner_among_the_ranks_are_dealt_in_turn() -> None:
    """A shard in progress goes back to its owner when the state names one of the ranks now;
    the others (no owner named, or one that is not a rank: 3 of 3 ranks) are dealt in turn,
    in the epoch's order, from rank 0 (rank 0 is an owner like any other)."""
    from aisio.core.epochs.split import Deal

    shards = refs(8)
    order = [t.index for t in epoch_tasks(shards, 3, 0, shuffle=True)]
    progress = EpochProgress(shards, 3, 0)
    for index in order[:5]:
        progress.record([(index, 0, 10, False)])  # each shard's first sample: in progress
    progress.world = 3
    progress.owners = {order[1]: 0, order[2]: 2, order[3]: 1, order[4]: 3}
    deal = Deal(shards, 3, 0, shuffle=True, world=3, resume=progress)
    assert [deal[index] for index in order[:5]] == [0, 0, 2, 1, 1]
    # on another number of ranks every owner is of other ranks: all in turn
    deal = Deal(shards, 3, 0, shuffle=True, world=2, resume=progress)
    assert [deal[index] for index in order[:5]] == [0, 1, 0, 1, 0]


def test_a_shard_done_or_not_in_the_list_has_no_owner() -> None:
    from aisio.core.epochs.split import Deal

    shards = refs(6)
    progress = EpochProgress(shards, 3, 0)
    progress.record([(2, 0, 10, True)])  # shard 2's only sample: done
    deal = Deal(shards, 3, 0, shuffle=True, world=2, resume=progress)
    assert 2 not in deal and 6 not in deal and -1 not in deal
    assert all(index in deal for index in (0, 1, 3, 4, 5)) and len(deal) == 5


def test_a_resumed_deal_follows_the_states_seed_and_a_stale_progress_is_a_fresh_epoch() -> None:
    """A resumed epoch is the order its state was seeded with, whatever seed the run passes
    now (as its tasks are, :func:`epoch_tasks`); a progress of another epoch is not resumed:
    the epoch is dealt from its start."""
    shards = refs(12)
    before = EpochProgress(shards, 7, 1)
    before.record([(5, 0, 100, False), (8, 0, 100, True)])
    state = before.state_dict()
    resumed = Deal(shards, 8, 1, shuffle=True, world=2, resume=state)
    assert resumed.order.tolist() == shard_order(12, 7, 1, shuffle=True)
    assert sorted(resumed.tasks(0) + resumed.tasks(1), key=lambda task: task.index) == sorted(
        epoch_tasks(shards, 8, 1, shuffle=True, resume=state), key=lambda task: task.index)
    fresh = Deal(shards, 8, 2, shuffle=True, world=2, resume=before)
    assert fresh.done == set() and fresh.started == {}
    assert [fresh.tasks(rank) for rank in (0, 1)] == epoch_split(shards, 8, 2, shuffle=True,
                                                                 world=2)
