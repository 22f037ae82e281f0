"""Tests for aisio.core.order.loader: DeterministicOrder (under the one loader class,
ResumableLoader) and OrderSetup, no framework, no cluster.

The readers are the real ones (:func:`~aisio.core.order.reader.reader_rounds`) over shards held
in memory (``Store`` of tests/unit/core/order/test_streams.py); a "front end" is the function
``open_epoch(epoch, state)`` that publishes the epoch and hands out its readers' packs,
interleaved like a loader's workers (round robin, or at random keeping each worker's order).
The loader must yield the same batches whatever the workers and the interleaving, and
resume from its state with exactly the batches the uninterrupted run yields next.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aisio
from aisio.core.epochs.plan import EpochPlan
from aisio.core.faults.policy import SKIPPED
from aisio.core.order.loader import (
    DeterministicOrder,
    OrderSetup,
    check_ordered_options,
    default_streams,
    is_deterministic,
    refuse_streams,
)
from aisio.core.order.reader import Chunk, reader_rounds, rounds_per_item
from aisio.core.order.streams import merge_order_states
from aisio.core.pipeline.loop import ResumableLoader
from aisio.core.pipeline.spec import PipelineSpec
from aisio.core.transport.delivery import Failure
from tests.unit.core.order.test_streams import Store, interleave

SIZES = [7, 3, 9, 5, 6, 4]
SEED = 11


def ordered(store: Store, *, workers: int = 2, rank: int = 0, world: int = 1, batch: int = 8,
            streams: int | None = 4, buffer: int = 3, shuffle: int | None = None,
            stage: Any = None, collate: Any = None) -> ResumableLoader:
    """Returns a deterministic-order loader over ``store`` whose readers run in this process."""
    spec = PipelineSpec.build(endpoint="http://127.0.0.1:9", batch_size=batch,
                              shuffle_buffer=buffer)
    setup = OrderSetup.build(store.refs, spec, seed=SEED, streams=streams, rank=rank,
                             world=world, epochs=EpochPlan(), where="test")
    rng = None if shuffle is None else random.Random(shuffle)

    def open_epoch(epoch: int, state: dict[str, Any] | None) -> Iterator[Any]:
        setup.epochs.publish(epoch, state)
        _, published = setup.epochs.read()
        plan = setup.plan(epoch)
        group = rounds_per_item(plan, plan.rank_streams(rank, world), workers)
        readers = [reader_rounds(plan, plan.reader_streams(rank, world, w, workers), store.open,
                                 state=published, group=group, stage=stage)
                   for w in range(max(workers, 1))]
        return interleave(readers, rng)

    return ResumableLoader(DeterministicOrder(setup, collate=collate), open_epoch=open_epoch,
                           report=spec.report, timings=spec.times)


def keys(batches: list[list[dict[str, Any]]]) -> list[list[str]]:
    return [[sample["__key__"] for sample in batch] for batch in batches]


STORE = Store(SIZES, SEED)
WHOLE = keys(list(ordered(STORE, workers=0)))


def test_an_epoch_is_every_sample_once_in_batches_of_the_global_size() -> None:
    assert sorted(k for batch in WHOLE for k in batch) == sorted(
        key for index in range(len(SIZES)) for key in STORE.samples(index))
    sizes = [len(batch) for batch in WHOLE]
    assert sizes[0] == 8 and sizes == sorted(sizes, reverse=True)  # short once streams end


@pytest.mark.parametrize(("workers", "shuffle"), [(1, None), (2, None), (3, 5), (4, 6)])
def test_the_batches_are_the_same_on_any_workers_and_interleaving(
        workers: int, shuffle: int | None) -> None:
    assert keys(list(ordered(STORE, workers=workers, shuffle=shuffle))) == WHOLE


def test_each_epoch_has_its_own_order_and_set_epoch_goes_back() -> None:
    run = ordered(STORE)
    first, second = keys(list(run)), keys(list(run))
    assert first == WHOLE and second != first and run.epoch == 2
    run.set_epoch(1)
    assert keys(list(run)) == second


@settings(max_examples=25, deadline=None)
@given(stop=st.integers(0, 12), workers=st.integers(0, 3), world=st.sampled_from([1, 2, 4]),
       shuffle=st.none() | st.integers(0, 9))
def test_a_state_taken_at_any_step_resumes_with_the_batches_the_run_yields_next(
        stop: int, workers: int, world: int, shuffle: int | None) -> None:
    """Stopped after ``stop`` batches, the state (through JSON) resumes on ``world`` ranks and
    ``workers`` workers; their batches, merged round by round, are the rest of WHOLE."""
    run = ordered(STORE, workers=2)
    batches = iter(run)
    got = [next(batches) for _ in range(min(stop, len(WHOLE)))]
    state = json.loads(json.dumps(run.state_dict()))
    ranks = [ordered(STORE, workers=workers, rank=r, world=world, shuffle=shuffle)
             for r in range(world)]
    for rank in ranks:
        rank.load_state_dict(state)
    rest = [keys(list(rank)) for rank in ranks]
    merged = [[key for part in rest if t < len(part) for key in part[t]]
              for t in range(max(map(len, rest)))]
    assert keys(got) + merged == WHOLE


def test_the_states_of_every_rank_resume_on_one() -> None:
    ranks = [ordered(STORE, rank=r, world=2) for r in range(2)]
    iterators = [iter(rank) for rank in ranks]
    for _ in range(3):
        for iterator in iterators:
            next(iterator)
    single = ordered(STORE, workers=1)
    single.load_state_dict([rank.state_dict() for rank in ranks])
    assert keys(list(single)) == WHOLE[3:]


def test_before_the_first_step_the_state_is_the_epochs_start_or_the_loaded_one() -> None:
    run = ordered(STORE)
    fresh = run.state_dict()
    assert fresh["epoch"] == 0
    iterator = iter(run)
    next(iterator)
    taken = run.state_dict()
    other = ordered(STORE)
    other.load_state_dict(taken)
    assert other.state_dict() == taken and other.epoch == 0


def test_collate_makes_each_batch() -> None:
    assert list(ordered(STORE, collate=len)) == [len(batch) for batch in WHOLE]


def test_skipped_samples_leave_their_batch_and_a_round_of_nothing_yields_nothing() -> None:
    skipped = {key for batch in WHOLE[:2] for key in batch} | {WHOLE[3][0]}

    def stage(sample: dict[str, Any]) -> Any:
        return SKIPPED if sample["__key__"] in skipped else sample

    got = keys(list(ordered(STORE, stage=stage)))
    assert got == [[k for k in batch if k not in skipped] for batch in WHOLE[2:]]


def test_a_readers_failure_raises_its_error_with_the_readers_traceback() -> None:
    error = aisio.ShardFormatError("shard ais://b/train-0001.tar is truncated", url="x")
    run = ordered(STORE)
    run._open_epoch = lambda epoch, state: iter([Failure(error, "Traceback: in a worker")])
    with pytest.raises(aisio.ShardFormatError) as info:
        list(run)
    assert info.value is error and isinstance(info.value.__cause__, aisio.WorkerTraceback)


def test_a_state_of_another_plan_or_order_is_refused() -> None:
    run = ordered(STORE)
    state = run.state_dict()
    with pytest.raises(aisio.StateMismatchError):
        ordered(STORE, batch=16).load_state_dict(state)
    with pytest.raises(aisio.StateMismatchError):
        ordered(Store(SIZES, SEED + 1, name="other")).load_state_dict(state)
    with pytest.raises(aisio.StateMismatchError, match="names no epoch"):
        run.load_state_dict({"version": 1, "shards": 6})


@pytest.mark.parametrize(("batch", "streams", "world", "match"), [
    (8, 3, 1, "streams=3 must divide the global batch_size=8"),
    (8, 4, 3, "3 ranks cannot share streams=4"),
    (6, 2, 2, None),  # fine: 2 streams, 2 ranks, 3 samples each
    (12, 6, 2, None),
    (12, None, 1, None),  # K = gcd(12, 8) = 4
])
def test_streams_and_ranks_must_divide_the_global_batch(batch: int, streams: int | None,
                                                        world: int, match: str | None) -> None:
    spec = PipelineSpec.build(endpoint="http://127.0.0.1:9", batch_size=batch)
    build = dict(seed=0, streams=streams, rank=0, world=world, epochs=EpochPlan(), where="f")
    if match is None:
        setup = OrderSetup.build(STORE.refs, spec, **build)  # type: ignore[arg-type]
        assert setup.batch % setup.streams == 0 and setup.streams % world == 0
        return
    with pytest.raises(aisio.ConfigError, match=match):
        OrderSetup.build(STORE.refs, spec, **build)  # type: ignore[arg-type]


def test_the_order_options_are_checked() -> None:
    assert is_deterministic("deterministic", "f") and not is_deterministic("fast", "f")
    with pytest.raises(aisio.ConfigError, match="has no order='shuffled'"):
        is_deterministic("shuffled", "f")
    with pytest.raises(aisio.ConfigError, match="streams= goes with"):
        refuse_streams(4, "f")
    refuse_streams(None, "f")
    for option in ("drop_last", "decode_threads", "resampled"):
        with pytest.raises(aisio.ConfigError, match=f"cannot honour {option}="):
            check_ordered_options({option: True, "batch_size": 8}, "f")
    with pytest.raises(aisio.ConfigError, match="needs batch_size=G"):
        check_ordered_options({}, "f")


@pytest.mark.parametrize("batch, shards, world, streams", [
    (8, 1, 1, 1),  # one shard: one stream, not a second one without a shard
    (8, 3, 1, 2),  # no more streams than shards
    (64, 100, 1, 8),  # at most STREAMS_CAP
    (24, 100, 1, 8), (24, 5, 1, 4), (5, 4, 1, 1), (7, 100, 1, 7),  # the largest divisor
    (8, 100, 2, 8), (6, 100, 2, 6), (6, 2, 2, 2), (12, 100, 3, 6),  # a multiple of world
    (8, 100, 3, None), (9, 100, 2, None), (4, 1, 2, None),  # none fits: the caller says so
])
def test_the_default_streams_is_the_largest_that_fits(
        batch: int, shards: int, world: int, streams: int | None) -> None:
    assert default_streams(batch, shards, world) == streams


def _packs(items: Iterator[Any]) -> list[Any]:
    return [item if isinstance(item, Failure) else
            [(c.stream, c.round, c.values, c.trace, c.done, c.versions) for c in item]
            for item in items]


@pytest.mark.parametrize(("rank", "world", "workers"), [(0, 1, 1), (0, 1, 2), (1, 2, 2)])
def test_the_setups_rounds_are_its_readers_rounds_of_the_published_epoch(
        rank: int, world: int, workers: int) -> None:
    """What a front end's worker runs (OrderSetup.rounds, then stage_pack where samples are
    staged apart): the readers of the test front end above, over the published epoch."""
    memory = STORE.memory()
    spec = PipelineSpec.build(store=memory, batch_size=8, shuffle_buffer=3,
                              map=lambda sample: sample["__key__"])
    setup = OrderSetup.build(STORE.refs, spec, seed=SEED, streams=4, rank=rank, world=world,
                             epochs=EpochPlan(), where="test")
    setup.epochs.publish(1, None)
    plan = setup.plan(1)
    group = rounds_per_item(plan, plan.rank_streams(rank, world), workers)
    for worker in range(workers):
        expected = _packs(reader_rounds(plan, plan.reader_streams(rank, world, worker, workers),
                                        memory.open, group=group, stage=spec.stage()))
        assert expected and _packs(setup.rounds(worker, workers)) == expected
        staged_apart = [setup.stage_pack(pack) for pack in setup.rounds(worker, workers,
                                                                         stage=False)]
        assert _packs(iter(staged_apart)) == expected


def test_a_reader_that_fails_ends_its_rounds_with_the_failure() -> None:
    error = aisio.ObjectNotFoundError("gone", url="ais://b/train-0000.tar")
    memory = STORE.memory()
    for ref in STORE.refs:
        memory.fail(ref.uri(), error=error)
    spec = PipelineSpec.build(store=memory, batch_size=8)
    setup = OrderSetup.build(STORE.refs, spec, seed=SEED, streams=4, rank=0, world=1,
                             epochs=EpochPlan(),
                             where="test")
    setup.epochs.publish(0, None)
    *_, last = setup.rounds()
    assert isinstance(last, Failure) and last.error is error and last.traceback is None
    decode_error = aisio.DecodeError("bad", url="x")

    def bad(sample: Any) -> Any:
        raise decode_error

    staged = OrderSetup.build(
        STORE.refs, PipelineSpec.build(endpoint="http://127.0.0.1:9", batch_size=8, map=bad),
        seed=SEED, streams=4, rank=0, world=1, epochs=EpochPlan(), where="test")
    failure = staged.stage_pack([Chunk(0, 0, [{"__key__": "a"}], [(0, 0, 1, False)], False)])
    assert isinstance(failure, Failure) and failure.error is decode_error
    assert staged.stage_pack(failure) is failure


def test_a_front_end_over_the_setups_rounds_resumes_where_it_stopped() -> None:
    def loader(workers: int) -> ResumableLoader:
        spec = PipelineSpec.build(store=STORE.memory(), batch_size=8, shuffle_buffer=3)
        setup = OrderSetup.build(STORE.refs, spec, seed=SEED, streams=4, rank=0, world=1,
                                 epochs=EpochPlan(), where="test")

        def open_epoch(epoch: int, state: dict[str, Any] | None) -> Iterator[Any]:
            setup.epochs.publish(epoch, state)  # as a front end does before its workers read
            return interleave([setup.rounds(w, workers) for w in range(workers)], None)

        return ResumableLoader(DeterministicOrder(setup), open_epoch=open_epoch,
                               report=spec.report)

    assert keys(list(loader(2))) == WHOLE
    run = loader(2)
    batches = iter(run)
    assert [keys([next(batches)])[0] for _ in range(3)] == WHOLE[:3]
    resumed = loader(3)
    resumed.load_state_dict(json.loads(json.dumps(run.state_dict())))
    assert keys(list(resumed)) == WHOLE[3:]


def test_a_rank_whose_streams_have_no_shard_yields_nothing_and_no_batch_to_train_on() -> None:
    """Two shards over four streams: rank 1 of 2 owns the two streams without a shard, so its
    one round is empty. Its epoch ends without error (earlier skips in the report are not
    this epoch's), and a trainer has no batch of it to report trained."""
    with pytest.warns(UserWarning, match="streams"):
        run = ordered(Store([7, 5], SEED), rank=1, world=2, batch=4, streams=4)
    assert run.report is not None
    run.report.record(aisio.ShardFormatError("bad", url="ais://b/old.tar"))  # an earlier epoch's
    run.follow_trainer()
    assert list(run) == [] and run.epoch == 1
    with pytest.raises(aisio.UsageError, match="has yielded 0"):
        run.trained()


def test_a_round_whose_samples_were_all_skipped_counts_with_the_batch_trained_before_it(
) -> None:
    """A trainer that fetches a batch ahead (Lightning's fetcher) trains on WHOLE[0], then
    on WHOLE[2]: round 1, skipped whole, lies between them. The state after the second
    report covers rounds 0 to 2, so a resume yields WHOLE[3:] and nothing again."""
    skipped = set(WHOLE[1])

    def stage(sample: dict[str, Any]) -> Any:
        return SKIPPED if sample["__key__"] in skipped else sample

    run = ordered(STORE, stage=stage)
    run.follow_trainer()
    batches = iter(run)
    first, second = next(batches), next(batches)  # WHOLE[1] is skipped on the way
    run.trained()  # the step on the first batch
    next(batches)  # fetched ahead of the step on the second
    run.trained()
    assert keys([first, second]) == [WHOLE[0], WHOLE[2]]
    resumed = ordered(STORE, stage=stage)
    resumed.load_state_dict(json.loads(json.dumps(run.state_dict())))
    assert keys(list(resumed)) == WHOLE[3:]


def test_an_epoch_that_a_rank_ends_early_is_over_like_any_other() -> None:
    """With ``uneven="drop"`` every rank stops once one runs out (``sync`` says so): the
    loader is then at the next epoch, its state that epoch's start."""
    run = ordered(STORE)
    answers = iter([True, True, False])
    run._sync = lambda have_batch: next(answers)
    assert keys(list(run)) == WHOLE[:2]
    assert run.epoch == 1 and run.state_dict()["epoch"] == 1
    assert keys(list(ordered(STORE))) == WHOLE  # (the same run from its start, for scale)


def test_the_setups_rounds_default_to_one_reader_and_apply_the_error_policy() -> None:
    """``rounds()`` with no worker named is the only reader of the rank (all its streams);
    a missing shard under ``on_error="skip"`` is skipped and recorded, not sent as a
    failure."""
    bad = STORE.refs[2].uri()
    memory = STORE.memory()
    memory.delete(bad)
    spec = PipelineSpec.build(store=memory, batch_size=8, on_error="skip",
                              map=lambda sample: sample["__key__"])
    setup = OrderSetup.build(STORE.refs, spec, seed=SEED, streams=4, rank=0, world=1,
                             epochs=EpochPlan(), where="test")
    setup.epochs.publish(0, None)
    packs = list(setup.rounds())
    assert not any(isinstance(pack, Failure) for pack in packs)
    got = {key for pack in packs for chunk in pack for key in chunk.values}
    assert got == {key for index in range(len(SIZES)) if index != 2
                   for key in STORE.samples(index)}
    assert spec.report is not None and [r["shard"] for r in spec.report.records()] == [bad]


def test_before_its_epoch_starts_each_rank_states_its_own_streams_only() -> None:
    """A checkpoint taken before the first batch: each rank's state holds its own streams (at
    their start, or as a loaded state has them), so every rank's merge into one."""
    store = Store([5, 6, 7, 8])
    loaders = [ordered(store, rank=rank, world=2) for rank in range(2)]
    states = [loader.local_state_dict() for loader in loaders]
    assert [sorted(state["state"]) for state in states] == [["0", "1"], ["2", "3"]]
    merged = merge_order_states(states)
    for loader in loaders:
        loader.load_state_dict(merged)
    assert merge_order_states([loader.local_state_dict() for loader in loaders]) == merged


def test_a_state_of_another_epoch_starts_the_epoch_from_its_start() -> None:
    """``start`` given a state of another epoch ignores it, as the fast order does: the epoch
    starts afresh instead of refusing the state."""
    run = ordered(STORE)
    batches = iter(run)
    next(batches)
    state = run.state_dict()
    assert state["epoch"] == 0
    order = run.order
    running = order.start(1, state)
    assert running.resume is None and running.state_dict() == order.state_at(1, None)


def test_a_loader_may_hand_out_many_items_of_one_worker_before_the_others() -> None:
    """The reorder window counts items (here of 16 rounds each), not rounds: a loader that
    hands out worker 0's 10 items before worker 1's first (``in_order=False`` may) still
    yields the epoch, the same batches as taking the workers in turn."""
    store = Store([150, 150], SEED)
    spec = PipelineSpec.build(endpoint="http://127.0.0.1:9", batch_size=2, shuffle_buffer=0)
    setup = OrderSetup.build(store.refs, spec, seed=SEED, streams=2, rank=0, world=1,
                             epochs=EpochPlan(), where="test")

    def open_epoch(epoch: int, state: dict[str, Any] | None) -> Iterator[Any]:
        setup.epochs.publish(epoch, state)
        plan = setup.plan(epoch)
        group = rounds_per_item(plan, [0, 1], 2)
        assert group == 16
        return iter([pack for worker in range(2)
                     for pack in reader_rounds(plan, [worker], store.open, group=group)])

    run = ResumableLoader(DeterministicOrder(setup), open_epoch=open_epoch, report=spec.report)
    in_turn = keys(list(ordered(store, workers=2, batch=2, streams=2, buffer=0)))
    assert keys(list(run)) == in_turn and len(in_turn) == 150


def test_when_no_stream_count_fits_shards_and_ranks_the_default_is_what_batch_and_cap_share(
) -> None:
    """6 samples a step over 1 shard on 2 ranks: no divisor of 6 up to the shards is a
    multiple of 2, so ``streams=`` defaults to gcd(6, STREAMS_CAP) = 2 (one stream without a
    shard, warned of), which the ranks share."""
    spec = PipelineSpec.build(endpoint="http://127.0.0.1:9", batch_size=6)
    with pytest.warns(UserWarning, match="streams=2 over 1 shards"):
        setup = OrderSetup.build(STORE.refs[:1], spec, seed=0, streams=None, rank=0, world=2,
                                 epochs=EpochPlan(), where="f")
    assert setup.streams == 2


def test_one_stream_reads_every_shard_in_batches_of_the_global_size() -> None:
    got = keys(list(ordered(STORE, streams=1, workers=1)))
    assert sorted(k for batch in got for k in batch) == sorted(
        key for index in range(len(SIZES)) for key in STORE.samples(index))
    assert {len(batch) for batch in got[:-1]} == {8}
