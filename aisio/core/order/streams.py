"""The deterministic order: canonical streams, their seeded buffers, rounds, and the state.

The plan of ``order="deterministic"`` (see docs/design/order.md):

* :class:`OrderPlan` deals the epoch's shard order out to ``K`` canonical streams (stream ``s``
  reads ``order[s::K]``), cuts the global batch ``G`` into ``q = G / K`` samples per stream and
  round, and maps streams onto ranks (contiguous blocks, ``R | K``) and workers (round robin
  within the rank's block).
* :class:`DelayBuffer` is a stream's shuffle buffer: sample ``n`` of the stream is due at
  ``n + d(n)``, ``d(n)`` a seeded draw in ``[0, B)``; past ``B`` samples the first due leaves.
  Its order is a function of what it holds, so it is saved as the set of buffered positions,
  nothing else.
* :func:`check_order_state` and :func:`merge_order_states` own the state's format: JSON,
  versioned, one entry per stream, validated against the plan.

Framework-free: no torch data loading, no torchdata.
"""

from __future__ import annotations

import hashlib
import heapq
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Generic, TypeVar

from aisio.core.epochs.progress import epoch_seed, shard_list_id, shard_order
from aisio.core.faults.errors import StateMismatchError, UsageError
from aisio.core.store.sources import ObjectRef

ORDER_STATE_VERSION = 1
"""The version of the deterministic-order state's format."""

MASK64 = (1 << 64) - 1

Input = tuple[int, int, int, int, bool, int]
"""A sample's position in its stream: ``(shard, ordinal, start, end, last, n)`` -- the shard's
index in the loader's list, the sample's ordinal in the shard, the bytes ``[start, end)`` it
spans (``start`` is where the previous sample ended), whether it is the shard's last sample, and
``n``, its number in the stream (0, 1, ... over all the stream's shards)."""


