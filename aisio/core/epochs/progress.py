"""Epochs: which shard each reader gets, and what the training loop has received (to resume).

Framework-free bookkeeping that every front end carries the same way:

* :class:`ShardTask` is one unit of work: a shard, and where in it to start (a byte offset at a
  sample boundary, the ordinal of the sample found there, and the ordinals to skip past it).
* :func:`epoch_tasks` turns the shard list, the seed and the epoch (and, when resuming, a saved
  state) into the epoch's task list, the same in every process, so that a shard split by index
  (``sharding_filter``: rank x worker) hands each task to exactly one reader.
* Every sample carries its position ``(shard, ordinal, end, last)`` from the tar parser to the
  training loop; batches carry their samples' positions in a
  :class:`~aisio.core.transport.delivery.Delivery` (from a worker process compactly, as
  :class:`Positions`: columns and runs of consecutive ordinals of one shard), which the front
  end unpacks in the training process and records in an :class:`EpochProgress` (a run at a
  time where it can). Prefetched and buffered samples are not recorded, only what the loop
  received.
* :meth:`EpochProgress.state_dict` is small and JSON-serialisable: the epoch, the seed, the
  shard list's identity, the finished shards (as index ranges) and, for each shard in progress,
  the offset and ordinal of its first undelivered sample and the ordinals delivered beyond it,
  with their end offsets (the shuffle buffer delivers out of order). Per-rank states merge with
  :func:`merge_states`; a merged state resumes on any number of workers and ranks: finished
  shards are not read again, shards in progress are reopened with ``Range`` at their first
  undelivered sample, the rest are split across the new readers. Every sample of the epoch is
  delivered exactly once.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import operator
import random
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from aisio.core.faults.errors import StateMismatchError
from aisio.core.store.sources import ObjectRef

STATE_VERSION = 1


@dataclass(frozen=True)
class ShardTask:
    """One shard to read in an epoch, from a sample boundary.

    Attributes:
        index: the shard's index in the loader's shard list (stable across epochs and resumes).
        ref: the shard's object.
        start: byte offset to read from (a ``Range`` request when not 0).
        first: the ordinal (0-based, within the shard) of the sample that starts at ``start``.
        skip: ordinals at or past ``first`` that were delivered already: read but not yielded.
        version: what identified the shard's content when it was read before (a resumed
            shard; see :func:`~aisio.core.store.client.content_id`): a changed shard raises
            :class:`~aisio.ObjectChangedError` instead of being read on from ``start``.
    """

    index: int
    ref: ObjectRef
    start: int = 0
    first: int = 0
    skip: frozenset[int] = frozenset()
    version: str | None = None

    def uri(self) -> str:
        """Returns the shard's name."""
        return self.ref.uri()


def shard_list_id(refs: Sequence[ObjectRef]) -> str:
    """Returns a short identity of a shard list (its names, in order)."""
    digest = hashlib.sha256("\n".join(ref.path.uri() for ref in refs).encode())
    return digest.hexdigest()[:16]


def epoch_seed(seed: int, epoch: int) -> int:
    """Returns the seed of epoch ``epoch`` of a run seeded with ``seed``."""
    return random.Random(f"{seed}:{epoch}").getrandbits(63)


def shard_order(count: int, seed: int | None, epoch: int, *, shuffle: bool) -> list[int]:
    """Returns the order in which an epoch reads shards ``0..count-1``."""
    order = list(range(count))
    if shuffle:
        random.Random(epoch_seed(seed or 0, epoch)).shuffle(order)
    return order


Position = tuple[int, int, int, bool]
"""``(shard, ordinal, end, last)``: a sample's shard index, its ordinal in the shard, the byte
offset where it ends (where a reader restarts after it), and whether it is the shard's last."""


