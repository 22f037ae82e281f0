"""Tests for aisio.core.order.reader's own parts; its readers over real shards are tested in
tests/unit/core/order/test_streams.py and test_loader.py.

A reader's pack of chunks crosses to the training process with its samples in shared memory
(tests/integration/core/transport/ for the real crossing): here, within one process, what
multiprocessing's pickler sends and what the receiver rebuilds from it.
"""

from __future__ import annotations

import io
import json
import pickle
from typing import Any

import pytest

from aisio.core.faults.errors import ObjectChangedError, ObjectNotFoundError, ShardFormatError
from aisio.core.faults.policy import ErrorPolicy
from aisio.core.faults.report import ErrorReport
from aisio.core.order.reader import (
    Chunk,
    RoundChunks,
    StreamReader,
    _to_another_process,
    reader_rounds,
    refill,
)
from aisio.core.order.reorder import Reorderer
from aisio.core.order.streams import DelayBuffer, OrderPlan
from aisio.core.store.sources import ObjectRef
from tests.unit.core.order.test_streams import Store

pytestmark = pytest.mark.usefixtures("own_ring")


def crossed(pack: RoundChunks, *, shared: bool) -> Any:
    """Returns ``pack`` as the receiving process rebuilds it, and checks that its samples went
    by shared memory or not."""
    rebuild, args = _to_another_process(pack)  # what ForkingPickler sends for a RoundChunks
    assert (rebuild is not RoundChunks) == shared
    if rebuild is RoundChunks:
        return rebuild(*pickle.loads(pickle.dumps(args)))
    bare, counts, shipped = args
    arrive, shipped_args = shipped.__reduce__()  # as unpickling in the receiver does
    return rebuild(pickle.loads(pickle.dumps(bare)), counts, arrive(*shipped_args))


def fields(pack: Any) -> list[tuple[Any, ...]]:
    return [(c.stream, c.round, c.values, c.trace, c.done, c.versions) for c in pack]


def test_a_pack_crosses_with_each_chunk_keeping_its_own_samples_and_trace() -> None:
    def sample(stream: int, k: int) -> dict[str, Any]:
        return {"__key__": f"s{stream}-{k}", "jpg": bytes([stream, k]) * 8192}  # 16 KiB

    pack = RoundChunks([
        Chunk(0, 4, [sample(0, 0), sample(0, 1)], [(0, 0, 10, False), (0, 10, 20, False)],
              False),
        Chunk(1, 4, [], [], True, {3: "v3"}),  # a stream that ended with nothing this round
        Chunk(2, 4, [sample(2, k) for k in range(3)], [(5, k, k + 1, k == 2) for k in range(3)],
              False, {5: "v5"}),
        Chunk(0, 5, [sample(0, 2)], [(0, 20, 30, True)], True),
    ])
    expected = fields(pack)
    back = crossed(pack, shared=True)
    assert type(back) is RoundChunks
    assert fields(back) == expected


def test_a_small_pack_is_pickled_as_it_is() -> None:
    pack = RoundChunks([Chunk(0, 0, [{"__key__": "a", "cls": b"1"}], [(0, 0, 1, False)], True)])
    expected = fields(pack)
    back = crossed(pack, shared=False)
    assert type(back) is RoundChunks and fields(back) == expected


