"""What crosses from the readers to the training loop: deliveries, and errors as items.

Every sample carries its position (:data:`POSITION`), and its shard's content id
(:data:`VERSION`), from the tar parser to a :class:`~aisio.core.pipeline.stages.Positioned`
stage; :func:`deliveries` and
:func:`batch_delivery` batch ``(value, position, version)`` triples into :class:`Delivery` items,
which the training process unpacks and records (see
:class:`~aisio.core.pipeline.loop.ResumableLoader`).
:func:`ship_errors` turns an aisio error raised in a worker into a last :class:`Failure` item.

A delivery sent to another process through a ``multiprocessing`` queue (pickled by
``ForkingPickler``, once :func:`register_reducer` ran in the sending process) takes its payload
through shared memory (:mod:`aisio.core.transport.ring`): :meth:`Delivery.unpack` copies it out
in the training process.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from multiprocessing.reduction import ForkingPickler
from typing import Any

from aisio.core.epochs.progress import Position, Positions
from aisio.core.faults.errors import AISIOError
from aisio.core.faults.policy import (
    SKIPPED,
    carried_warnings,
    carrying_warnings,
    warn_in_user_code,
)
from aisio.core.format.tar.runs import Columns
from aisio.core.transport import ring

POSITION = "__pos__"
"""The sample field that carries ``(shard, ordinal, end, last)`` to the training process."""

VERSION = "__shard_version__"
"""The sample field that carries its shard's content id (version, checksum, size) with it."""


class Delivery:
    """An item on its way to the training loop, with the positions of the samples in it.

    ``positions`` are the samples' :data:`~aisio.core.epochs.progress.Position` s,
    ``(shard, ordinal, end, last)``: the shard's index, the sample's ordinal in the shard, the
    byte offset where the sample ends (where a reader restarts after it), and whether it is the
    shard's last sample. Pickled (on its way from a worker), they travel compactly, as
    :class:`~aisio.core.epochs.progress.Positions`; within one process they stay as they are.
    ``versions`` names the content of the shards the samples come from (shard index ->
    content id), where known. ``warned``: the warnings a worker gave while making it
    (``(category, message)``), for the training process to give (:func:`give_warnings`).
    """

    __slots__ = ("empty", "positions", "value", "versions", "warned")

    def __init__(self, value: Any, positions: Sequence[Position] | Positions,
                 empty: bool = False, versions: dict[int, str] | None = None,
                 warned: tuple[tuple[type[Warning], str], ...] = ()) -> None:
        #: the item; on arrival from a worker maybe still in shared memory (see :meth:`unpack`)
        self.value = value
        self.positions = positions
        #: True when it carries only the positions of skipped samples, nothing to yield
        self.empty = empty
        self.versions = versions
        self.warned = warned

    def unpack(self) -> Any:
        """Returns the value, copied out of shared memory if it came through there."""
        if type(self.value) is ring.Shipped:
            self.value = self.value.open()
        return self.value

    def pin_memory(self, device: Any = None) -> Delivery:
        """Returns the delivery with its tensors in pinned memory (torch's DataLoader calls
        this with ``pin_memory=True``): copied straight there from shared memory."""
        if type(self.value) is ring.Shipped:
            value = self.value.open(pin=_can_pin())
        else:
            value = _pinned(self.value, device) if _can_pin() else self.value
        return Delivery(value, self.positions, self.empty, self.versions, self.warned)

    def compact(self) -> Positions:
        """Returns the positions as :class:`~aisio.core.epochs.progress.Positions` (what is
        pickled)."""
        if not isinstance(self.positions, Positions):
            self.positions = Positions.of(self.positions)
        return self.positions

    def __reduce__(self) -> tuple[Any, ...]:
        return (Delivery, (self.value, self.compact(), self.empty, self.versions,
                           self.warned))

    def __repr__(self) -> str:
        return f"Delivery({len(self.positions)} sample(s))"


def _to_another_process(delivery: Delivery) -> tuple[Any, ...]:
    """How ``multiprocessing`` queues pickle a delivery: its payload through shared memory
    when it is worth it and a slot is free, else as it is."""
    if not delivery.empty and type(delivery.value) is not ring.Shipped:
        shipped = ring.export(delivery.value)
        if shipped is not None:
            return (Delivery, (shipped, delivery.compact(), False, delivery.versions,
                               delivery.warned))
        return (Delivery, (ring.by_value(delivery.value), delivery.compact(), False,
                           delivery.versions, delivery.warned))
    return delivery.__reduce__()


def register_reducer() -> None:
    """Makes ``multiprocessing``'s pickler (``ForkingPickler``, every queue's) send deliveries
    by :func:`_to_another_process` in this process from now on; a plain ``pickle`` is left
    alone. Idempotent. Called where a loader is built and as each of its workers starts
    (:func:`aisio.runtime.workers.prepare_process`), never at import."""
    ForkingPickler.register(Delivery, _to_another_process)


def _can_pin() -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and torch.cuda.is_available()


def _pinned(value: Any, device: Any) -> Any:
    """Returns ``value`` with its CPU tensors pinned (in dicts, lists and tuples)."""
    kind = type(value)
    if kind is dict:
        return {k: _pinned(v, device) for k, v in value.items()}
    if kind in (list, tuple):
        return kind(_pinned(v, device) for v in value)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return value.pin_memory() if device is None else value.pin_memory(device)
    return value


