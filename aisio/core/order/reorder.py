"""The training side of the deterministic order: chunks back in order, and the state.

:class:`Reorderer` runs in each rank's training process. It takes the packs of chunks its
readers send (:func:`~aisio.core.order.reader.reader_rounds`), in whatever order the loader
interleaves its workers, and yields the rank's part of each round: the chunks of its streams in
stream order. Before it yields a sample it records that sample's trace in a
:class:`StreamShadow` of its stream (positions only, no payloads), so that
:meth:`Reorderer.state_dict` says exactly what the training loop received: per stream, the
samples delivered and read, the shard and byte to read next, the samples its buffer held, and
the content ids of the shards a resume reads again.

The reorder window: a chunk of a later round waits until its round is complete. A loader that
hands out its workers' items round robin (torch's DataLoader, DataLoader2) keeps that to one
group of rounds of the rank (:func:`~aisio.core.order.reader.rounds_per_item`); in general
it is what the loader has in flight. More than ``window`` rounds waiting is refused as a
loader bug.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from typing import Any

from aisio.core.order.reader import Chunk, Trace
from aisio.core.order.streams import Input, OrderPlan, check_order_state, entry_versions

GAP = 256 * 1024
"""Buffered samples of one shard less than this many bytes apart are saved as one span (read
again with one request on resume, the bytes between them read and dropped)."""

Held = tuple[int, int, int, int, int, int]
"""A buffered sample in a shadow: ``(shard, ordinal, read_from, read_ordinal, end, n)`` --
a reader reaches it by parsing from byte ``read_from`` (where sample ``read_ordinal`` starts);
``end`` is where it ends (``read_from`` when unknown)."""


class StreamShadow:
    """What one stream's reader had read, and its buffer held, when the loop received its
    latest sample: positions only, kept from the chunks' traces.

    The reader's trace says which samples entered its buffer and which one left; the shadow
    keeps the set of those held (entered, not yet left), so it needs neither the buffer's
    order nor its draws: a resumed reader puts the same set back into a buffer of the same
    seed, which then yields what the uninterrupted one would have.

    Args:
        plan: the epoch's plan.
        stream: the stream's number.
        entry: the stream's entry of a saved state (None: the epoch's start).
    """

    def __init__(self, plan: OrderPlan, stream: int, entry: Any = None) -> None:
        self.stream = stream
        self.order = plan.stream_shards(stream)
        self.place_of = {index: place for place, index in enumerate(self.order)}
        #: the samples held that this reader read (n -> their Input)
        self.held: dict[int, Input] = {}
        #: the samples held since a saved state (n -> Held): read again on resume
        self.restored: dict[int, Held] = {}
        #: the content id of each shard the stream opened, as its reader saw it
        self.versions: dict[int, str] = {}
        #: no shuffle buffer: a chunk's trace is its samples' positions (see :meth:`passed`)
        self.passthrough = not plan.buffer
        self.done = entry == "done"
        self.n_out = self.n_in = self.place = self.offset = self.ordinal = 0
        if entry is not None and not self.done:
            n_out, n_in, place, offset, ordinal, spans = entry[:6]
            self.versions = entry_versions(entry)
            self.n_out, self.n_in, self.place = int(n_out), int(n_in), int(place)
            self.offset, self.ordinal = int(offset), int(ordinal)
            for span in spans:
                index, n_base, start, at = (int(x) for x in span[:4])
                first = at
                for step in span[4:]:
                    at += int(step)
                    self.restored[n_base + at] = (index, at, start, first, start, n_base + at)

    def deliver(self, trace: Trace) -> None:
        """Records one delivered sample: the inputs that entered the buffer, then its leaving.

        Raises:
            AssertionError: the trace disagrees with what was held (a bug, never silent).
        """
        sample, inputs = trace
        if inputs:
            self._read(inputs)
            held = self.held
            for position in inputs:
                held[position[5]] = position
        left: Any = self.held.pop(sample[5], None)
        if left is None:
            left = self.restored.pop(sample[5], None)
        if left is None or left[0] != sample[0] or left[1] != sample[1]:
            raise AssertionError(f"stream {self.stream}: the reader sent {sample[:2]}, which "
                                 "its buffer did not hold")
        self.n_out += 1

    def passed(self, positions: Sequence[Input]) -> None:
        """Records delivered samples of a stream without a buffer: each left as it entered,
        so only the last one moves the stream's place (the first must be the one due).

        Raises:
            AssertionError: the positions do not continue the stream (a bug, never silent).
        """
        if positions:
            self._read(positions)
            self.n_out += len(positions)

    def _read(self, inputs: Sequence[Input]) -> None:
        """Moves the stream's read position past ``inputs``, the next samples its reader read.

        Raises:
            AssertionError: they do not continue the stream.
        """
        first, last = inputs[0][5], inputs[-1][5]
        if first != self.n_in or last != first + len(inputs) - 1:
            raise AssertionError(f"stream {self.stream}: inputs {first}..{last} arrived, "
                                 f"{self.n_in}.. was due")
        index, ordinal, _, end, final, _ = inputs[-1]
        self.n_in = last + 1
        if final:
            self.place, self.offset, self.ordinal = self.place_of[index] + 1, 0, 0
        else:
            self.place, self.offset, self.ordinal = self.place_of[index], end, ordinal + 1

    def record(self, trace: Sequence[Any]) -> None:
        """Records a chunk's delivered samples (:meth:`passed` or :meth:`deliver` each)."""
        if self.passthrough:
            self.passed(trace)
            return
        for one in trace:
            self.deliver(one)

    def entry(self, gap: int = GAP) -> Any:
        """Returns the stream's entry of the state: ``"done"``, or ``[n_out, n_in, place,
        offset, ordinal, spans, versions]`` (see :func:`~aisio.core.order.reader.refill` for
        spans; ``versions``: the content ids of the shards a resume reads again, where
        known)."""
        if self.done:
            return "done"
        spans: list[list[int]] = []
        held = sorted([*self.restored.values(),
                       *((i, o, start, o, end, n) for i, o, start, end, _, n
                         in self.held.values())])
        last_shard = last_end = at = -1
        for index, ordinal, read_from, read_ordinal, end, n in held:
            if index != last_shard or read_from - last_end > gap:
                spans.append([index, n - ordinal, read_from, read_ordinal])
                at = read_ordinal
            spans[-1].append(ordinal - at)
            at = ordinal
            last_shard, last_end = index, max(end, read_from)
        again = {span[0] for span in spans}
        if self.place < len(self.order) and (self.offset or self.ordinal):
            again.add(self.order[self.place])  # the shard in progress
        versions = {str(shard): self.versions[shard] for shard in sorted(again)
                    if shard in self.versions}
        return [self.n_out, self.n_in, self.place, self.offset, self.ordinal, spans, versions]


