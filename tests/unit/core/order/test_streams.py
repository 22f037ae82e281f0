"""Tests for the deterministic order's core: aisio.core.order.streams, reader and reorder
(the loader over them: test_loader.py).

Shards are real tar archives held in memory; ``open(ref, start=...)`` slices them (as a
``Range`` request would) and records every open. A topology is simulated in one process by
running the code paths the real loaders run: per rank, one :class:`Reorderer` fed by the
rounds of ``W`` readers (:func:`reader_rounds`, one per worker, or one for ``W`` = 0) that the
"loader" interleaves round robin (as torch's DataLoader does) or in a shuffled order that keeps
each worker's own order. Ranks step in lockstep; a kill after step ``k`` merges the ranks'
states (through JSON) and resumes on another topology.

The reference is a model written from the definition alone (tests/order_model.py: no aisio
code), so a buffer that does not shuffle as defined, or a wrong deal of shards to streams, fails.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aisio.core.faults.errors import ObjectChangedError, StateMismatchError, UsageError
from aisio.core.order.reader import reader_rounds, reorder_window, rounds_per_item
from aisio.core.order.reorder import Reorderer
from aisio.core.order.streams import (
    OrderPlan,
    check_order_state,
    merge_order_states,
)
from aisio.core.store.memory import MemoryStore
from aisio.core.store.sources import ObjectRef
from aisio.core.store.urls import parse_ais_url
from tests import order_model
from tests.conftest import tar_bytes

SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


class Store:
    """Shards in memory: ``open(ref, start=...)`` as :meth:`Fetcher.open`, recorded."""

    def __init__(self, sizes: Sequence[int], seed: int = 0, name: str = "train") -> None:
        rng = random.Random(seed)
        self.refs = [ObjectRef(parse_ais_url(f"ais://b/{name}-{i:04d}.tar"))
                     for i in range(len(sizes))]
        self.data: dict[str, bytes] = {}
        for i, (ref, size) in enumerate(zip(self.refs, sizes, strict=True)):
            members = []
            for k in range(size):
                members.append((f"s{i}/k{k:03d}.bin", rng.randbytes(rng.randrange(1, 1500))))
                members.append((f"s{i}/k{k:03d}.cls", str(k).encode()))
            self.data[ref.uri()] = tar_bytes(members)
        self.opens: list[tuple[str, int]] = []

    def open(self, ref: ObjectRef, *, start: int = 0, expect: str | None = None) -> io.BytesIO:
        """As :meth:`Fetcher.open`: the stream names its content (``version``) and refuses
        another content than ``expect``."""
        self.opens.append((ref.uri(), start))
        data = self.data[ref.uri()]
        version = hashlib.blake2b(data, digest_size=8).hexdigest()
        if expect is not None and expect != version:
            raise ObjectChangedError(f"{ref.uri()} changed: {version}, not {expect}",
                                     url=ref.uri())
        stream = io.BytesIO(data[start:])
        stream.version = version  # type: ignore[attr-defined]
        return stream

    def memory(self) -> MemoryStore:
        """Returns a MemoryStore of the same shards (for a loader's ``store=``)."""
        memory = MemoryStore()
        for name, data in self.data.items():
            memory.put(name, data)
        return memory

    def samples(self, index: int) -> list[str]:
        return [f"s{index}/k{k:03d}" for k in range(self.data[self.refs[index].uri()].count(
            b".cls"))]


def model(store: Store, plan: OrderPlan) -> list[tuple[int, str]]:
    """The reference global sequence (``(round, key)`` pairs), from tests/order_model.py."""
    return order_model.sequence([store.samples(i) for i in range(len(store.refs))],
                                seed=plan.seed, epoch=plan.epoch, streams=plan.streams,
                                batch=plan.batch, buffer=plan.buffer,
                                shuffle_shards=plan.shuffle_shards)


def interleave(readers: list[Iterator[Any]], rng: random.Random | None) -> Iterator[Any]:
    """A loader's merge of its workers' items: round robin (rng None), else a random choice
    of worker each time (each worker's own order kept)."""
    live = list(readers)
    turn = 0
    while live:
        k = turn % len(live) if rng is None else rng.randrange(len(live))
        item = next(live[k], None)
        if item is None:
            del live[k]
            continue
        turn = k + 1
        yield item


def topology(store: Store, plan: OrderPlan, ranks: int, workers: int,
             state: dict[str, Any] | None, *, per_sample: bool = False,
             rng: random.Random | None = None) -> list[tuple[Reorderer, Iterator[Any]]]:
    """Returns, per rank, its Reorderer and the iterator its training loop reads."""
    out = []
    for rank in range(ranks):
        reorderer = Reorderer(plan, rank, ranks, state=state)
        group = rounds_per_item(plan, plan.rank_streams(rank, ranks), workers)
        readers = [reader_rounds(plan, plan.reader_streams(rank, ranks, w, workers), store.open,
                                 state=state, group=group) for w in range(max(workers, 1))]
        packs = interleave(readers, rng)
        items = reorderer.samples(packs) if per_sample else reorderer.batches(packs)
        out.append((reorderer, items))
    return out


def run(ranks: list[tuple[Reorderer, Iterator[Any]]], steps: int | None,
        per_sample: bool = False) -> list[tuple[int, int, str]]:
    """Steps every rank in lockstep (``steps`` times, or to the end); returns what the loops
    received as ``(round, rank, key)``."""
    got = []
    step = 0
    while steps is None or step < steps:
        alive = False
        for rank, (reorderer, items) in enumerate(ranks):
            item = next(items, None)
            if item is None:
                continue
            alive = True
            for sample in [item] if per_sample else item:
                got.append((reorderer.round, rank, sample["__key__"]))
        if not alive:
            break
        step += 1
    return got


def in_global_order(received: list[tuple[int, int, str]]) -> list[tuple[int, str]]:
    """Per-rank sequences merged round by round in rank order."""
    return [(t, key) for t, _, key in sorted(received, key=lambda x: (x[0], x[1]))]


def merged_state(ranks: list[tuple[Reorderer, Iterator[Any]]]) -> dict[str, Any]:
    states = [json.loads(json.dumps(r.state_dict())) for r, _ in ranks]
    return merge_order_states(states)


plans = st.fixed_dictionaries({
    "sizes": st.lists(st.integers(0, 9), min_size=1, max_size=7),
    "seed": st.integers(0, 2**32),
    "buffer": st.integers(0, 7),
    "streams": st.sampled_from([1, 2, 4]),
    "q": st.integers(1, 3),
})
topologies = st.tuples(st.sampled_from([1, 2]), st.integers(0, 3))


def make(p: dict[str, Any]) -> tuple[Store, OrderPlan]:
    store = Store(p["sizes"], p["seed"])
    plan = OrderPlan(store.refs, seed=p["seed"], epoch=1, streams=p["streams"],
                     batch=p["streams"] * p["q"], buffer=p["buffer"])
    return store, plan


def fit(ranks: int, plan: OrderPlan) -> int:
    return ranks if plan.streams % ranks == 0 else 1


@SETTINGS
@given(plans, topologies, topologies, st.booleans(), st.booleans(),
       st.randoms(use_true_random=False), st.data())
def test_resumed_sequence_is_the_uninterrupted_one(p: dict[str, Any], before: tuple[int, int],
                                                   after: tuple[int, int], per_sample: bool,
                                                   shuffled: bool, rng: random.Random,
                                                   data: st.DataObject) -> None:
    store, plan = make(p)
    expected = model(store, plan)
    r1, r2 = fit(before[0], plan), fit(after[0], plan)
    # the same with any topology, uninterrupted
    received = run(topology(store, plan, r1, before[1], None, per_sample=per_sample), None,
                   per_sample)
    assert in_global_order(received) == expected
    kill = data.draw(kill_steps(steps_of(received, per_sample)), label="kill")
    # killed after `kill` steps of every rank, resumed on another topology
    first = topology(store, plan, r1, before[1], None, per_sample=per_sample,
                     rng=rng if shuffled else None)
    got = run(first, kill, per_sample)
    state = merged_state(first)
    check_order_state(state, plan)
    store.opens.clear()
    second = topology(store, plan, r2, after[1], state, per_sample=per_sample,
                      rng=rng if shuffled else None)
    rest = run(second, None, per_sample)
    delivered = {key for _, _, key in got}
    assert len(delivered) == len(got)
    if not per_sample:  # ranks stop at round boundaries: the resumed run is the suffix
        assert in_global_order(got) + in_global_order(rest) == expected
    # in general: what was not received, in the uninterrupted order
    assert [x for x in expected if x[1] not in delivered] == in_global_order(rest)
    # a resume never reads a shard from byte 0 unless what it needs starts there
    for name, start in store.opens:
        if start == 0:
            assert _needs_zero(state, plan, store, name)


def steps_of(received: list[tuple[int, int, str]], per_sample: bool) -> int:
    """How many steps the run that received ``received`` took (its longest rank's)."""
    if per_sample:
        return max(Counter(rank for _, rank, _ in received).values(), default=0)
    return len({t for t, _, _ in received})


def kill_steps(steps: int) -> st.SearchStrategy[int]:
    """A kill step of an epoch of ``steps``: mid-epoch (``1 .. steps - 1``) 9 times in 10, else
    before the first step or after the last."""
    if steps < 2:
        return st.integers(0, steps)
    return st.sampled_from(range(10)).flatmap(  # (Hypothesis favours the first: mid-epoch)
        lambda x: st.integers(1, steps - 1) if x < 9 else st.sampled_from([0, steps]))


def _needs_zero(state: dict[str, Any], plan: OrderPlan, store: Store, name: str) -> bool:
    index = [r.uri() for r in store.refs].index(name)
    for s, entry in state["state"].items():
        if entry == "done":
            continue
        _, _, place, offset, _, spans = entry[:6]
        order = plan.stream_shards(int(s))
        if index in order and (order.index(index) > place
                               or (order.index(index) == place and offset == 0)):
            return True  # a shard the stream had not started
        if any(span[0] == index and span[2] == 0 for span in spans):
            return True  # a buffered sample at the shard's start
    return False


@SETTINGS
@given(plans, topologies, topologies)
def test_every_topology_gives_the_same_sequence(p: dict[str, Any], a: tuple[int, int],
                                                b: tuple[int, int]) -> None:
    store, plan = make(p)
    one = in_global_order(run(topology(store, plan, fit(a[0], plan), a[1], None), None))
    two = in_global_order(run(topology(store, plan, fit(b[0], plan), b[1], None), None))
    assert one == two == model(store, plan)
    keys = sorted(k for _, k in one)
    assert keys == sorted(k for i in range(len(store.refs)) for k in store.samples(i))


def test_per_rank_batches_are_slices_of_the_global_batch() -> None:
    store = Store([5, 7, 3, 9, 4, 6, 8, 2], seed=3)
    plan = OrderPlan(store.refs, seed=3, epoch=0, streams=4, batch=8, buffer=4)
    ranks = topology(store, plan, 2, 2, None)
    r0 = list(ranks[0][1])
    r1 = list(ranks[1][1])
    full = [b0 + b1 for b0, b1 in zip(r0, r1, strict=False) if len(b0) == len(b1) == 4]
    assert full and all(len(b) == 8 for b in full)
    seq = [k for _, k in model(store, plan)]
    assert [s["__key__"] for s in full[0]] == seq[:8]


def test_every_reader_of_a_rank_sends_the_same_groups_of_rounds() -> None:
    """A pack holds rounds ``[g * group, (g + 1) * group)`` on every reader, from the start
    and after a resume, so that a loader taking its workers' items in turn keeps them in
    step; the group is sized by the streams that have shards (5 of 8 here)."""
    store = Store([40] * 5, seed=4)
    plan = OrderPlan(store.refs, seed=4, epoch=0, streams=8, batch=16, buffer=3)
    group = rounds_per_item(plan, plan.rank_streams(0, 1), 2)
    assert group == 11  # ceil(64 samples / (2 per round x 3 streams on the busier reader))
    assert rounds_per_item(plan, plan.rank_streams(0, 1), 0) == 7
    assert rounds_per_item(plan, [5, 6, 7], 1) == 1  # streams without shards
    first = topology(store, plan, 1, 2, None)
    run(first, 13)
    state = merged_state(first)
    for start in (None, state):
        for w in range(2):
            streams = plan.reader_streams(0, 1, w, 2)
            packs = list(reader_rounds(plan, streams, store.open, state=start, group=group))
            assert len(packs) == (2 if start is None else 1)  # rounds 0-10, 11-19; 13-19
            for pack in packs:
                rounds = {chunk.round for chunk in pack}
                assert len({r // group for r in rounds}) == 1, rounds
                assert sorted(rounds) == list(range(min(rounds), max(rounds) + 1))


def test_items_handed_out_of_order_are_put_back_within_the_window() -> None:
    """A loader with ``in_order=False`` (16 items in flight here, each finished in reverse)
    hands out groups of rounds far apart: the training side's window counts items of the
    largest group, so they wait and come out in order."""
    store = Store([150] * 7, seed=8)
    plan = OrderPlan(store.refs, seed=8, epoch=0, streams=8, batch=8, buffer=0)
    streams = plan.rank_streams(0, 1)
    packs = list(reader_rounds(plan, streams, store.open,
                               group=rounds_per_item(plan, streams, 1)))
    late = [pack for i in range(0, len(packs), 16) for pack in reversed(packs[i:i + 16])]
    expected = [key for _, key in model(store, plan)]
    with pytest.raises(AssertionError, match="rounds wait"):  # a window of 64 rounds
        list(Reorderer(plan).batches(late))
    window = reorder_window(plan, streams)
    assert [s["__key__"] for b in Reorderer(plan, window=window).batches(late) for s in b] == (
        expected)


def test_resume_refills_with_ranges_at_recorded_offsets() -> None:
    store = Store([30, 30, 30, 30], seed=5)
    plan = OrderPlan(store.refs, seed=5, epoch=0, streams=2, batch=4, buffer=16)
    first = topology(store, plan, 1, 2, None)
    run(first, 5)
    state = merged_state(first)
    store.opens.clear()
    spans = [(s, span) for s, e in state["state"].items() if e != "done" for span in e[5]]
    assert sum(len(span) - 4 for _, span in spans) == 2 * 16  # both buffers full
    second = topology(store, plan, 1, 1, state)
    next(second[0][1])
    starts = {(store.refs[span[0]].uri(), span[2]) for _, span in spans}
    cursors = {(store.refs[plan.stream_shards(int(s))[e[2]]].uri(), e[3])
               for s, e in state["state"].items() if e != "done"}
    later = {(store.refs[index].uri(), 0)  # shards not begun at the checkpoint (read ahead)
             for s, e in state["state"].items() if e != "done"
             for index in plan.stream_shards(int(s))[e[2] + 1:]}
    assert set(store.opens) <= starts | cursors | later
    assert starts <= set(store.opens)
    assert all(start > 0 for _, start in cursors)


def test_one_span_per_sample_still_resumes() -> None:
    store = Store([40, 40, 40], seed=9)
    plan = OrderPlan(store.refs, seed=9, epoch=2, streams=1, batch=2, buffer=12)
    expected = model(store, plan)
    reorderer = Reorderer(plan, state=None, gap=-1)
    items = reorderer.batches(reader_rounds(plan, [0], store.open))
    got = [(reorderer.round, s["__key__"]) for _ in range(20) for s in next(items)]
    state = json.loads(json.dumps(reorderer.state_dict()))
    assert len(state["state"]["0"][5]) > 1  # several spans
    again = Reorderer(plan, state=state, gap=-1)
    rest = [(again.round, s["__key__"])
            for b in again.batches(reader_rounds(plan, [0], store.open, state=state))
            for s in b]
    assert got + rest == expected


def test_a_trace_the_shadow_cannot_account_for_is_a_loud_bug() -> None:
    """The shadow keeps what the buffer held from the traces; a sample that was never held,
    or inputs that skip a number, raise rather than save a state that would resume wrong."""
    from aisio.core.order.reorder import StreamShadow

    store = Store([6, 6], seed=2)
    plan = OrderPlan(store.refs, seed=2, epoch=0, streams=1, batch=2, buffer=2)
    shard = plan.stream_shards(0)[0]
    first, second = ((shard, k, 10 * k, 10 * k + 10, False, k) for k in range(2))
    shadow = StreamShadow(plan, 0)
    shadow.deliver((first, [first]))
    with pytest.raises(AssertionError, match="did not hold"):
        shadow.deliver((first, []))  # left twice
    with pytest.raises(AssertionError, match=r"inputs 3\.\.3 arrived, 1\.\. was due"):
        shadow.deliver((second, [(shard, 3, 30, 40, False, 3)]))
    shadow.deliver((second, [second]))
    assert shadow.entry()[:5] == [2, 2, 0, 20, 2]
    # without a buffer a chunk's trace is its positions: they must continue the stream
    plain = OrderPlan(store.refs, seed=2, epoch=0, streams=1, batch=2, buffer=0)
    shadow = StreamShadow(plain, 0)
    shadow.record([first, second])
    assert shadow.entry()[:5] == [2, 2, 0, 20, 2]
    with pytest.raises(AssertionError, match=r"inputs 3\.\.3 arrived, 2\.\. was due"):
        shadow.record([(shard, 3, 30, 40, False, 3)])


def test_state_round_trip_and_size_bound() -> None:
    store = Store([50] * 6, seed=1)
    plan = OrderPlan(store.refs, seed=1, epoch=0, streams=2, batch=4, buffer=20)
    ranks = topology(store, plan, 1, 0, None)
    run(ranks, 30)
    state = ranks[0][0].state_dict()
    assert json.loads(json.dumps(state)) == state
    again = Reorderer(plan, state=json.loads(json.dumps(state)))
    assert again.state_dict() == state
    size = len(json.dumps(state, separators=(",", ":")))
    assert size < 300 + plan.streams * (60 + plan.buffer * 8)


def _state(streams: int, buffer: int = 1000, shards: int = 10_000) -> dict[str, Any]:
    """The state of ``streams`` streams with ``buffer``-sample buffers over ``shards`` shards,
    each stream having read 2.35 shards of 2,000 samples of ~100 KiB (as
    benchmarks/bench_order.py measures it for docs/design/order.md)."""
    from aisio.core.order.reorder import StreamShadow

    refs = [ObjectRef(parse_ais_url(f"ais://b/t-{i:05d}.tar")) for i in range(shards)]
    plan = OrderPlan(refs, seed=0, epoch=0, streams=streams, batch=streams * 8, buffer=buffer)
    state = {**plan.header(), "state": {}}
    size = 102_912
    for s in range(plan.streams):
        shadow = StreamShadow(plan, s)
        reader = plan.buffer_of(s)  # the reader's buffer, positions only
        order = plan.stream_shards(s)
        log, n = [], 0
        for place in range(3):
            for o in range(2000 if place < 2 else 700):
                position = (order[place], o, o * size, (o + 1) * size, o == 1999, n)
                n += 1
                log.append(position)
                out = reader.push(position[5], position)
                if out is not None:
                    shadow.deliver((out, log))
                    log = []
        state["state"][str(s)] = shadow.entry()
    check_order_state(state, plan)
    if streams == 8:
        assert Reorderer(plan, state=json.loads(json.dumps(state))).state_dict() == state
    return state


def _size(state: dict[str, Any]) -> int:
    return len(json.dumps(state, separators=(",", ":")))


def test_state_size_is_the_documented_one_and_grows_with_k_times_b_not_shards() -> None:
    """10,000 shards, 1,000-sample buffers: the sizes docs/design/order.md gives for K = 1, 8
    and 64 (to the digits it gives); about the same bytes per buffered sample for any K and B;
    and 100 times fewer shards change only the digits of the shard numbers."""
    from pathlib import Path

    page = (Path(__file__).parents[4] / "docs" / "design" / "order.md").read_text()
    figures = re.search(r"take ([\d.]+) KB for K = 1, ([\d.]+) KB for K = 8, ([\d.]+) KB "
                        r"for K = 64", " ".join(page.split()))
    assert figures, "docs/design/order.md no longer gives the state's size"
    per_sample = {}
    for k, figure in zip((1, 8, 64), figures.groups(), strict=True):
        state = _state(k)
        size = _size(state)
        print(f"\nstate for 10,000 shards, K = {k} x 1,000-sample buffers: {size:,} bytes")
        decimals = len(figure.partition(".")[2])
        assert round(size / 1000, decimals) == float(figure), (k, size, figure)
        per_sample[k, 1000] = (size - _size({**state, "state": {}})) / (k * 1000)
    small = _state(8, buffer=100)
    per_sample[8, 100] = (_size(small) - _size({**small, "state": {}})) / (8 * 100)
    assert all(3 < b < 4 for b in per_sample.values()), per_sample  # grows with K x B
    few = _size(_state(8, shards=100))
    assert few < _size(_state(8)) < 1.05 * few  # 100 x the shards: 2 more digits in spans


def test_mismatched_states_are_refused() -> None:
    store = Store([4, 4, 4, 4], seed=2)
    plan = OrderPlan(store.refs, seed=2, epoch=0, streams=2, batch=4, buffer=3)
    ranks = topology(store, plan, 2, 1, None)
    run(ranks, 1)
    parts = [r.state_dict() for r, _ in ranks]
    state = merge_order_states(parts)
    check_order_state(state, plan)
    for change, word in [({"streams": 4}, "streams"), ({"batch": 8}, "batch"),
                         ({"seed": 3}, "seed"), ({"buffer": 5}, "shuffle_buffer"),
                         ({"shard_list": "0" * 16}, "same shards"),
                         ({"epoch": 1}, "epoch")]:
        with pytest.raises(StateMismatchError, match=word):
            check_order_state({**state, **change}, plan)
    other = OrderPlan(Store([4, 4, 4, 4], name="val").refs, seed=2, epoch=0, streams=2,
                      batch=4, buffer=3)
    with pytest.raises(StateMismatchError, match="same shards"):
        Reorderer(other, state=state)
    with pytest.raises(StateMismatchError, match="lacks stream"):
        check_order_state(parts[0], plan)
    with pytest.raises(StateMismatchError, match="both hold"):
        merge_order_states([parts[0], parts[0]])
    with pytest.raises(StateMismatchError, match="different runs"):
        merge_order_states([parts[0], {**parts[1], "seed": 9}])
    with pytest.raises(StateMismatchError, match="not an aisio deterministic"):
        check_order_state({"version": 1}, plan)
    with pytest.raises(StateMismatchError, match="corrupt"):
        check_order_state({**state, "state": {"0": [1, 2]}}, plan)


def test_bad_plans_are_refused() -> None:
    refs = Store([1, 1]).refs
    with pytest.raises(UsageError, match="multiple of the number of canonical streams"):
        OrderPlan(refs, seed=0, epoch=0, streams=3, batch=4)
    with pytest.raises(UsageError, match="cannot share 4 canonical streams"):
        OrderPlan(refs, seed=0, epoch=0, streams=4, batch=4).rank_streams(0, 3)


def test_a_changed_shard_is_refused_on_refill() -> None:
    store = Store([20, 20], seed=4)
    plan = OrderPlan(store.refs, seed=4, epoch=0, streams=1, batch=2, buffer=8)
    ranks = topology(store, plan, 1, 0, None)
    run(ranks, 3)
    state = merged_state(ranks)
    for name in store.data:  # every shard cut short
        store.data[name] = tar_bytes([("s0/k000.bin", b"x")])
    with pytest.raises(ObjectChangedError, match="changed: "):  # its content id, on open
        run(topology(store, plan, 1, 0, state), None)
    for entry in state["state"].values():  # a state that names no content (none was known)
        entry[6] = {}
    with pytest.raises(ObjectChangedError, match="changed since the checkpoint"):
        run(topology(store, plan, 1, 0, state), None)


def test_a_shard_rewritten_alike_is_refused_by_its_content_id() -> None:
    """The same members at the same offsets, other bytes: only the content id tells; the
    state names the content of the shards a resume reads again (in progress, or buffered)."""
    store = Store([20, 20, 20], seed=6)
    plan = OrderPlan(store.refs, seed=6, epoch=0, streams=1, batch=2, buffer=4)
    ranks = topology(store, plan, 1, 0, None)
    run(ranks, 4)
    state = merged_state(ranks)
    entry = state["state"]["0"]
    again = {span[0] for span in entry[5]} | {plan.stream_shards(0)[entry[2]]}
    assert sorted(int(k) for k in entry[6]) == sorted(again)
    name = store.refs[plan.stream_shards(0)[entry[2]]].uri()
    store.data[name] = store.data[name].replace(b"s", b"t", 1)  # one byte of its first header
    with pytest.raises(ObjectChangedError, match=name.replace(".", r"\.")):
        run(topology(store, plan, 1, 0, state), None)


def test_the_order_core_imports_no_loader_framework() -> None:
    import subprocess
    import sys

    code = ("import sys, aisio.core.order.reorder, aisio.core.order.reader; print(sorted(m for m "
            "in sys.modules if m == 'torch' or m.startswith(('torch.', 'torchdata'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("kill", [1, 3, 6, 9])
def test_a_skipped_bad_shard_is_skipped_alike_after_a_resume(kill: int) -> None:
    from aisio.core.faults.policy import ErrorPolicy

    store = Store([6, 5, 7, 4], seed=8)
    bad = store.refs[1].uri()
    store.data[bad] = store.data[bad][:1536 + 700]  # cut inside its second sample
    plan = OrderPlan(store.refs, seed=8, epoch=0, streams=2, batch=2, buffer=3)

    def loop(state: dict[str, Any] | None) -> tuple[Reorderer, Iterator[list[Any]]]:
        reorderer = Reorderer(plan, state=state)
        policy = ErrorPolicy("skip")
        return reorderer, reorderer.batches(reader_rounds(plan, [0, 1], store.open,
                                                          state=state, policy=policy))

    whole = [s["__key__"] for b in loop(None)[1] for s in b]
    reorderer, batches = loop(None)
    got = [s["__key__"] for _ in range(kill) for s in next(batches)]
    state = json.loads(json.dumps(reorderer.state_dict()))
    rest = [s["__key__"] for b in loop(state)[1] for s in b]
    assert got + rest == whole
    assert len(set(whole)) == len(whole) < 6 + 5 + 7 + 4  # shard 1's tail skipped, once


@SETTINGS
@given(st.integers(1, 300), st.integers(0, 2**64 - 1), st.integers(0, 2**32))
def test_the_delay_buffer_is_counter_based_and_bounded(size: int, key: int, seed: int) -> None:
    from aisio.core.order.streams import DelayBuffer

    numbers = list(range(4 * size + 2500))
    ahead: DelayBuffer[int] = DelayBuffer(size, key)
    delays = [ahead.delay(n) for n in numbers]
    shuffled = numbers[:]
    random.Random(seed).shuffle(shuffled)
    other: DelayBuffer[int] = DelayBuffer(size, key)
    assert {n: other.delay(n) for n in shuffled} == dict(enumerate(delays))  # any order
    assert delays == order_model.key_delays(key, size, len(numbers))  # the defined draw
    buf: DelayBuffer[int] = DelayBuffer(size, key)
    left = []
    for m in numbers:  # a sample leaves at most 2 x size pushes after it entered
        out = buf.push(m, m)
        assert out is None or m - out <= 2 * size
        if out is not None:
            left.append(out)
    left += [buf.pop() for _ in range(len(buf))]
    assert left == order_model.through_buffer(numbers, delays, size)  # the defined order


def test_the_reference_model_shuffles_within_each_stream() -> None:
    """The model the order is checked against is no FIFO: with a buffer of 8 most samples
    leave out of place, none more than 2 x 8 places late."""
    samples = [f"k{n:03d}" for n in range(300)]
    out = order_model.through_buffer(samples, order_model.delays(3, 0, 1, 8, 300), 8)
    assert sorted(out) == samples
    moved = [abs(out.index(key) - n) for n, key in enumerate(samples)]
    assert sum(1 for m in moved if m) > 150 and max(moved) <= 16


def test_a_state_to_merge_without_streams_is_refused_as_such() -> None:
    """A dict of the same header but no ``"state"`` (another loader's, or a header copied
    alone) is refused as a state mismatch, not a ``KeyError``."""
    store = Store([3, 3])
    plan = OrderPlan(store.refs, seed=1, epoch=0, streams=2, batch=2, buffer=0)
    state = Reorderer(plan, 0, 2).state_dict()
    header = {k: v for k, v in state.items() if k != "state"}
    with pytest.raises(StateMismatchError, match="not a deterministic-order state"):
        merge_order_states([state, header])


def test_exactly_a_window_of_rounds_may_wait_and_one_more_is_refused() -> None:
    """``window`` is the most rounds that may wait for an earlier one: the first five rounds
    arriving last, round 0 after the four others, fill a window of 5 exactly (and come out in
    order); a window of 4 refuses them."""
    store = Store([150] * 8, seed=8)
    plan = OrderPlan(store.refs, seed=8, epoch=0, streams=8, batch=8, buffer=0)
    streams = plan.rank_streams(0, 1)
    packs = list(reader_rounds(plan, streams, store.open, group=1))
    assert all(len(pack) == len(streams) for pack in packs[:5])  # a chunk per stream a round
    late = [*reversed(packs[:5]), *packs[5:]]
    expected = [key for _, key in model(store, plan)]
    assert [s["__key__"] for b in Reorderer(plan, window=5).batches(late) for s in b] == expected
    with pytest.raises(AssertionError, match="more than 4 rounds wait for round 0"):
        list(Reorderer(plan, window=4).batches(late))


def test_a_state_check_names_what_it_got_and_takes_entries_without_content_ids() -> None:
    """What is not a dict is refused by name (no AttributeError from the check itself); a
    state saved before content ids were kept (entries of 6 fields, not 7) is still taken."""
    store = Store([4, 4, 4, 4], seed=2)
    plan = OrderPlan(store.refs, seed=2, epoch=0, streams=2, batch=4, buffer=3)
    ranks = topology(store, plan, 2, 1, None)
    run(ranks, 1)
    state = merge_order_states([r.state_dict() for r, _ in ranks])
    for wrong, name in [([1, 2], "list"), (None, "NoneType")]:
        with pytest.raises(StateMismatchError, match=f"got {name}; pass what the loader's"):
            check_order_state(wrong, plan)
    entries = state["state"]
    assert any(value != "done" and len(value) == 7 for value in entries.values())
    older = {stream: value if value == "done" else value[:6] for stream, value in entries.items()}
    check_order_state({**state, "state": older}, plan)


def test_a_leaving_sample_of_the_right_number_but_another_place_is_a_loud_bug() -> None:
    """The shadow checks a leaving sample's shard and its ordinal, each: a reader that sent
    sample 0's number with another shard, or with another ordinal, raises as one that sent
    a number never held does."""
    from aisio.core.order.reorder import StreamShadow

    store = Store([6, 6], seed=2)
    plan = OrderPlan(store.refs, seed=2, epoch=0, streams=1, batch=2, buffer=2)
    shard, other = plan.stream_shards(0)[:2]
    first = (shard, 0, 0, 10, False, 0)
    for wrong in [(other, 0, 0, 10, False, 0), (shard, 1, 0, 10, False, 0)]:
        shadow = StreamShadow(plan, 0)
        with pytest.raises(AssertionError, match="which its buffer did not hold"):
            shadow.deliver((wrong, [first]))