class Positions:
    """The positions of a delivery's samples, in the order they came, as columns and runs.

    One int64 column each for the shard, the ordinal and the end offset, one byte per sample
    for ``last``, and where each run starts: a run is consecutive ordinals of one shard (a
    shard's last sample closes its run). A batch read in order is one or two runs; behind a
    shuffle buffer most runs are one sample. It pickles as five byte strings, and
    :meth:`EpochProgress.record` takes a run at a time, or (when runs are short) the columns
    zipped. Iterating yields exactly the per-sample :data:`Position` tuples it was made of.

    Example:
        >>> p = Positions.of([(3, 0, 100, False), (3, 1, 180, True), (5, 7, 90, False)])
        >>> p.starts.tolist(), list(p)[1], len(p)
        ([0, 2], (3, 1, 180, True), 3)
    """

    __slots__ = ("ends", "lasts", "ordinals", "shards", "starts")

    def __init__(self, shards: array[int], ordinals: array[int], ends: array[int],
                 lasts: bytes, starts: array[int] | None) -> None:
        self.shards = shards
        self.ordinals = ordinals
        self.ends = ends
        self.lasts = lasts
        #: the index of each run's first sample (None: not worked out, samples came shuffled)
        self.starts = starts

    @classmethod
    def of(cls, positions: Iterable[Position]) -> Positions:
        """Returns the compact form of per-sample positions (order and repeats kept)."""
        columns = list(zip(*positions, strict=True))
        if not columns:
            return cls(array("q"), array("q"), array("q"), b"", array("q"))
        shard_of, ordinal_of, end_of, last_of = columns
        count, first = len(shard_of), ordinal_of[0]
        lasts = bytes(map(bool, last_of))
        shards, ordinals, ends = array("q", shard_of), array("q", ordinal_of), array("q", end_of)
        if (shard_of.count(shard_of[0]) == count and lasts.find(1, 0, count - 1) < 0
                and ordinal_of == tuple(range(first, first + count))):
            return cls(shards, ordinals, ends, lasts, array("q", [0]))  # one run: read in order
        if count < 2 or ordinal_of[1] != first + 1 or shard_of[1] != shard_of[0] or lasts[0]:
            return cls(shards, ordinals, ends, lasts, None)  # likely shuffled: no runs
        # A run breaks before sample i when its ordinal does not follow, its shard changes, or
        # sample i - 1 was its shard's last (computed without a Python loop per sample).
        breaks = map(operator.or_, map(operator.or_,
                                       map(operator.ne, ordinals[1:], map(_NEXT, ordinals)),
                                       map(operator.ne, shards[1:], shards)), lasts)
        starts = array("q", [0])
        starts.extend(itertools.compress(range(1, count), breaks))
        return cls(shards, ordinals, ends, lasts, starts)

    def __len__(self) -> int:
        return len(self.ends)

    def __iter__(self) -> Iterator[Position]:
        return zip(self.shards, self.ordinals, self.ends, map(bool, self.lasts), strict=True)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Positions):
            return NotImplemented
        return self.__reduce__() == other.__reduce__()

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (_positions, (self.shards.tobytes(), self.ordinals.tobytes(),
                             self.ends.tobytes(), self.lasts,
                             None if self.starts is None else self.starts.tobytes()))

    def __repr__(self) -> str:
        runs = "" if self.starts is None else f" in {len(self.starts)} run(s)"
        return f"Positions({len(self)} sample(s){runs})"


_NEXT = (1).__add__


def _positions(shards: bytes, ordinals: bytes, ends: bytes, lasts: bytes,
               starts: bytes | None) -> Positions:
    arrays = []
    for column in (shards, ordinals, ends, starts):
        values = array("q")
        if column is not None:
            values.frombytes(column)
        arrays.append(values)
    return Positions(arrays[0], arrays[1], arrays[2], lasts,
                     None if starts is None else arrays[3])