def mix64(value: int) -> int:
    """Returns splitmix64's finaliser of ``value``: a counter-based hash, 64 bits."""
    z = (value + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def stream_key(seed: int, epoch: int, stream: int) -> int:
    """Returns the 64-bit key of one stream's buffer in one epoch."""
    digest = hashlib.blake2b(f"{epoch_seed(seed, epoch)}:{stream}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "little")


T = TypeVar("T")


class DelayBuffer(Generic[T]):
    """A stream's seeded shuffle buffer: each sample is delayed by a seeded amount.

    Sample ``n`` is due at ``n + d(n)``, ``d(n)`` in ``[0, size)`` drawn from a generator
    seeded with ``(key, n // 1024)`` (counter-based: any ``d(n)`` is found without the draws
    before it); :meth:`push` adds one and, when more than ``size`` would be held, returns the
    one due first (ties: the smaller ``n``), possibly the one just pushed. :meth:`pop` empties it
    in that order at the stream's end. With ``size`` 0 every sample passes straight through.
    Which samples it holds decides what it yields next: to restore it, add them again (in any
    order) with their numbers, through :meth:`hold`.

    Example:
        >>> buf = DelayBuffer(size=3, key=1)
        >>> [buf.push(n, n) for n in range(8)], [buf.pop() for _ in range(len(buf))]
        ([None, None, None, 0, 2, 1, 3, 5], [4, 6, 7])
    """

    __slots__ = ("_block", "_blocks", "_delays", "_heap", "key", "size")

    def __init__(self, size: int, key: int) -> None:
        if size < 0:
            raise UsageError(f"shuffle_buffer={size} must be >= 0 (0: no sample shuffle)")
        self.size = size
        self.key = key
        self._heap: list[tuple[int, T]] = []  # (due << 40 | n, item): one int to compare
        self._block = -1
        self._delays: list[int] = []
        self._blocks: dict[int, list[int]] = {}

    def delay(self, n: int) -> int:
        """Returns ``d(n)``: how many places sample ``n`` is delayed by (before overflow)."""
        if not self.size:
            return 0
        block = n >> 10
        if block != self._block:
            delays = self._blocks.get(block)
            if delays is None:
                rng = random.Random(mix64(self.key ^ block))
                bits, size = rng.getrandbits, self.size
                delays = [bits(32) * size >> 32 for _ in range(1024)]
                if len(self._blocks) >= 8:  # a restore holds samples of a few blocks at once
                    self._blocks.clear()
                self._blocks[block] = delays
            self._block, self._delays = block, delays
        return self._delays[n & 1023]

    def sort_key(self, n: int) -> int:
        """Returns sample ``n``'s sort key: when it is due, then ``n``, as one integer."""
        return (n + self.delay(n)) << 40 | n

    def hold(self, n: int, item: T) -> None:
        """Adds sample ``n`` without letting anything out (to restore a saved buffer)."""
        heapq.heappush(self._heap, (self.sort_key(n), item))

    def push(self, n: int, item: T) -> T | None:
        """Adds sample ``n``; returns the sample that leaves, if the buffer overflowed."""
        if not self.size:
            return item
        if n >> 10 != self._block:
            self.delay(n)
        entry = ((n + self._delays[n & 1023]) << 40 | n, item)
        if len(self._heap) < self.size:
            heapq.heappush(self._heap, entry)
            return None
        return heapq.heappushpop(self._heap, entry)[1]

    def pop(self) -> T:
        """Returns the held sample with the smallest key (at the stream's end)."""
        return heapq.heappop(self._heap)[1]

    def items(self) -> Iterator[T]:
        """Yields the held samples (in no particular order)."""
        return (entry[1] for entry in self._heap)

    def __len__(self) -> int:
        return len(self._heap)


@dataclass(frozen=True)
class OrderPlan:
    """Who reads what, in which order, in one epoch of the deterministic order.

    Args:
        shards: the loader's shard list.
        seed: the run's seed.
        epoch: the epoch.
        streams: ``K``, the number of canonical streams.
        batch: ``G``, the global batch size; ``K`` must divide it.
        buffer: ``B``, each stream's shuffle buffer (0: none).
        shuffle_shards: shuffle the shard order by ``(seed, epoch)``.

    Raises:
        UsageError: ``K`` is not positive or does not divide ``G``, or ``B`` is negative.
    """

    shards: Sequence[ObjectRef]
    seed: int
    epoch: int
    streams: int
    batch: int
    buffer: int = 0
    shuffle_shards: bool = True

    def __post_init__(self) -> None:
        if self.streams < 1:
            raise UsageError(f"streams={self.streams} must be at least 1")
        if self.batch < 1 or self.batch % self.streams:
            raise UsageError(
                f"the global batch size {self.batch} must be a positive multiple of the "
                f"number of canonical streams {self.streams}; pick streams that divide it")
        if self.buffer < 0:
            raise UsageError(f"shuffle_buffer={self.buffer} must be >= 0 (0: no sample shuffle)")

    @property
    def per_round(self) -> int:
        """``q``: how many samples each stream adds to each round (global batch)."""
        return self.batch // self.streams

    @cached_property
    def shard_order(self) -> list[int]:
        """The epoch's shard order, dealt to the streams (computed once: a restore asks for
        every stream's, and reshuffling 10,000 shards per stream cost seconds at K = 64)."""
        return shard_order(len(self.shards), self.seed, self.epoch, shuffle=self.shuffle_shards)

    def stream_shards(self, stream: int) -> list[int]:
        """Returns the shard indices stream ``stream`` reads, in order."""
        return self.shard_order[stream::self.streams]

    def buffer_of(self, stream: int) -> DelayBuffer[Any]:
        """Returns a new, empty buffer for stream ``stream``."""
        return DelayBuffer(self.buffer, stream_key(self.seed, self.epoch, stream))

    def rank_streams(self, rank: int, world: int) -> list[int]:
        """Returns the streams rank ``rank`` of ``world`` owns: a contiguous block.

        Raises:
            UsageError: ``world`` does not divide the number of streams.
        """
        if world < 1 or self.streams % world:
            raise UsageError(
                f"{world} rank(s) cannot share {self.streams} canonical streams evenly; use a "
                "number of streams that the world size divides (the order depends on it, not "
                "on the world size)")
        size = self.streams // world
        return list(range(rank * size, (rank + 1) * size))

    def reader_streams(self, rank: int, world: int, worker: int, workers: int) -> list[int]:
        """Returns the streams one worker (``workers`` 0 or 1: the rank's only reader) reads."""
        mine = self.rank_streams(rank, world)
        return mine[worker::max(workers, 1)]

    def header(self) -> dict[str, Any]:
        """Returns what a state must match to resume this plan."""
        return {"version": ORDER_STATE_VERSION, "order": "deterministic",
                "shard_list": shard_list_id(self.shards), "shards": len(self.shards),
                "seed": self.seed, "epoch": self.epoch, "streams": self.streams,
                "batch": self.batch, "buffer": self.buffer,
                "shuffle_shards": self.shuffle_shards}


_HEADER_FIX = {
    "shard_list": "resume with the same shards in the same order",
    "shards": "resume with the same shards in the same order",
    "seed": "resume with the same seed",
    "streams": "resume with the same number of canonical streams",
    "batch": "resume with the same global batch size",
    "buffer": "resume with the same shuffle_buffer",
    "shuffle_shards": "resume with the same shuffle_shards",
}


def check_order_state(state: Any, plan: OrderPlan, *, complete: bool = True) -> None:
    """Raises :class:`StateMismatchError` unless ``state`` is a deterministic-order state of
    ``plan``'s run and epoch (with every stream, when ``complete``)."""
    if (not isinstance(state, dict) or state.get("version") != ORDER_STATE_VERSION
            or state.get("order") != "deterministic"):
        got = f"a dict with keys {sorted(state)[:6]}" if isinstance(state, dict) else (
            type(state).__name__)
        raise StateMismatchError(
            f"this is not an aisio deterministic-order state (version {ORDER_STATE_VERSION}): "
            f"got {got}; pass what the loader's state_dict() returned")
    header = plan.header()
    for key, fix in _HEADER_FIX.items():
        if state.get(key) != header[key]:
            raise StateMismatchError(
                f"the loader state has {key}={state.get(key)!r} but this loader has "
                f"{key}={header[key]!r}; {fix}")
    if state.get("epoch") != plan.epoch:
        raise StateMismatchError(
            f"the loader state is of epoch {state.get('epoch')!r}, not {plan.epoch}; "
            "resume the epoch the state is of")
    streams: Any = state.get("state")
    try:
        ids = {int(k) for k in streams}
        for value in streams.values():
            if value != "done":
                if len(value) not in (6, 7):
                    raise ValueError(f"a stream's entry has {len(value)} fields, not 6 or 7")
                out, n_in, shard, offset, ordinal, spans = value[:6]
                for number in (out, n_in, shard, offset, ordinal):
                    int(number)
                for span in spans:
                    if len(span) < 4:
                        raise ValueError(f"span {span!r} is too short")
                    [int(number) for number in span]
                entry_versions(value)
    except (AttributeError, TypeError, ValueError) as exc:
        raise StateMismatchError(
            f"the loader state is corrupt ({type(exc).__name__}: {exc}); load an intact "
            "checkpoint") from exc
    if not ids <= set(range(plan.streams)):
        raise StateMismatchError(
            f"the loader state names streams {sorted(ids - set(range(plan.streams)))[:5]} "
            f"that a plan of {plan.streams} streams lacks; load an intact checkpoint")
    if complete and len(ids) != plan.streams:
        missing = sorted(set(range(plan.streams)) - ids)
        raise StateMismatchError(
            f"the loader state lacks stream(s) {missing[:8]} of {plan.streams}: it is one "
            "rank's state; merge every rank's state (merge_order_states) and load that")


def entry_versions(entry: Sequence[Any]) -> dict[int, str]:
    """Returns the content ids a stream's entry names (shard -> id): its 7th field, where the
    state has one (a state saved before content ids were kept has none).

    Raises:
        ValueError: the field is not a mapping of shard numbers to strings.
    """
    if len(entry) < 7:
        return {}
    return {int(shard): str(version) for shard, version in dict(entry[6]).items()}


def merge_order_states(states: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Returns one state from the per-rank states of one step (each holds its own streams).

    Raises:
        StateMismatchError: the states are of different runs, epochs or plans, or two hold
            the same stream.
    """
    if not states:
        raise StateMismatchError("there are no states to merge")
    first = states[0]
    keys = [k for k in first if k != "state"]
    merged: dict[str, Any] = {}
    for other in states:
        if not isinstance(other, dict) or "state" not in other:
            raise StateMismatchError("a state to merge is not a deterministic-order state")
        if any(other.get(k) != first.get(k) for k in keys):
            raise StateMismatchError(
                "the states are of different runs, epochs or plans: "
                f"{ {k: first.get(k) for k in keys} } vs { {k: other.get(k) for k in keys} }")
        both = set(merged) & set(other["state"])
        if both:
            raise StateMismatchError(
                f"two states both hold stream(s) {sorted(both)[:5]}: merge the states of "
                "different ranks of one step, once each")
        merged.update(other["state"])
    return {**{k: first[k] for k in keys},
            "state": {k: merged[k] for k in sorted(merged, key=int)}}


__all__ = [
    "ORDER_STATE_VERSION",
    "DelayBuffer",
    "Input",
    "OrderPlan",
    "check_order_state",
    "entry_versions",
    "merge_order_states",
    "mix64",
    "stream_key",
]
