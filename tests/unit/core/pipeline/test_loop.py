"""Tests for aisio.core.pipeline.loop: ResumableLoader over a list of deliveries, no framework.

A "front end" here is a function ``open_epoch(epoch, state)`` that reads the epoch's task list
(:func:`~aisio.core.epochs.progress.epoch_tasks`, the same every front end reads) from shards of
known sizes and yields a :class:`~aisio.core.transport.delivery.Delivery` per batch of samples,
each sample with its position ``(shard, ordinal, end, last)``; ranks take every other task.
The loop must yield the values, describe exactly what the training loop received, and resume
from that on any number of ranks: every sample of the epoch once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aisio
from aisio.core.epochs.progress import epoch_tasks
from aisio.core.pipeline.loop import FastOrder, ResumableLoader
from aisio.core.store.sources import ObjectRef
from aisio.core.store.urls import AISPath, Bucket
from aisio.core.transport.delivery import Delivery, Failure

SIZES = [3, 5, 1, 4, 6]  # samples per shard
SHARDS = [ObjectRef(AISPath(Bucket("b"), f"s-{i}.tar")) for i in range(len(SIZES))]
ALL = sorted(f"{shard}/{ordinal}" for shard, size in enumerate(SIZES) for ordinal in range(size))


def open_epoch(seed: int = 7, *, rank: int = 0, world: int = 1, batch: int = 2,
               skip: frozenset[str] = frozenset()) -> Any:
    """Returns an ``open_epoch`` over SHARDS: deliveries of ``batch`` samples; samples named in
    ``skip`` arrive as positions only (a skipped sample)."""
    def opened(epoch: int, state: dict[str, Any] | None) -> Iterator[Delivery]:
        tasks = epoch_tasks(SHARDS, seed, epoch, shuffle=True, resume=state)[rank::world]
        values: list[str] = []
        positions: list[tuple[int, int, int, bool]] = []
        for task in tasks:
            size = SIZES[task.index]
            for ordinal in range(task.first, size):
                if ordinal in task.skip:
                    continue
                name = f"{task.index}/{ordinal}"
                where = (task.index, ordinal, 100 * (ordinal + 1), ordinal == size - 1)
                if name in skip:
                    yield Delivery(None, [where], empty=True)
                    continue
                values.append(name)
                positions.append(where)
                if len(values) == batch:
                    yield Delivery(list(values), list(positions))
                    values.clear()
                    positions.clear()
        if values:
            yield Delivery(values, positions)

    return opened


def loader(**options: Any) -> ResumableLoader:
    seed = options.pop("seed", 7)
    return ResumableLoader(FastOrder(SHARDS, seed=seed), open_epoch=open_epoch(seed, **options))


def flat(batches: list[list[str]]) -> list[str]:
    return [name for batch in batches for name in batch]


def test_each_epoch_yields_every_sample_once_in_its_own_order() -> None:
    run = loader()
    first = flat(list(run))
    second = flat(list(run))
    assert sorted(first) == sorted(second) == ALL
    assert first != second and run.epoch == 2  # reshuffled from (seed, epoch)
    run.set_epoch(0)
    assert flat(list(run)) == first


@settings(max_examples=40, deadline=None)
@given(stop=st.integers(0, 10), world=st.sampled_from([1, 2, 3]), epoch=st.integers(0, 3))
def test_a_state_taken_mid_epoch_resumes_with_exactly_what_was_not_received(
        stop: int, world: int, epoch: int) -> None:
    """The run stops after ``stop`` batches; its state (through JSON) resumes on ``world``
    ranks, whose states merge into one: every sample of the epoch once, none twice."""
    run = loader()
    run.set_epoch(epoch)
    batches = iter(run)
    received = flat([batch for _, batch in zip(range(stop), batches, strict=False)])
    state = json.loads(json.dumps(run.state_dict()))
    assert state["epoch"] == epoch and state["delivered"] == len(received)
    rest: list[str] = []
    for rank in range(world):
        resumed = loader(rank=rank, world=world)
        resumed.load_state_dict(state)
        rest.extend(flat(list(resumed)))
        assert resumed.epoch == epoch + 1
    assert sorted(received + rest) == ALL


def test_the_states_of_every_rank_merge_into_one_resume() -> None:
    ranks = [loader(rank=rank, world=2) for rank in range(2)]
    received = []
    for run in ranks:
        iterator = iter(run)
        received.extend(next(iterator))
        received.extend(next(iterator))
    states = [run.state_dict() for run in ranks]
    single = loader()
    single.load_state_dict(states)  # the list of every rank's state
    assert sorted(received + flat(list(single))) == ALL


def test_skipped_samples_are_recorded_not_yielded_and_not_read_again() -> None:
    skip = frozenset({"1/0", "1/1", "4/5"})
    run = loader(skip=skip)
    iterator = iter(run)
    got = next(iterator) + next(iterator) + next(iterator)
    resumed = loader(skip=skip)
    resumed.load_state_dict(run.state_dict())
    finished: list[dict[str, Any]] = []
    resumed.on_finish = lambda epoch, state: finished.append(state)
    rest = flat(list(resumed))
    assert sorted(got + rest) == sorted(set(ALL) - skip)
    assert finished[0]["done"] == [[0, len(SIZES) - 1]]  # the skipped samples' shards too


def test_between_epochs_the_state_is_the_start_of_the_next() -> None:
    run = loader()
    list(run)
    state = run.state_dict()
    assert (state["epoch"], state["delivered"], state["partial"], state["done"]) == (1, 0, {}, [])
    assert state["seed"] == 7 and run.position() == (1, 0)  # (what other ranks are asked at)
    loaded = loader()
    loaded.load_state_dict(state)
    assert loaded.epoch == 1 and {**loaded.state_dict(), "base": None} == state


def test_a_state_of_another_shard_list_or_a_corrupt_one_is_refused() -> None:
    run = loader()
    state = run.state_dict()
    other = ResumableLoader(FastOrder(SHARDS[:-1], seed=7), open_epoch=open_epoch())
    with pytest.raises(aisio.StateMismatchError, match="another shard list"):
        other.load_state_dict(state)
    with pytest.raises(aisio.StateMismatchError, match="corrupt"):
        run.load_state_dict({**state, "partial": {"1": [0]}})


def test_a_loader_without_positions_refuses_to_checkpoint() -> None:
    run = ResumableLoader(FastOrder(SHARDS, seed=7, resumable=False), open_epoch=open_epoch())
    with pytest.raises(aisio.StateMismatchError, match="cannot say what the training loop"):
        run.state_dict()


def test_a_workers_failure_raises_its_error_with_the_workers_traceback() -> None:
    error = aisio.ShardFormatError("shard ais://b/s-1.tar is truncated", url="ais://b/s-1.tar")
    for failure, cause in [(Failure(error), None), (Failure(error, "Traceback: in a worker"),
                                                    aisio.WorkerTraceback)]:
        run = ResumableLoader(FastOrder(SHARDS, seed=7),
                              open_epoch=lambda e, s, f=failure: [Delivery(["0/0"], []), f])
        with pytest.raises(aisio.ShardFormatError) as info:
            list(run)
        assert info.value is error and (cause is None or isinstance(info.value.__cause__, cause))


def test_an_epoch_whose_every_shard_was_skipped_raises_and_an_empty_resume_does_not() -> None:
    report = aisio.ErrorReport()

    def all_skipped(epoch: int, state: Any) -> list[Any]:
        report.record(aisio.ShardFormatError("bad", url="ais://b/s-0.tar"))
        return []

    run = ResumableLoader(FastOrder(SHARDS, seed=7), open_epoch=all_skipped, report=report)
    with pytest.raises(aisio.EmptyEpochError, match="all 1 shard"):
        list(run)
    nothing_left = ResumableLoader(FastOrder(SHARDS, seed=7), open_epoch=lambda e, s: [],
                                   report=report)
    assert list(nothing_left) == []


def test_ranks_stop_together_and_only_a_finished_epoch_is_reported() -> None:
    finished: list[tuple[int, dict[str, Any]]] = []
    ended: list[int] = []
    steps = iter([True, True, False])  # the other rank runs out at the third step
    run = ResumableLoader(FastOrder(SHARDS, seed=7), open_epoch=open_epoch(),
                          end_epoch=lambda: ended.append(1), sync=lambda have: have and next(steps))
    run.on_finish = lambda epoch, state: finished.append((epoch, state))
    assert len(list(run)) == 2 and finished == [] and ended == [1]
    run = loader()
    run.on_finish = lambda epoch, state: finished.append((epoch, state))
    list(run)
    ((epoch, state),) = finished
    assert epoch == 0 and len(state["done"]) == 1 and state["done"][0] == [0, len(SIZES) - 1]


def test_leaving_the_loop_early_ends_the_epoch_and_close_stops_the_workers() -> None:
    calls: list[str] = []
    run = ResumableLoader(FastOrder(SHARDS, seed=7), open_epoch=open_epoch(),
                          end_epoch=lambda: calls.append("end"),
                          close=lambda: calls.append("close"))
    for _ in run:
        break
    assert calls == ["end"]
    run.shutdown()
    assert calls == ["end", "close"]


class StopAt:
    """An ``uneven="drop"`` sync that says a rank ran out before item ``at`` of each epoch,
    and keeps what the loop says it dropped."""

    def __init__(self, at: int) -> None:
        self.at, self.calls, self.told = at, 0, []

    def __call__(self, have_item: bool) -> bool:
        self.calls += 1
        return have_item and self.calls <= self.at

    def dropped(self, epoch: int, left: int) -> list[int]:
        self.told.append((epoch, left))
        return [left]


def test_a_stop_of_uneven_drop_counts_the_samples_this_rank_dropped() -> None:
    """Issue #37: uneven="drop" dropped a share's surplus silently; the loop now reads what
    this rank held past the stop and tells the ranks' sync (which warns once, on rank 0)."""
    sync = StopAt(3)
    run = ResumableLoader(FastOrder(SHARDS, seed=7), open_epoch=open_epoch(7, batch=2), sync=sync)
    got = flat(list(run))
    assert len(got) == 6
    assert sync.told == [(0, sum(SIZES) - 6)]  # the rest of the epoch