@dataclass
class _Partial:
    """A shard in progress: everything before ``lo`` was delivered; ``above`` past it."""

    lo: int
    offset: int
    above: dict[int, int] = field(default_factory=dict)  # ordinal -> end offset
    total: int | None = None  # the shard's sample count, once its last sample was delivered

    def absorb(self, other: _Partial) -> None:
        """Adds what ``other`` says was delivered of the same shard (another rank's view)."""
        if other.lo > self.lo:
            self.lo, self.offset = other.lo, other.offset
        self.above.update(other.above)
        if other.total is not None:
            self.total = other.total
        while self.lo in self.above:
            self.offset = self.above.pop(self.lo)
            self.lo += 1
        self.above = {o: end for o, end in self.above.items() if o > self.lo}


class EpochProgress:
    """What the training loop has received in one epoch, shard by shard.

    Args:
        shards: the loader's shard list.
        seed: the run's seed (None: unseeded).
        epoch: the epoch's number.
    """

    def __init__(self, shards: Sequence[ObjectRef], seed: int | None, epoch: int) -> None:
        self.count = len(shards)
        self.list_id = shard_list_id(shards)
        self.seed = seed
        self.epoch = epoch
        self.done: set[int] = set()
        self.partial: dict[int, _Partial] = {}
        self.delivered = 0
        self.base: list[Any] | None = None  # [id, delivered] of the state this resumed from
        self.versions: dict[int, str] = {}  # shard -> content id, as its reader saw it
        #: the ranks the epoch is dealt to, and which rank reads each shard not done (see
        #: :mod:`aisio.core.epochs.split`): a state names the owners of its shards in progress,
        #: so that a resume on as many ranks gives each back to the rank that had it
        self.world = 1
        self.owners: Mapping[int, int] = {}

    def record(self, positions: Iterable[Position] | Positions,
               versions: dict[int, str] | None = None) -> None:
        """Records samples as received by the training loop (and their shards' content):
        :class:`Positions` a run at a time, anything else a sample at a time (the same result
        either way)."""
        if versions:
            self.versions.update(versions)
        if isinstance(positions, Positions):
            self._record_runs(positions)
            return
        for shard, ordinal, end, last in positions:
            self.delivered += 1
            if shard in self.done:
                raise AssertionError(f"shard {shard} delivered sample {ordinal} twice")
            part = self.partial.get(shard)
            if part is None:
                part = self.partial[shard] = _Partial(0, 0)
            if last:
                part.total = ordinal + 1
            if ordinal == part.lo:
                part.lo, part.offset = ordinal + 1, end
                while part.lo in part.above:
                    part.offset = part.above.pop(part.lo)
                    part.lo += 1
            elif ordinal > part.lo:
                part.above[ordinal] = end
            if part.total is not None and part.lo >= part.total:
                del self.partial[shard]
                self.done.add(shard)
                self.versions.pop(shard, None)

    def _record_runs(self, positions: Positions) -> None:
        """Records runs: one that continues its shard's delivered prefix (read in order) or
        lies wholly past it costs a few operations; anything else (a repeat, a shard whose
        last sample came earlier, out-of-order arrivals behind a shuffle buffer) goes through
        the per-sample path, so the result is always the same."""
        starts, count = positions.starts, len(positions)
        if starts is None or 4 * len(starts) > count:  # mostly single samples: zipped columns
            self.record(iter(positions))
            return
        shards, ordinals, ends, lasts = (positions.shards, positions.ordinals, positions.ends,
                                         positions.lasts)
        for i, at in enumerate(starts):
            stop = starts[i + 1] if i + 1 < len(starts) else count
            shard, first, size = shards[at], ordinals[at], stop - at
            part = self.partial.get(shard)
            fast = size > 1 and shard not in self.done
            if fast:
                if part is None:
                    part = self.partial[shard] = _Partial(0, 0)
                fast = part.total is None and (first > part.lo
                                               or (first == part.lo and not part.above))
            if not fast:
                self.record(zip(shards[at:stop], ordinals[at:stop], ends[at:stop],
                                map(bool, lasts[at:stop]), strict=True))
                continue
            assert part is not None
            self.delivered += size
            if first == part.lo:
                part.lo, part.offset = first + size, ends[stop - 1]
            else:
                part.above.update(zip(ordinals[at:stop], ends[at:stop], strict=True))
            if lasts[stop - 1]:
                part.total = first + size
                if part.lo >= part.total:
                    del self.partial[shard]
                    self.done.add(shard)

    def state_dict(self) -> dict[str, Any]:
        """Returns the epoch's progress as a small JSON-serialisable dict."""
        return {
            **_versions_of(self.versions, self.partial),
            **_owners_of(self.world, self.owners, self.partial),
            "version": STATE_VERSION,
            "shard_list": self.list_id,
            "shards": self.count,
            "seed": self.seed,
            "epoch": self.epoch,
            "delivered": self.delivered,
            "base": self.base,
            "done": _ranges(sorted(self.done)),
            "partial": {str(shard): [p.lo, p.offset, sorted(map(list, p.above.items())), p.total]
                        for shard, p in sorted(self.partial.items())},
        }

    @classmethod
    def from_state(cls, state: dict[str, Any], shards: Sequence[ObjectRef]) -> EpochProgress:
        """Returns the progress a saved state describes, checked against this shard list.

        Raises:
            StateMismatchError: the state is malformed, or from another shard list.
        """
        check_state(state, shards)
        progress = cls(shards, state["seed"], state["epoch"])
        progress.delivered = int(state["delivered"])
        progress.base = [_state_id(state), progress.delivered]
        progress.done = set(_unranges(state["done"]))
        for key, (lo, offset, above, total) in state["partial"].items():
            progress.partial[int(key)] = _Partial(int(lo), int(offset),
                                                  {int(o): int(end) for o, end in above}, total)
        progress.versions = {int(k): str(v) for k, v in state.get("versions", {}).items()}
        progress.world = int(state.get("world", 1))
        progress.owners = {int(k): int(v) for k, v in state.get("owners", {}).items()}
        return progress

    def tasks(self, shards: Sequence[ObjectRef], *, shuffle: bool) -> EpochTasks:
        """Returns what is left of the epoch: shards in progress first (from their first
        undelivered sample), then the untouched ones in the epoch's order."""
        order = shard_order(self.count, self.seed, self.epoch, shuffle=shuffle)
        started = [ShardTask(index, shards[index], part.offset, part.lo, frozenset(part.above),
                             self.versions.get(index))
                   for index in order if (part := self.partial.get(index)) is not None]
        done, partial = self.done, self.partial
        return EpochTasks(shards, array("q", (index for index in order
                                              if index not in done and index not in partial)),
                          started)