def test_a_skipped_shard_is_reported_with_the_samples_it_delivered() -> None:
    """on_error="skip": a shard that cannot be opened (none of its samples delivered) and one
    torn mid-way are each recorded under their URL with the count of their samples that were
    delivered before the fault."""
    store = Store([5, 6, 4, 7], seed=2)
    missing, torn = store.refs[1].uri(), store.refs[3].uri()
    store.data[torn] = store.data[torn][:len(store.data[torn]) // 2 + 100]

    def opener(ref: ObjectRef, **kw: Any) -> Any:
        if ref.uri() == missing:
            raise ObjectNotFoundError("gone")  # (an error that does not name the object)
        return store.open(ref, **kw)

    policy = ErrorPolicy("skip", ErrorReport())
    plan = OrderPlan(store.refs, seed=5, epoch=0, streams=2, batch=4, buffer=2)
    delivered = [value["__key__"] for pack in reader_rounds(plan, [0, 1], opener, policy=policy)
                 for chunk in pack for value in chunk.values]
    recorded = {r["shard"]: r["samples"] for r in policy.report.records()}
    assert recorded == {missing: 0, torn: sum(key.startswith("s3/") for key in delivered)}
    assert 0 < recorded[torn] < 7


def test_each_position_names_the_samples_shard_and_its_ordinal_in_that_shard() -> None:
    """A stream of three shards, no buffer: every sample's position is ``(shard, ordinal in
    the shard, ...)`` (the keys of Store say which: ``s<shard>/k<ordinal>``), from 0 in each
    shard, as a resume reads them."""
    store = Store([4, 3, 5], seed=1)
    plan = OrderPlan(store.refs, seed=1, epoch=0, streams=1, batch=2, buffer=0)
    positions = [(position[:2], sample["__key__"])
                 for position, sample, _ in StreamReader(plan, 0, store.open).outputs()]
    assert len(positions) == 12
    assert all(key == f"s{shard}/k{ordinal:03d}" for (shard, ordinal), key in positions)


def test_a_stream_without_a_buffer_resumes_mid_shard_from_its_saved_byte() -> None:
    """No buffer, so no span to read again: a resume opens the shard in progress at the saved
    byte and ordinal, and the batches after the state are the uninterrupted run's (from the
    shard's start, the first 10 samples would come twice)."""
    store = Store([12, 12, 12], seed=3)
    plan = OrderPlan(store.refs, seed=3, epoch=0, streams=1, batch=2, buffer=0)

    def keys(batches: Any) -> list[str]:
        return [sample["__key__"] for batch in batches for sample in batch]

    whole = keys(Reorderer(plan).batches(reader_rounds(plan, [0], store.open)))
    reorderer = Reorderer(plan)
    items = reorderer.batches(reader_rounds(plan, [0], store.open))
    first = keys(next(items) for _ in range(5))  # 10 samples: inside the first shard
    state = json.loads(json.dumps(reorderer.state_dict()))
    rest = keys(Reorderer(plan, state=state).batches(
        reader_rounds(plan, [0], store.open, state=state)))
    assert first + rest == whole and len(whole) == 36


def test_a_shard_read_again_for_its_buffered_samples_must_have_its_saved_content() -> None:
    """At step 5 the stream reads its second shard while its buffer still holds samples of
    the first; a resume reads those again from a byte past the first header, so a rewrite
    of that header is seen only by the content id the state saved."""
    store = Store([12, 12, 12], seed=3)
    plan = OrderPlan(store.refs, seed=3, epoch=0, streams=1, batch=2, buffer=8)
    reorderer = Reorderer(plan)
    items = reorderer.batches(reader_rounds(plan, [0], store.open))
    for _ in range(5):
        next(items)
    state = json.loads(json.dumps(reorderer.state_dict()))
    entry = state["state"]["0"]
    buffered = {span[0] for span in entry[5]} - {plan.stream_shards(0)[entry[2]]}
    assert len(buffered) == 1 and all(span[2] > 0 for span in entry[5] if span[0] in buffered)
    name = store.refs[buffered.pop()].uri()
    store.data[name] = store.data[name].replace(b"s", b"t", 1)  # one byte of its first header
    with pytest.raises(ObjectChangedError, match=name.replace(".", r"\.")):
        list(reader_rounds(plan, [0], store.open, state=state))


def test_a_span_read_again_from_a_changed_shard_names_the_shard_and_byte() -> None:
    """A span of sample 4's byte on, wanting sample 6: over a shard that now ends there, the
    error names the shard and the byte; over one torn inside a member, the tar error names
    the shard (as every error of a read does)."""
    store = Store([12], seed=3)
    url = store.refs[0].uri()
    data = store.data[url]
    start = data.index(b"s0/k004.bin")  # where sample 4 begins: its first header (a name)
    span = [0, 0, start, 4, 2]
    buffer: DelayBuffer[Any] = DelayBuffer(8, 0)
    refill(buffer, [span], store.refs, store.open)
    assert [item[0][:2] for _, item in buffer._heap] == [(0, 6)]
    store.data[url] = data[:start] + bytes(1024)  # ends (end-of-archive blocks) at the byte
    with pytest.raises(ObjectChangedError, match=f"no sample 6 past byte {start} ") as changed:
        refill(DelayBuffer(8, 0), [span], store.refs, store.open)
    assert changed.value.url == url
    store.data[url] = data[:start + 700]  # torn inside sample 4's first member
    with pytest.raises(ShardFormatError, match="truncated") as torn:
        refill(DelayBuffer(8, 0), [span], store.refs, store.open)
    assert torn.value.url == url


def test_a_small_pack_pickled_as_it_is_keeps_the_content_ids_its_chunks_bring() -> None:
    """A pack too small for shared memory still carries the content ids of the shards its
    streams opened: what a resume compares before it reads them again."""
    pack = RoundChunks([Chunk(0, 0, [{"__key__": "a", "cls": b"1"}], [(3, 0, 1, False)], False,
                              {3: "v3"}),
                        Chunk(1, 0, [], [], True, {4: "v4"})])
    expected = fields(pack)
    back = crossed(pack, shared=False)
    assert fields(back) == expected and [c.versions for c in back] == [{3: "v3"}, {4: "v4"}]


@pytest.mark.parametrize("buffer", [0, 3])
@pytest.mark.parametrize("streams", [1, 2])
def test_a_run_resumed_twice_is_the_uninterrupted_one(buffer: int, streams: int) -> None:
    """A state saved after a resume resumes too: a stream resumed mid-shard, and the samples
    its buffer held read again, name their bytes from the shard's start (not from the byte the
    resumed request began at)."""
    from tests.unit.core.order.test_streams import (
        in_global_order,
        make,
        merged_state,
        model,
        run,
        topology,
    )

    store, plan = make({"sizes": [12, 10, 11, 13], "seed": 3, "buffer": buffer,
                        "streams": streams, "q": 2})
    got: list[tuple[int, int, str]] = []
    state = None
    for steps in (2, 1, 1, None):  # saved twice inside the first shards
        ranks = topology(store, plan, 1, 0, state)
        got += run(ranks, steps)
        state = merged_state(ranks)
    assert in_global_order(got) == model(store, plan)


def test_shards_whose_store_names_no_content_id_are_read_all_the_same() -> None:
    store = Store([3, 2], seed=1)

    def open_(ref: ObjectRef, *, start: int = 0, expect: str | None = None) -> Any:
        return io.BytesIO(store.data[ref.uri()][start:])  # no content id

    plan = OrderPlan(store.refs, seed=1, epoch=0, streams=1, batch=1, buffer=0)
    keys = [sample["__key__"] for pack in reader_rounds(plan, [0], open_)
            for chunk in pack for sample in chunk.values]
    assert sorted(keys) == sorted(store.samples(0) + store.samples(1))


def test_a_resumed_shard_that_now_ends_before_its_buffered_samples_names_itself() -> None:
    """The shard in progress is read again from its last span (sample 4's byte on, wanting
    sample 6); now ending at that byte, the error names the shard and the byte."""
    store = Store([12], seed=3)
    plan = OrderPlan(store.refs, seed=3, epoch=0, streams=1, batch=2, buffer=8)
    url = store.refs[0].uri()
    data = store.data[url]
    start, saved = data.index(b"s0/k004.bin"), data.index(b"s0/k008.bin")
    entry = [2, 8, 0, saved, 8, [[0, 0, start, 4, 2]], {}]
    store.data[url] = data[:start] + bytes(1024)
    reader = StreamReader(plan, 0, store.open, entry=entry)
    with pytest.raises(ObjectChangedError, match=f"no sample 6 past byte {start} ") as changed:
        list(reader.outputs())
    assert changed.value.url == url


def test_a_reader_resumed_inside_a_round_still_sends_one_pack_per_group_of_rounds() -> None:
    """A checkpoint taken sample by sample may fall inside a round (3 samples of rounds of 2):
    resumed there, the reader still sends its rounds a group at a time, as its rank's other
    readers do, not the rest of the epoch as one item."""
    store = Store([8, 8], seed=2)
    plan = OrderPlan(store.refs, seed=2, epoch=0, streams=2, batch=4, buffer=0)
    reorderer = Reorderer(plan)
    samples = reorderer.samples(reader_rounds(plan, [0, 1], store.open))
    for _ in range(3):
        next(samples)
    state = json.loads(json.dumps(reorderer.state_dict()))
    assert state["state"]["1"][0] % plan.per_round  # stream 1 stopped inside round 0
    packs = list(reader_rounds(plan, [0, 1], store.open, state=state, group=1))
    assert [sorted({chunk.round for chunk in pack}) for pack in packs] == [[r] for r in range(4)]


@pytest.mark.parametrize("content_ids", [True, False])
def test_samples_read_again_for_a_buffer_are_delivered_as_the_uninterrupted_run_has_them(
        content_ids: bool) -> None:
    """Resumed with its buffer holding samples of a shard before the one in progress (read
    again by a request of their own), the stream delivers, field for field, the samples of the
    uninterrupted run: the content id the parser tags each with taken out, whether or not the
    store names one."""
    store = Store([12, 12, 12], seed=3)

    def open_(ref: ObjectRef, *, start: int = 0, expect: str | None = None) -> Any:
        if content_ids:
            return store.open(ref, start=start, expect=expect)
        return io.BytesIO(store.data[ref.uri()][start:])

    plan = OrderPlan(store.refs, seed=3, epoch=0, streams=1, batch=2, buffer=8)
    whole = [sample for batch in Reorderer(plan).batches(reader_rounds(plan, [0], open_))
             for sample in batch]
    reorderer = Reorderer(plan)
    items = reorderer.batches(reader_rounds(plan, [0], open_))
    first = [sample for _ in range(5) for sample in next(items)]
    state = json.loads(json.dumps(reorderer.state_dict()))
    place, spans = state["state"]["0"][2], state["state"]["0"][5]
    assert any(span[0] != plan.stream_shards(0)[place] for span in spans)  # not the shard read on
    rest = [sample for batch in Reorderer(plan, state=state).batches(
        reader_rounds(plan, [0], open_, state=state)) for sample in batch]
    assert first + rest == whole and len(whole) == 36


def test_a_shard_that_fails_mid_read_with_an_error_naming_no_object_is_recorded_as_itself(
) -> None:
    """on_error="skip": a shard whose stream fails after half its bytes, with an error that
    names no object, is recorded under its own URL with the samples it delivered."""
    store = Store([6, 6], seed=2)
    torn = store.refs[1].uri()
    cut = len(store.data[torn]) // 2

    class Torn(io.BytesIO):
        def read(self, size: int | None = -1) -> bytes:
            if self.tell() >= cut:
                raise ObjectNotFoundError("gone")  # (an error that does not name the object)
            left = cut - self.tell()
            return super().read(left if size is None or size < 0 else min(size, left))

    def opener(ref: ObjectRef, *, start: int = 0, expect: str | None = None) -> Any:
        if ref.uri() == torn:
            return Torn(store.data[torn][start:])
        return store.open(ref, start=start, expect=expect)

    policy = ErrorPolicy("skip", ErrorReport())
    plan = OrderPlan(store.refs, seed=5, epoch=0, streams=2, batch=2, buffer=0)
    delivered = [value["__key__"] for pack in reader_rounds(plan, [0, 1], opener, policy=policy)
                 for chunk in pack for value in chunk.values]
    (record,) = policy.report.records()
    assert record["shard"] == torn
    assert record["samples"] == sum(key.startswith("s1/") for key in delivered) > 0