def test_a_rank_that_read_its_whole_share_drops_nothing() -> None:
    """The rank whose share ran out first (its reading ended) tells the sync it dropped 0."""
    sync = StopAt(10**6)
    run = ResumableLoader(FastOrder(SHARDS, seed=7), open_epoch=open_epoch(7, batch=2), sync=sync)
    assert len(flat(list(run))) == sum(SIZES)
    assert sync.told == [(0, 0)]


def test_a_stop_of_uneven_drop_counts_no_skipped_sample_as_dropped() -> None:
    """What a rank held past the stop counts its samples, not the positions of samples that
    were skipped (those would never have been trained on)."""
    skip = frozenset({"1/0", "1/1", "4/5", "3/2"})
    sync = StopAt(1)
    run = ResumableLoader(FastOrder(SHARDS, seed=7),
                          open_epoch=open_epoch(7, batch=2, skip=skip), sync=sync)
    got = flat(list(run))
    assert len(got) == 2
    assert sync.told == [(0, sum(SIZES) - len(skip) - len(got))]


def test_a_state_names_the_content_and_the_rank_of_each_shard_in_progress() -> None:
    """What a resume checks and keeps: the content each shard in progress had when its reader
    read it (a changed shard is refused on resume) and, under several ranks, the rank that
    reads it (the deal: a resume gives the shard back to it), before and after a resume."""
    from aisio.core.epochs.split import Deal

    def opened(epoch: int, state: dict[str, Any] | None) -> Iterator[Delivery]:
        for delivery in open_epoch(7, rank=0, world=2)(epoch, state):
            shards = {position[0] for position in delivery.positions}
            yield Delivery(delivery.value, delivery.positions, empty=delivery.empty,
                           versions={shard: f"v{shard}" for shard in shards})

    run = ResumableLoader(FastOrder(SHARDS, seed=7, world=2), open_epoch=opened)
    iterator = iter(run)
    next(iterator)
    state = run.local_state_dict()
    deal = Deal(SHARDS, 7, 0, shuffle=True, world=2)
    assert state["world"] == 2 and state["owners"] and state["seed"] == 7
    assert state["owners"] == {shard: deal[int(shard)] for shard in state["owners"]}
    assert state["versions"] == {shard: f"v{shard}" for shard in state["owners"]}
    resumed = ResumableLoader(FastOrder(SHARDS, seed=7, world=2), open_epoch=opened)
    resumed.load_state_dict(json.loads(json.dumps(state)))
    next(iter(resumed))
    again = resumed.local_state_dict()
    deal = Deal(SHARDS, 7, 0, shuffle=True, world=2, resume=state)
    assert again["owners"] == {shard: deal[int(shard)] for shard in again["owners"]}
    assert again["versions"] == {shard: f"v{shard}" for shard in again["owners"]}
    other = ResumableLoader(FastOrder(SHARDS, seed=7, world=3), open_epoch=opened)  # on 3 ranks now
    other.load_state_dict(json.loads(json.dumps(state)))
    next(iter(other))
    deal = Deal(SHARDS, 7, 0, shuffle=True, world=3, resume=state)
    assert other.local_state_dict()["owners"] == {
        shard: deal[int(shard)] for shard in other.local_state_dict()["owners"]}