class EpochTasks(Sequence[ShardTask]):
    """An epoch's task list, each :class:`ShardTask` made when it is asked for: every reader
    of a job holds the whole list (and takes its share by index), which at a million shards
    would be a million objects in each of them.

    Args:
        shards: the loader's shard list.
        order: the indices of the shards read from their start, in the epoch's order.
        started: the tasks of the shards in progress (a resumed epoch), which come first.
    """

    def __init__(self, shards: Sequence[ObjectRef], order: array[int],
                 started: Sequence[ShardTask] = ()) -> None:
        self.shards = shards
        self.order = order
        self.started = list(started)

    def __len__(self) -> int:
        return len(self.started) + len(self.order)

    @overload
    def __getitem__(self, at: int) -> ShardTask: ...

    @overload
    def __getitem__(self, at: slice) -> list[ShardTask]: ...

    def __getitem__(self, at: int | slice) -> ShardTask | list[ShardTask]:
        if isinstance(at, slice):
            return [self[i] for i in range(*at.indices(len(self)))]
        if at < 0:
            at += len(self)
        if not 0 <= at < len(self):
            raise IndexError(f"task {at} of an epoch of {len(self)}")
        if at < len(self.started):
            return self.started[at]
        index = self.order[at - len(self.started)]
        return ShardTask(index, self.shards[index])

    def __iter__(self) -> Iterator[ShardTask]:
        yield from self.started
        shards = self.shards
        for index in self.order:
            yield ShardTask(index, shards[index])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"EpochTasks({len(self)} tasks, {len(self.started)} started)"


