"""The reader side of the deterministic order: one canonical stream, shards to chunks.

A :class:`StreamReader` reads its stream's shards (:meth:`OrderPlan.stream_shards`) as tar
streams with :func:`~aisio.core.pipeline.parse.task_samples`, pushes every sample through the
stream's
:class:`~aisio.core.order.streams.DelayBuffer` and cuts what leaves into :class:`Chunk` s of
``q = G / K`` samples, one per round. Each chunk carries, for each of its samples, the positions
of the samples that entered the buffer before it left (without a buffer: the sample's own), and
the content ids of the shards the stream opened: from them the training process knows, without
the payloads, what the buffer held when the loop received a sample, and which content a
resume must find.

Resumed from a stream's saved entry, the reader first reads the samples its buffer held again,
one ``Range`` request per span (:func:`refill`), then continues its shard from the saved byte;
the last span of that shard (usually the newest samples, just before the saved byte) is read by
that same request, which then starts at the span; every shard read again must still have the
content id the state names.
:func:`reader_rounds` is what one worker (or the training process, without workers) runs over
its streams: their chunks, as one :class:`RoundChunks` per group of rounds
(:func:`rounds_per_item`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.reduction import ForkingPickler
from typing import IO, Any

from aisio.core.epochs.progress import ShardTask
from aisio.core.faults.errors import AISIOError, ObjectChangedError
from aisio.core.faults.policy import ErrorPolicy
from aisio.core.order.streams import DelayBuffer, Input, OrderPlan, entry_versions
from aisio.core.pipeline.parse import drain, task_samples
from aisio.core.store.client import content_id
from aisio.core.store.sources import ObjectRef
from aisio.core.transport import ring
from aisio.core.transport.delivery import POSITION, VERSION

Opener = Callable[..., IO[bytes]]
"""``open(ref, start=..., expect=...)`` -> a stream over the object from byte ``start``, e.g.
:meth:`aisio.core.pipeline.fetch.Fetcher.open` (``expect``: the content id the object had when it
was
read before; another content raises :class:`~aisio.core.faults.errors.ObjectChangedError`)."""

Trace = tuple[Input, list[Input]]
"""One output's ``(position, inputs that entered the buffer before it left)`` (a stream without
a buffer sends only the position: each sample enters and leaves at once)."""


class Chunk:
    """What one stream adds to one round: its samples, their trace, whether it ended, and the
    content ids of the shards the stream opened since its previous chunk."""

    __slots__ = ("done", "round", "stream", "trace", "values", "versions")

    def __init__(self, stream: int, round: int, values: list[Any], trace: list[Any],
                 done: bool, versions: dict[int, str] | None = None) -> None:
        self.stream = stream
        self.round = round
        self.values = values
        #: per sample, its :data:`Trace`; without a shuffle buffer (each sample leaves as it
        #: enters), only its position
        self.trace = trace
        self.done = done
        self.versions = versions

    def __reduce__(self) -> tuple[Any, ...]:
        return (Chunk, (self.stream, self.round, self.values, self.trace, self.done,
                        self.versions))

    def __repr__(self) -> str:
        return (f"Chunk(stream {self.stream}, round {self.round}, {len(self.values)} "
                f"sample(s){', done' if self.done else ''})")


class RoundChunks(list):
    """What a reader sends at once: its chunks of a group of consecutive rounds
    (:func:`reader_rounds`), in round then stream order.

    Sent to another process through a ``multiprocessing`` queue, the chunks' samples cross
    through shared memory (:mod:`aisio.core.transport.ring`) when their payload is worth it, and
    are copied out as it is unpickled; the rest (rounds, traces) is pickled."""

    __slots__ = ()


def _to_another_process(pack: RoundChunks) -> tuple[Any, ...]:
    # one flat list of like samples: the transport sizes it from its first sample
    shipped = ring.export([value for chunk in pack for value in chunk.values])
    if shipped is None:
        return (RoundChunks, ([_by_value(chunk) for chunk in pack],))
    bare = [Chunk(chunk.stream, chunk.round, [], chunk.trace, chunk.done, chunk.versions)
            for chunk in pack]
    return (_arrived, (bare, [len(chunk.values) for chunk in pack], shipped))


def _by_value(chunk: Chunk) -> Chunk:
    return Chunk(chunk.stream, chunk.round, ring.by_value(chunk.values), chunk.trace,
                 chunk.done, chunk.versions)


def _arrived(chunks: list[Chunk], counts: list[int], shipped: ring.Shipped) -> RoundChunks:
    values, at = shipped.open(), 0
    for chunk, count in zip(chunks, counts, strict=True):
        chunk.values, at = values[at:at + count], at + count
    return RoundChunks(chunks)


def register_reducer() -> None:
    """Makes ``multiprocessing``'s pickler send :class:`RoundChunks` through shared memory in
    this process from now on (idempotent; see
    :func:`aisio.core.transport.delivery.register_reducer`)."""
    ForkingPickler.register(RoundChunks, _to_another_process)


ITEM_SAMPLES = 64
"""A reader groups rounds so that each item it sends holds about this many samples (each item
costs the worker protocol a fixed time, whatever its size: benchmarks/README.md, Figures behind the
code's comments)."""

MAX_GROUP = 16
"""The most rounds in one item (a training process waits for every reader's part of a round,
so this bounds the rounds it holds)."""


def rounds_per_item(plan: OrderPlan, streams: Sequence[int], workers: int) -> int:
    """Returns how many consecutive rounds each reader of a rank sends as one item: the same
    on all of them (a loader takes its workers' items in turn, so they keep pace), enough for
    about :data:`ITEM_SAMPLES` samples from the streams that have shards at all.

    Args:
        plan: the epoch's plan.
        streams: the rank's streams.
        workers: how many readers share them.
    """
    active = sum(1 for stream in streams if stream < len(plan.shards))
    per_reader = math.ceil(active / max(workers, 1))
    if not per_reader:
        return 1
    return max(1, min(MAX_GROUP, math.ceil(ITEM_SAMPLES / (plan.per_round * per_reader))))


def reorder_window(plan: OrderPlan, streams: Sequence[int], items: int = 64) -> int:
    """Returns how many rounds a rank's training process lets wait for an earlier one:
    ``items`` items of the largest group a reader of ``streams`` may send (a loader that hands
    out its workers' items out of order, ``in_order=False``, has that many in flight)."""
    return items * rounds_per_item(plan, streams, workers=len(streams))


def refill(buffer: DelayBuffer[Any], spans: Sequence[Sequence[int]],
           shards: Sequence[ObjectRef], open: Opener,
           versions: dict[int, str] | None = None) -> None:
    """Reads the samples that ``spans`` name again and holds them in ``buffer``.

    A span ``[shard, n_base, start, start_ordinal, step, step, ...]`` is read with one request
    from byte ``start`` (where sample ``start_ordinal`` of the shard begins); the buffered
    samples are the ordinals ``start_ordinal + step1``, ``+ step1 + step2``, ...; sample ``o``
    is number ``n_base + o`` of the stream. Reading stops after the last of them.

    ``versions``: the shards' content ids when they were read (each is read only if its content
    is still that).

    Raises:
        ObjectChangedError: the shard's content changed, or it no longer holds a sample the
            span names.
    """
    for span in spans:
        index, n_base, start, ordinal = (int(x) for x in span[:4])
        ref = shards[index]
        url = ref.uri()
        left = _wanted(span)
        stream = open(ref, start=start, expect=(versions or {}).get(index))
        samples = task_samples(ShardTask(index, ref, start, ordinal), stream)  # closed below
        try:
            begin = start
            for sample in samples:
                _, at, end, _ = sample.pop(POSITION)
                sample.pop(VERSION, None)
                if at in left:
                    left.discard(at)
                    position: Input = (index, at, begin, end, False, n_base + at)
                    buffer.hold(n_base + at, (position, sample))
                    if not left:
                        break
                begin = end
        finally:
            samples.close()  # type: ignore[attr-defined]
            stream.close()
        if left:
            raise _changed(url, min(left), start)


def _wanted(span: Sequence[int]) -> set[int]:
    """Returns the ordinals a span names."""
    at, wanted = int(span[3]), set()
    for step in span[4:]:
        at += int(step)
        wanted.add(at)
    return wanted


def _changed(url: str, ordinal: int, start: int) -> ObjectChangedError:
    return ObjectChangedError(
        f"shard {url} has no sample {ordinal} past byte {start} any more: it changed since "
        "the checkpoint; resume only over unchanged shards", url=url)


class StreamReader:
    """Reads one canonical stream of an epoch: samples in, shuffled samples out, as chunks.

    Args:
        plan: the epoch's :class:`OrderPlan`.
        stream: the stream's number.
        open: opens an object from a byte (:meth:`aisio.core.pipeline.fetch.Fetcher.open`).
        entry: the stream's entry of a saved state (None: from the epoch's start).
        policy: what to do with a bad shard (None: raise).
        stage: applied to each sample as it leaves the buffer (decode, tuple).
    """

    def __init__(self, plan: OrderPlan, stream: int, open: Opener, *, entry: Any = None,
                 policy: ErrorPolicy | None = None, stage: Callable[[Any], Any] | None = None
                 ) -> None:
        self.plan = plan
        self.stream = stream
        self.order = plan.stream_shards(stream)
        self.open = open
        self.policy = policy
        self.stage = stage
        self.buffer: DelayBuffer[Any] = plan.buffer_of(stream)
        self.done = entry == "done"
        self.n_out = self.n_in = self.place = self.offset = self.ordinal = 0
        self._spans: list[Any] = []
        #: the content ids the saved state names (shard -> id): a resumed read expects them
        self.expected: dict[int, str] = {}
        self._opened: dict[int, str] = {}  # content ids not yet sent with a chunk
        if entry is not None and not self.done:
            n_out, n_in, place, offset, ordinal, spans = entry[:6]
            self.n_out, self.n_in, self.place = int(n_out), int(n_in), int(place)
            self.offset, self.ordinal = int(offset), int(ordinal)
            self._spans = list(spans)
            self.expected = entry_versions(entry)

    def _inputs(self, joined: Sequence[int] | None
                ) -> Iterator[tuple[Input, dict[str, Any]]]:
        """Yields ``(position, sample)`` for each sample of the stream's shards, from the
        saved shard and byte on. ``joined``, a span of the shard in progress, is read by the
        same request: the request starts at the span, and the span's samples are held in the
        buffer on the way to the saved byte."""
        shards = self.plan.shards
        for place in range(self.place, len(self.order)):
            index = self.order[place]
            start, first = (self.offset, self.ordinal) if place == self.place else (0, 0)
            wanted, n_base = set(), 0
            if joined is not None and place == self.place:
                start, first, wanted, n_base = int(joined[2]), int(joined[3]), _wanted(joined), (
                    int(joined[1]))
            task = ShardTask(index, shards[index], start, first)
            yielded = 0
            try:
                stream = self.open(task.ref, start=start, expect=self.expected.get(index))
            except ObjectChangedError:
                raise
            except AISIOError as exc:
                self._handle(exc, task.uri(), 0)
                continue
            version = content_id(stream)
            if version is not None:
                self._opened[index] = version
            before = self.ordinal if joined is not None and place == self.place else 0
            try:
                begin, n = start, self.n_in
                for sample in task_samples(task, stream):
                    _, ordinal, end, last = sample.pop(POSITION)
                    sample.pop(VERSION, None)  # (taken once per shard, from the stream)
                    if ordinal < before:  # a joined span's sample, before the saved byte
                        if ordinal in wanted:
                            wanted.discard(ordinal)
                            held: Input = (index, ordinal, begin, end, False, n_base + ordinal)
                            self.buffer.hold(n_base + ordinal, (held, sample))
                        begin = end
                        continue
                    if wanted:
                        raise _changed(task.uri(), min(wanted), start)
                    self.n_in = n + 1
                    yield (index, ordinal, begin, end, last, n), sample
                    n += 1
                    begin = end
                    yielded += 1
                if wanted:
                    raise _changed(task.uri(), min(wanted), start)
                drain(stream)  # the end-of-archive padding: a ShardCache keeps whole shards
            except ObjectChangedError:
                raise
            except AISIOError as exc:
                self._handle(exc, task.uri(), yielded)
            finally:
                stream.close()

    def _handle(self, exc: AISIOError, url: str, samples: int) -> None:
        if self.policy is None:
            raise exc
        self.policy.handle(exc, url, samples=samples)

    def outputs(self) -> Iterator[tuple[Input, Any, Sequence[Input]]]:
        """Yields ``(position, sample, inputs)`` for each sample as it leaves the buffer, with
        the positions of the samples that entered it since the previous one left (none listed
        without a buffer: each sample leaves as it enters, and its chunk's trace is its
        position)."""
        if self.done:
            return
        spans, self._spans = self._spans, []
        joined = None
        if self.place < len(self.order):  # the shard in progress: its last span rides along
            mine = [span for span in spans if int(span[0]) == self.order[self.place]]
            if mine:
                joined = max(mine, key=lambda span: int(span[2]))
                spans = [span for span in spans if span is not joined]
        refill(self.buffer, spans, self.plan.shards, self.open, self.expected)
        if not self.buffer.size:  # no shuffle: each sample leaves as it enters
            for position, sample in self._inputs(joined):
                yield position, sample, ()
            return
        log: list[Input] = []
        push = self.buffer.push
        for position, sample in self._inputs(joined):
            log.append(position)
            out = push(position[5], (position, sample))
            if out is not None:
                yield out[0], out[1], log
                log = []
        while len(self.buffer):
            out = self.buffer.pop()
            yield out[0], out[1], log
            log = []

    def chunks(self) -> Iterator[Chunk]:
        """Yields the stream's chunks: round ``n_out // q`` on, the last one marked done."""
        if self.done:
            return
        q, stage, buffered = self.plan.per_round, self.stage, bool(self.buffer.size)
        outputs = self.outputs()
        ahead = next(outputs, None)
        while True:
            n_out = self.n_out
            round_, values, trace = n_out // q, [], []
            for _ in range(q - n_out % q):
                if ahead is None:
                    break
                position, sample, log = ahead
                values.append(stage(sample) if stage is not None else sample)
                trace.append((position, log) if buffered else position)
                ahead = next(outputs, None)  # one ahead: to know whether this chunk is the last
            self.n_out = n_out + len(values)
            done = ahead is None
            opened, self._opened = self._opened or None, {}
            yield Chunk(self.stream, round_, values, trace, done, opened)
            if done:
                self.done = True
                return


def reader_rounds(plan: OrderPlan, streams: Sequence[int], open: Opener, *,
                  state: dict[str, Any] | None = None, policy: ErrorPolicy | None = None,
                  stage: Callable[[Any], Any] | None = None, group: int = 1
                  ) -> Iterator[RoundChunks]:
    """Yields the chunks of ``streams``, one :class:`RoundChunks` per ``group`` rounds: rounds
    ``[g * group, (g + 1) * group)`` (what one worker sends as one item; every reader of a rank
    groups alike, so that a loader handing out its workers' items in turn keeps them in step).

    Args:
        plan: the epoch's plan.
        streams: this reader's streams (:meth:`OrderPlan.reader_streams`).
        open: opens an object from a byte.
        state: a saved (merged) state of this epoch, checked by the caller.
        policy: what to do with a bad shard (None: raise).
        stage: applied to each sample as it leaves its buffer.
        group: rounds per pack (:func:`rounds_per_item`).
    """
    entries = (state or {}).get("state", {})
    readers = [StreamReader(plan, s, open, entry=entries.get(str(s)), policy=policy,
                            stage=stage) for s in streams]
    live = {r.stream: (r, r.chunks()) for r in readers if not r.done}
    due = {r.stream: r.n_out // plan.per_round for r, _ in live.values()}
    pack = RoundChunks()
    while live:
        now = min(due.values())
        for stream in [s for s in streams if s in live and due[s] == now]:
            chunk = next(live[stream][1])
            pack.append(chunk)
            due[stream] = now + 1
            if chunk.done:
                del live[stream], due[stream]
        if not live or (now + 1) % group == 0:
            yield pack
            pack = RoundChunks()


__all__ = ["ITEM_SAMPLES", "MAX_GROUP", "Chunk", "Opener", "RoundChunks", "StreamReader",
           "Trace", "reader_rounds", "refill", "register_reducer", "reorder_window",
           "rounds_per_item"]