def test_skipped_samples_are_no_batch_to_a_trainer_that_reports_its_steps() -> None:
    """Under a trainer that reports each step trained (Lightning's callback), a state after
    k steps is a plain loop's after k batches: skipped samples count as no step, and the
    content their shards had is kept with them."""
    skip = frozenset({"1/0", "1/1", "4/5", "3/2", "0/0"})

    def opened(epoch: int, state: dict[str, Any] | None) -> Iterator[Delivery]:
        for delivery in open_epoch(7, skip=skip)(epoch, state):
            shards = {position[0] for position in delivery.positions}
            yield Delivery(delivery.value, delivery.positions, empty=delivery.empty,
                           versions={shard: f"v{shard}" for shard in shards})

    plain = ResumableLoader(FastOrder(SHARDS, seed=7), open_epoch=opened)
    followed = ResumableLoader(FastOrder(SHARDS, seed=7), open_epoch=opened)
    followed.follow_trainer()
    for steps, (a, b) in enumerate(zip(plain, followed, strict=True), start=1):
        assert a == b
        followed.trained()
        assert followed.local_state_dict() == plain.local_state_dict()
        assert followed.position() == plain.position() == (0, steps)


def test_each_epoch_asks_the_trainer_check_before_its_first_batch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop calls the check of a trainer that fetches ahead (aisio.runtime.fetchers, which
    refuses Lightning's loop without aisio's callback, passed in by the set-up) as each epoch
    starts."""
    asked: list[Any] = []
    run = loader()
    run.check_iteration = asked.append
    assert flat(list(run)) and asked == [run]


def test_an_epochs_deliveries_give_the_warnings_a_worker_carried() -> None:
    """What a worker warned reaches the training loop with its delivery (in process: the
    travelling test runs a real worker and is not run per mutant)."""
    epoch = FastOrder(SHARDS, seed=7).start(0, None)
    item = Delivery([1], [(0, 0, 512, False)], False, None, ((UserWarning, "shard 2 skipped"),))
    with pytest.warns(UserWarning, match="shard 2 skipped"):
        assert [batch for batch, _ in epoch.batches([item])] == [[1]]
    assert epoch.held() == 0


def test_a_resume_on_as_many_ranks_names_each_shard_in_progress_with_the_rank_that_had_it() -> None:
    """The state of a resumed epoch keeps the owner its state named for a shard in progress
    (so that the next resume gives it back to that rank), not the one the deal would pick."""
    fresh = FastOrder(SHARDS, seed=7, world=2).start(0, None)
    fresh.progress.record([(3, 0, 512, False)])
    state = json.loads(json.dumps(fresh.state_dict()))
    dealt = state["owners"]["3"]
    state["owners"]["3"] = 1 - dealt  # as if the other rank had read it
    resumed = FastOrder(SHARDS, seed=7, world=2).start(0, state)
    assert resumed.state_dict()["owners"] == {"3": 1 - dealt}