class Reorderer:
    """One rank's training-side loop of the deterministic order (see the module doc).

    Args:
        plan: the epoch's plan.
        rank: this rank.
        world: the number of ranks (it must divide the number of streams).
        state: a saved state of this epoch, merged over every rank (None: the epoch's start).
        window: the most rounds that may wait for an earlier one to complete.
        gap: buffered samples of a shard closer than this are saved as one span (:data:`GAP`).

    Raises:
        StateMismatchError: ``state`` is not a complete state of this plan.
    """

    def __init__(self, plan: OrderPlan, rank: int = 0, world: int = 1, *,
                 state: dict[str, Any] | None = None, window: int = 64, gap: int = GAP
                 ) -> None:
        self.plan = plan
        self.streams = plan.rank_streams(rank, world)
        if state is not None:
            check_order_state(state, plan)
        entries = (state or {}).get("state", {})
        self.shadows = {s: StreamShadow(plan, s, entries.get(str(s))) for s in self.streams}
        self.window = window
        self.gap = gap
        #: the round of the latest item yielded
        self.round = -1

    def state_dict(self) -> dict[str, Any]:
        """Returns what this rank's training loop received, as a small JSON-able dict (its
        streams only: merge every rank's with
        :func:`~aisio.core.order.streams.merge_order_states`)."""
        return {**self.plan.header(),
                "state": {str(s): self.shadows[s].entry(self.gap) for s in self.streams}}

    def _rounds(self, packs: Iterable[Sequence[Chunk]]) -> Iterator[tuple[int, list[Chunk]]]:
        """Yields ``(round, chunks)``: each round's chunks of this rank, in stream order."""
        q = self.plan.per_round
        due = {s: sh.n_out // q for s, sh in self.shadows.items() if not sh.done}
        waiting: dict[tuple[int, int], Chunk] = {}
        source = iter(packs)
        while due:
            now = min(due.values())
            need = [s for s in self.streams if due.get(s) == now]
            while any((s, now) not in waiting for s in need):
                pack = next(source, None)
                if pack is None:
                    missing = [s for s in need if (s, now) not in waiting]
                    raise AssertionError(f"the readers ended before stream(s) {missing} sent "
                                         f"round {now}")
                for chunk in pack:
                    if chunk.stream not in due or chunk.round < due[chunk.stream]:
                        raise AssertionError(f"{chunk!r} is not due on this rank")
                    waiting[(chunk.stream, chunk.round)] = chunk
                if len(waiting) > self.window * len(self.streams):
                    raise AssertionError(
                        f"more than {self.window} rounds wait for round {now}: the loader "
                        "does not hand out its workers' items in turn")
            chunks = [waiting.pop((s, now)) for s in need]
            for chunk in chunks:
                due[chunk.stream] = now + 1
                if chunk.done:
                    del due[chunk.stream]
            yield now, chunks

    def _mark(self, chunk: Chunk) -> None:
        if chunk.done:
            self.shadows[chunk.stream].done = True

    def _opened(self, chunk: Chunk) -> StreamShadow:
        """Returns the chunk's stream's shadow, with the content ids the chunk brings."""
        shadow = self.shadows[chunk.stream]
        if chunk.versions:
            shadow.versions.update(chunk.versions)
        return shadow

    def rounds(self, packs: Iterable[Sequence[Chunk]]
               ) -> Iterator[tuple[list[Any], Callable[[], None]]]:
        """Yields this rank's part of each round (a list of samples, empty when the round has
        nothing for this rank) with the function that records it as received: call each in
        turn, when the training loop has the round (a trainer may fetch ahead)."""
        for now, chunks in self._rounds(packs):
            values = [value for chunk in chunks for value in chunk.values]
            yield values, partial(self._receive, now, chunks, bool(values))

    def _receive(self, now: int, chunks: list[Chunk], any_values: bool) -> None:
        for chunk in chunks:
            self._opened(chunk).record(chunk.trace)
            self._mark(chunk)
        if any_values:
            self.round = now

    def batches(self, packs: Iterable[Sequence[Chunk]]) -> Iterator[list[Any]]:
        """Yields this rank's part of each round (a list of samples; rounds with nothing for
        this rank are left out), recorded as received as it is yielded."""
        for values, receive in self.rounds(packs):
            receive()
            if values:
                yield values

    def samples(self, packs: Iterable[Sequence[Chunk]]) -> Iterator[Any]:
        """Yields this rank's samples one by one, in the order of :meth:`batches`, each
        recorded as received as it is yielded (a checkpoint may fall inside a round)."""
        for now, chunks in self._rounds(packs):
            for chunk in chunks:
                shadow = self._opened(chunk)
                for k, (value, trace) in enumerate(zip(chunk.values, chunk.trace, strict=True)):
                    shadow.record([trace])
                    if k == len(chunk.values) - 1:
                        self._mark(chunk)
                    self.round = now
                    yield value
                if not chunk.values:
                    self._mark(chunk)


__all__ = ["GAP", "Held", "Reorderer", "StreamShadow"]