def epoch_tasks(shards: Sequence[ObjectRef], seed: int | None, epoch: int, *, shuffle: bool,
                resume: EpochProgress | dict[str, Any] | None = None) -> EpochTasks:
    """Returns an epoch's task list: every shard from its start, or what ``resume`` (a
    progress, or a saved state) left of this epoch."""
    if isinstance(resume, dict):
        resume = EpochProgress.from_state(resume, shards) if resume["epoch"] == epoch else None
    if resume is not None and resume.epoch == epoch:
        return resume.tasks(shards, shuffle=shuffle)
    return EpochTasks(shards, array("q", shard_order(len(shards), seed, epoch,
                                                     shuffle=shuffle)))


def check_state(state: Any, shards: Sequence[ObjectRef]) -> None:
    """Raises :class:`StateMismatchError` unless ``state`` is a loader state for ``shards``."""
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
        raise StateMismatchError(
            f"this is not an aisio loader state (version {STATE_VERSION}): got "
            f"{_describe(state)}; pass what loader.state_dict() returned")
    try:
        count, list_id = int(state["shards"]), str(state["shard_list"])
        int(state["epoch"]), int(state["delivered"])
        ranges, partial, base = state["done"], state["partial"], state.get("base")
        for key, version in state.get("versions", {}).items():
            int(key), version.encode()  # (a state before versions has none)
        int(state.get("world", 1))  # (nor one before owners these two)
        for key, owner in state.get("owners", {}).items():
            int(key), int(owner)
        for first, last in ranges:
            int(first), int(last)
        if base is not None:
            base_id, base_delivered = base
            str(base_id), int(base_delivered)
        for key, value in partial.items():
            int(key)
            lo, offset, above, total = value
            int(lo), int(offset), [(int(o), int(end)) for o, end in above]
            if total is not None:
                int(total)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise StateMismatchError(
            f"the loader state is corrupt ({type(exc).__name__}: {exc}); load an intact "
            "checkpoint") from exc
    if count != len(shards) or list_id != shard_list_id(shards):
        raise StateMismatchError(
            f"the loader state is for another shard list ({count} shards, id {list_id}) than "
            f"this loader's ({len(shards)} shards, id {shard_list_id(shards)}); resume with the "
            "same shards in the same order")