class Failure:
    """An aisio error raised in a worker, sent on as an item so that the training process
    raises the error itself (type, message, ``url``, ``offset``, ...), not the copy that a
    loader's worker protocol rebuilds from its message. ``traceback``: the worker's, as text,
    when it was raised in another process (it becomes the error's ``__cause__``)."""

    __slots__ = ("error", "traceback", "warned")

    def __init__(self, error: AISIOError, traceback: str | None = None,
                 warned: tuple[tuple[type[Warning], str], ...] = ()) -> None:
        self.error = error
        self.traceback = traceback
        self.warned = warned

    @classmethod
    def of(cls, error: AISIOError) -> Failure:
        """Returns the failure for ``error`` raised here: in a worker process, noted as such
        and with its traceback as text (a traceback does not pickle)."""
        if multiprocessing.parent_process() is None:
            return cls(error)
        import traceback

        where = f"raised in worker process {os.getpid()}"
        notes = [*getattr(error, "__notes__", []), where]  # (add_note is Python >= 3.11)
        setattr(error, "__notes__", notes)  # noqa: B010 - typeshed has no __notes__ on 3.10
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        return cls(error, f"in worker process {os.getpid()}:\n{text}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (Failure, (self.error, self.traceback, self.warned))


def ship_errors(items: Iterable[Any], *, warnings: bool = False) -> Iterator[Any]:
    """Yields ``items``; an :class:`~aisio.AISIOError` they raise ends them as a last
    :class:`Failure` item (see :class:`~aisio.core.pipeline.loop.ResumableLoader`).

    With ``warnings`` (items that are deliveries), aisio's warnings given in a worker process
    while an item was made travel with it (``warned``), and those after the last in an empty
    delivery: the training process gives them at the user's loop (:func:`give_warnings`).
    """
    if not warnings:
        try:
            yield from items
        except AISIOError as exc:
            yield Failure.of(exc)
        return
    with carrying_warnings():
        try:
            for item in items:
                if isinstance(item, Delivery):
                    item.warned += carried_warnings()
                yield item
        except AISIOError as exc:
            failure = Failure.of(exc)
            failure.warned = carried_warnings()
            yield failure
            return
        left = carried_warnings()
        if left:
            yield Delivery(None, [], empty=True, warned=left)


def give_warnings(item: Any) -> None:
    """Gives the warnings a delivery or failure carries from a worker, at the user's loop."""
    for category, message in getattr(item, "warned", ()) or ():
        warn_in_user_code(message, category)


Placed = tuple[Any, Position, "str | None"]
"""A value with its sample's position and its shard's content id, as
:class:`~aisio.core.pipeline.stages.Positioned` returns them."""


def _versions(triples: Iterable[Placed]) -> dict[int, str] | None:
    """Returns the content id of each shard the samples come from (None: none known)."""
    versions = {position[0]: version for _, position, version in triples if version}
    return versions or None


def batch_delivery(triples: Sequence[Placed], *, collate: Any = None) -> Delivery:
    """Returns a :class:`Delivery` of ``(value, position, version)`` triples: the values
    (skipped ones left out) collated with ``collate`` if given, every position, and the
    shards' content ids."""
    values = [value for value, _, _ in triples if value is not SKIPPED]
    positions = [position for _, position, _ in triples]
    if not values:
        return Delivery(None, positions, empty=True, versions=_versions(triples))
    return Delivery(collate(values) if collate is not None else values, positions,
                    versions=_versions(triples))


def deliveries(triples: Iterable[Placed], *, batch_size: int | None = None,
         collate: Any = None) -> Iterator[Delivery]:
    """Yields :class:`Delivery` items from ``(value, position, version)`` triples: each value
    alone, or ``batch_size`` of them collated; the positions of skipped samples travel with
    the next."""
    batch: list[Any] = []
    positions: list[Position] = []
    versions: dict[int, str] = {}
    for item in triples:
        if type(item) is Columns:  # a run of samples, staged: as many triples at once
            version = item.extra.get(VERSION)
            if version is not None:
                versions[item.positions[0][0]] = version
            if not batch_size:
                for value, position in zip(item.values, item.positions, strict=True):
                    positions.append(position)
                    yield Delivery(value, positions, versions=versions or None)
                    positions = []
                versions = {}
                continue
            batch.extend(item.values)
            positions.extend(item.positions)
            while len(batch) >= batch_size:
                over = len(batch) - batch_size  # values (and positions) of the next batch
                cut = len(positions) - over
                yield Delivery(collate(batch[:batch_size]) if collate is not None
                               else batch[:batch_size], Positions.of(positions[:cut]),
                               versions=versions or None)
                batch, positions = batch[batch_size:], positions[cut:]
                versions = {item.positions[0][0]: version} if version is not None and over \
                    else {}
            continue
        value, position, version = item
        positions.append(position)
        if version is not None:
            versions[position[0]] = version
        if value is SKIPPED:
            continue
        if not batch_size:
            yield Delivery(value, positions, versions=versions or None)
            positions, versions = [], {}
            continue
        batch.append(value)
        if len(batch) == batch_size:
            yield Delivery(collate(batch) if collate is not None else batch, positions,
                           versions=versions or None)
            batch, positions, versions = [], [], {}
    if batch:
        yield Delivery(collate(batch) if collate is not None else batch, positions,
                       versions=versions or None)
    elif positions:
        yield Delivery(None, positions, empty=True, versions=versions or None)


__all__ = [
    "POSITION",
    "VERSION",
    "Delivery",
    "Failure",
    "Placed",
    "batch_delivery",
    "deliveries",
    "give_warnings",
    "register_reducer",
    "ship_errors",
]