def merge_states(states: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Returns one state from the per-rank states of one epoch (each covers its own shards).

    The ranks of a resumed run each start from the whole resumed state (they do not know which
    shards the others will read): their states then share that base and merge shard by shard,
    each sample delivered by any of them counted once.

    Raises:
        StateMismatchError: the states are of different shard lists, seeds, epochs or resumed
            states, or two ranks of a run that was not resumed claim the same shard.
    """
    if not states:
        raise StateMismatchError("there are no states to merge")
    if any(isinstance(state, dict) and state.get("order") == "deterministic" for state in states):
        raise StateMismatchError(
            "these are states of order=\"deterministic\": merge them with aisio.gather_state, "
            "or pass the list of every rank's state to the loader's load_state_dict")
    first = states[0]
    keys = ("version", "shard_list", "shards", "seed", "epoch")
    for other in states[1:]:
        if any(other.get(k) != first.get(k) for k in keys):
            raise StateMismatchError(
                "the states are of different runs or epochs: "
                f"{ {k: first.get(k) for k in keys} } vs { {k: other.get(k) for k in keys} }")
        if other.get("base") != first.get("base"):
            raise StateMismatchError(
                "the states were resumed from different states (ids "
                f"{(first.get('base') or [None])[0]} and {(other.get('base') or [None])[0]}); "
                "merge the states of the ranks of one run, taken at the same step")
    base = first.get("base")
    done: set[int] = set()
    partial: dict[int, _Partial] = {}
    versions: dict[int, str] = {}
    owners: dict[int, int] = {}
    for state in states:
        versions.update((int(k), str(v)) for k, v in state.get("versions", {}).items())
        owners.update((int(k), int(v)) for k, v in state.get("owners", {}).items())
        mine = set(_unranges(state["done"]))
        theirs = {int(k) for k in state["partial"]}
        # what this state holds that an earlier one held too: a cost of this state's size
        # (not of everything merged so far: rank 0 merges 1,024 ranks' states)
        overlap = {shard for shard in mine | theirs if shard in done or shard in partial}
        if overlap and base is None:
            raise StateMismatchError(
                f"two states both hold shard(s) {sorted(overlap)[:5]}: merge the states of "
                "different ranks of one run, once each")
        done |= mine
        for key, (lo, offset, above, total) in state["partial"].items():
            part = _Partial(int(lo), int(offset), {int(o): int(end) for o, end in above}, total)
            if int(key) in partial:
                partial[int(key)].absorb(part)
            else:
                partial[int(key)] = part
    for shard, part in list(partial.items()):
        if shard in done or (part.total is not None and part.lo >= part.total):
            del partial[shard]
            done.add(shard)
    delivered = sum(s["delivered"] for s in states)
    if base is not None:
        delivered -= (len(states) - 1) * int(base[1])
    return {**{k: first[k] for k in keys}, **_versions_of(versions, partial),
            **_owners_of(int(first.get("world", 1)), owners, partial),
            "delivered": delivered, "base": base,
            "done": _ranges(sorted(done)),
            "partial": {str(shard): [p.lo, p.offset, sorted(map(list, p.above.items())), p.total]
                        for shard, p in sorted(partial.items())}}


def _versions_of(versions: dict[int, str], partial: dict[int, Any]) -> dict[str, Any]:
    """Returns ``{"versions": {shard: content id}}`` for the shards in progress whose content
    is known, or nothing (so that a state with none is as before)."""
    known = {str(shard): versions[shard] for shard in sorted(partial) if shard in versions}
    return {"versions": known} if known else {}


def _owners_of(world: int, owners: Mapping[int, int], partial: dict[int, Any]
               ) -> dict[str, Any]:
    """Returns ``{"world": R, "owners": {shard: rank}}`` for the shards in progress of an epoch
    dealt to several ranks, or nothing (one rank: the state is as before)."""
    if world < 2:
        return {}
    return {"world": world, "owners": {str(shard): owners[shard] for shard in sorted(partial)
                                       if shard in owners}}


def state_size(state: dict[str, Any]) -> int:
    """Returns the size of a state as compact JSON, in bytes."""
    return len(json.dumps(state, separators=(",", ":")))


def _state_id(state: dict[str, Any]) -> str:
    """Returns a short identity of a state (of its JSON form: the same after a round trip)."""
    text = json.dumps(state, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _ranges(sorted_ints: Sequence[int]) -> list[list[int]]:
    """Returns ``[[first, last], ...]`` runs of consecutive integers."""
    runs: list[list[int]] = []
    for value in sorted_ints:
        if runs and runs[-1][1] == value - 1:
            runs[-1][1] = value
        else:
            runs.append([value, value])
    return runs


def _unranges(runs: Any) -> Iterator[int]:
    for first, last in runs:
        yield from range(int(first), int(last) + 1)


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return f"a dict with keys {sorted(value)[:6]}"
    return type(value).__name__


__all__ = [
    "EpochProgress",
    "EpochTasks",
    "Position",
    "Positions",
    "ShardTask",
    "check_state",
    "epoch_tasks",
    "merge_states",
    "shard_list_id",
    "shard_order",
    "state_size",
]
