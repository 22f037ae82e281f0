"""Payloads from worker processes to the training process through reused shared memory.

A delivery sent through a ``multiprocessing`` queue (every worker protocol aisio runs on:
DataLoader, StatefulDataLoader, DataLoader2's reading service) is pickled by
``multiprocessing.reduction.ForkingPickler``. Pickling payload bytes costs more than anything
else a worker hands over, and a fresh shared-memory tensor per batch costs nearly as much (the
rates: benchmarks/README.md, Figures behind the code's comments). So for that pickler only,
:func:`export` moves a delivery's payload leaves (CPU tensors; ``bytes`` and numpy arrays of
at least :data:`MIN_LEAF` bytes; inside dicts, lists and tuples) into a slot of this process's
:class:`Ring` of shared-memory buffers, and sends the slot with a small skeleton of the value:
the slot's handle (torch passes a shared tensor by file descriptor) with its first delivery,
its key alone after that. The training process copies the leaves out with
:meth:`Shipped.open` (into pinned memory when asked) and marks the slot free, in a flag inside
the slot that the worker reads before it reuses it.

Nothing ever waits for a slot: when none is free, or the payload is larger than a slot may be,
or too small to be worth one, the value is pickled, its small tensors by value
(:func:`by_value`: torch would pass each in a segment of its own). Within one process
(``num_workers=0``) nothing is pickled and nothing changes. The slots are torch shared-memory
tensors (the ``file_descriptor`` sharing strategy unlinks each segment at once): a segment is
freed when the last process holding it exits, however it exits, so none is left in
``/dev/shm``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from typing import Any

from aisio.core.system.memory import keep_freed_memory
from aisio.core.system.processes import pid_alive


def enabled() -> bool:
    """Returns False where ``AISIO_SHM=0`` is in the environment (every delivery is then
    pickled, as before the ring): read as each value is sent, so it may be set at any time
    before the workers start, by them as well."""
    return os.environ.get("AISIO_SHM", "1") != "0"


MIN_LEAF = 4096
"""Smaller ``bytes`` and numpy arrays stay in the pickle (copying them costs more)."""

MIN_TOTAL = 64 * 1024
"""A value with fewer payload bytes than this is pickled as it is."""

SLOTS = 16
"""Slots per worker process: how many deliveries may be in flight before values are pickled."""

MAX_SLOT = 1 << 30
"""A payload larger than this is pickled (so is one that does not fit in free memory)."""

_ALIGN = 64
# A slot's header: byte 0 is 1 while the slot is in flight, 0 once the receiver released it;
# byte 1 is 1 once the receiver holds the slot mapped (then its handle need not travel again).
_HEADER = _ALIGN


class _Piece:
    """Where one payload leaf lies in a slot, and what it was."""

    __slots__ = ("dtype", "kind", "offset", "shape", "size")

    def __init__(self, kind: str, offset: int, size: int, dtype: Any = None,
                 shape: tuple[int, ...] = ()) -> None:
        self.kind = kind  # "b": bytes, "t": torch tensor, "n": numpy array
        self.offset = offset
        self.size = size
        self.dtype = dtype
        self.shape = shape

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Piece, (self.kind, self.offset, self.size, self.dtype, self.shape))


def _bytes_of(tensor: Any) -> memoryview:
    """Returns a writable byte view of a contiguous CPU tensor (kept alive by the caller).

    Copies go through these views (one ``memcpy``), not ``Tensor.copy_``: on a busy machine
    torch's intra-op threads made such copies many times slower (benchmarks/README.md,
    Figures behind the code's comments)."""
    buffer = (ctypes.c_ubyte * tensor.nbytes).from_address(tensor.data_ptr())
    return memoryview(buffer).cast("B")


class Ring:
    """A worker's reused shared-memory slots (created lazily, grown when a payload outgrows
    one). Thread-safe: a queue's feeder thread pickles, and so exports.

    Args:
        slots: at most this many slots (default :data:`SLOTS`).
        max_slot: the largest slot, in bytes (default :data:`MAX_SLOT`).
    """

    def __init__(self, slots: int | None = None, max_slot: int | None = None) -> None:
        self.pid = os.getpid()
        self.max_slot = MAX_SLOT if max_slot is None else max_slot
        self._slots: list[tuple[Any, memoryview, int] | None] = [None] * (slots or SLOTS)
        self._lock = threading.Lock()
        self._generation = 0
        #: set when shared memory could not be had: pickle from now on
        self.broken = False

    def take(self, size: int) -> tuple[Any, memoryview, tuple[int, int, int]] | None:
        """Returns a free slot of at least ``size`` payload bytes, marked in flight: its
        tensor, a byte view of it, and its key; None when there is none (never waits)."""
        need = size + _HEADER
        if need > self.max_slot or self.broken:
            return None
        with self._lock:
            grow = None
            for index, slot in enumerate(self._slots):
                if slot is None:
                    grow = index if grow is None else grow
                    break
                tensor, view, generation = slot
                if view[0]:
                    continue
                if len(view) >= need:
                    view[0] = 1
                    return tensor, view, (self.pid, index, generation)
                grow = index if grow is None else grow
            if grow is None:
                return None
            self._slots[grow] = None  # a too-small free slot: let it go, make a larger one
            capacity = min(self.max_slot, -(-(need + need // 4) // (1 << 20)) * (1 << 20))
            try:
                import torch

                tensor = torch.zeros(capacity, dtype=torch.uint8).share_memory_()
            except (RuntimeError, OSError):  # no room in /dev/shm: pickle as before
                self.broken = True
                return None
            self._generation += 1
            view = _bytes_of(tensor)
            view[0] = 1
            self._slots[grow] = (tensor, view, self._generation)
            return tensor, view, (self.pid, grow, self._generation)

    def in_flight(self) -> int:
        """Returns how many slots are in flight (for tests and diagnostics)."""
        return sum(1 for slot in self._slots if slot is not None and slot[1][0])

    def allocated(self) -> int:
        """Returns how many slots exist."""
        return sum(1 for slot in self._slots if slot is not None)


_ring: Ring | None = None
_ring_lock = threading.Lock()


def ring() -> Ring:
    """Returns this process's ring (a forked child makes its own)."""
    global _ring
    with _ring_lock:
        if _ring is None or _ring.pid != os.getpid():
            _ring = Ring()
        return _ring


class Shipped:
    """A value whose payload leaves wait in a shared-memory slot; :meth:`open` returns it.

    A slot's handle (a file descriptor, passed by torch through ``multiprocessing``'s resource
    sharer) crosses with its first delivery only: the receiver keeps the slot mapped and says
    so in the slot's header, and later deliveries name the slot by key. So a delivery already
    queued when its worker dies still arrives, and the loader reports the dead worker.
    """

    __slots__ = ("handle", "key", "received", "skeleton", "slot")

    def __init__(self, skeleton: Any, slot: Any, key: tuple[int, int, int], *,
                 handle: bool = True, received: bool = False) -> None:
        self.skeleton = skeleton
        self.slot = slot  # a shared uint8 tensor: pickled by handle (torch's reductions)
        self.key = key
        #: whether the slot's handle goes with this delivery (the receiver lacks it)
        self.handle = handle
        #: True on the receiving side, the one that frees the slot (the sender's copy never)
        self.received = received

    def __reduce__(self) -> tuple[Any, ...]:
        return (_arrived, (self.skeleton, self.slot if self.handle else None, self.key))

    def open(self, *, pin: bool = False) -> Any:
        """Returns the value, its leaves copied out (tensors into pinned memory with ``pin``),
        and frees the slot for the worker."""
        slot = self.slot
        if slot is None:
            raise RuntimeError("this shipped value was opened already")
        view = _bytes_of(slot)
        try:
            return _fill(self.skeleton, view, pin)
        finally:
            self.release(view)

    def release(self, view: memoryview | None = None) -> None:
        """Frees the slot without reading it (idempotent; only where it was received)."""
        if self.slot is not None and self.received:
            (view if view is not None else _bytes_of(self.slot))[0] = 0
        self.slot = None

    def __del__(self) -> None:  # dropped unopened (an epoch stopped early): free the slot
        with contextlib.suppress(Exception):  # at interpreter exit the mapping may be gone
            self.release()


_held: dict[tuple[int, int, int], Any] = {}  # (pid, index, generation) -> slot
_held_lock = threading.Lock()


def _arrived(skeleton: Any, slot: Any, key: tuple[int, int, int]) -> Shipped:
    pid, index, generation = key
    with _held_lock:
        if slot is None:
            slot = _held.get(key)
            if slot is None:  # cannot happen: a slot's handle comes before its key alone
                raise RuntimeError(f"aisio: a delivery names shared-memory slot {key}, which "
                                   "this process does not hold; report this as a bug")
        else:  # a new slot (or a larger one in its place, or a new worker's with a reused pid)
            keep_freed_memory()  # this process copies batches out: keep what they free
            for old in [k for k in _held if k[:2] == (pid, index) and k[2] != generation]:
                del _held[old]
            _held[key] = slot
            _bytes_of(slot)[1] = 1  # the worker may send its key alone from now on
    return Shipped(skeleton, slot, key, received=True)


def forget() -> None:
    """Unmaps the slots of worker processes that have ended (kept mapped until then)."""
    with _held_lock:
        for key in list(_held):
            if not pid_alive(key[0]):
                del _held[key]


def export(value: Any, into: Ring | None = None) -> Shipped | None:
    """Returns ``value`` with its payload leaves moved into a free slot of ``into`` (default:
    this process's ring), or None when it should be pickled as it is: too few payload bytes,
    no free slot, a payload larger than a slot may be."""
    if not enabled() or _estimate(value) < MIN_TOTAL // 2:
        return None
    pieces: list[tuple[_Piece, Any]] = []
    total = [0]
    skeleton = _strip(value, pieces, total)
    if total[0] < MIN_TOTAL:
        return None
    taken = (into or ring()).take(total[0])
    if taken is None:
        return None
    tensor, view, key = taken
    for piece, leaf in pieces:
        start = _HEADER + piece.offset
        view[start:start + piece.size] = leaf if piece.kind == "b" else _bytes_of(leaf)
    return Shipped(skeleton, tensor, key, handle=not view[1])


def by_value(value: Any) -> Any:
    """Returns ``value`` with each small CPU tensor (under :data:`MIN_TOTAL` bytes; inside
    dicts, lists and tuples) in a wrapper that pickles its bytes: what to send when
    :func:`export` declines. Left as they are, torch passes every tensor in a shared-memory
    segment of its own, received through a socket connection per tensor (a batch of 64 labels
    cost the training process more than the batch's 128 KiB of samples)."""
    return _by_value(value) if enabled() else value


def _by_value(value: Any) -> Any:
    kind = type(value)
    if kind is tuple:
        return tuple(map(_by_value, value))
    if kind is list:
        if value and type(value[0]) is bytes:  # payloads of like samples: no tensor here
            return value
        return list(map(_by_value, value))
    if kind is dict:
        return {k: _by_value(v) for k, v in value.items()}
    torch = sys.modules.get("torch")
    if (torch is not None and kind is torch.Tensor and _flat(value, torch)
            and value.nbytes < MIN_TOTAL and value.device.type == "cpu"
            and not (value.requires_grad or value.is_quantized or value.is_conj()
                     or value.is_neg())):
        return _ByValue(value)
    return value


class _ByValue:
    """A small tensor that pickles as its bytes, dtype and shape (see :func:`by_value`)."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor

    def __reduce__(self) -> tuple[Any, ...]:
        tensor = self.tensor.contiguous()
        return (_tensor, (bytes(_bytes_of(tensor)), tensor.dtype, tuple(tensor.shape)))


def _tensor(data: Any, dtype: Any, shape: tuple[int, ...], pin: bool = False) -> Any:
    """Returns a new tensor (in pinned memory when ``pin``) holding the bytes ``data``."""
    import torch

    out = torch.empty(shape, dtype=dtype, pin_memory=pin)
    _bytes_of(out)[:] = data
    return out


def _flat(value: Any, torch: Any) -> bool:
    """Returns whether tensor ``value`` is one block of memory (strided, not nested): the only
    kind that has ``nbytes`` to copy; sparse and nested ones cross as torch sends them."""
    return bool(value.layout == torch.strided and not value.is_nested)


def _estimate(value: Any) -> int:
    """Returns about how many payload bytes ``value`` holds, from the first item of a long
    list or tuple (a batch of like samples): enough to pass small batches by cheaply."""
    kind = type(value)
    if kind is list or kind is tuple:
        if len(value) > 8:
            return len(value) * _estimate(value[0])
        return sum(map(_estimate, value))
    if kind is dict:
        return sum(map(_estimate, value.values()))
    if kind is bytes:
        return len(value) if len(value) >= MIN_LEAF else 0
    torch, numpy = sys.modules.get("torch"), sys.modules.get("numpy")
    if torch is not None and kind is torch.Tensor:
        # sparse and nested tensors have no nbytes (or no flat bytes): torch's way, below
        return int(value.nbytes) if _flat(value, torch) else 0
    if numpy is not None and kind is numpy.ndarray:
        return int(value.nbytes)
    return 0


def _strip(value: Any, pieces: list[tuple[_Piece, Any]], total: list[int]) -> Any:
    """Returns ``value`` with each payload leaf replaced by its :class:`_Piece`."""
    kind = type(value)
    if kind is dict:
        return {k: _strip(v, pieces, total) for k, v in value.items()}
    if kind is list:
        return [_strip(v, pieces, total) for v in value]
    if kind is tuple:
        return tuple(_strip(v, pieces, total) for v in value)
    if kind is bytes:
        if len(value) < MIN_LEAF:
            return value
        return _place(_Piece("b", 0, len(value)), value, pieces, total)
    torch = sys.modules.get("torch")
    if torch is not None and kind is torch.Tensor:
        # Tensors of any size: left behind, torch would pass each in a segment of its own
        if (value.device.type != "cpu" or not _flat(value, torch) or value.requires_grad
                or value.is_quantized or value.is_conj() or value.is_neg() or not value.nbytes):
            return value
        return _place(_Piece("t", 0, value.nbytes, value.dtype, tuple(value.shape)),
                      value.contiguous(), pieces, total)
    numpy = sys.modules.get("numpy")
    if numpy is not None and torch is not None and kind is numpy.ndarray:
        if value.dtype.kind not in "biufc" or value.nbytes < MIN_LEAF:
            return value
        try:
            leaf = torch.from_numpy(numpy.ascontiguousarray(value))
        except (TypeError, ValueError):  # a dtype torch lacks (e.g. big-endian): pickle it
            return value
        return _place(_Piece("n", 0, leaf.nbytes, leaf.dtype, tuple(leaf.shape)), leaf,
                      pieces, total)
    return value


def _place(piece: _Piece, leaf: Any, pieces: list[tuple[_Piece, Any]],
           total: list[int]) -> _Piece:
    piece.offset = total[0]
    total[0] += -(-piece.size // _ALIGN) * _ALIGN
    pieces.append((piece, leaf))
    return piece


def _fill(skeleton: Any, view: memoryview, pin: bool) -> Any:
    kind = type(skeleton)
    if kind is _Piece:
        start = _HEADER + skeleton.offset
        if skeleton.kind == "b":
            return bytes(view[start:start + skeleton.size])
        out = _tensor(view[start:start + skeleton.size], skeleton.dtype, skeleton.shape, pin)
        return out.numpy() if skeleton.kind == "n" else out
    if kind is dict:
        return {k: _fill(v, view, pin) for k, v in skeleton.items()}
    if kind is list:
        return [_fill(v, view, pin) for v in skeleton]
    if kind is tuple:
        return tuple(_fill(v, view, pin) for v in skeleton)
    return skeleton


__all__ = ["MIN_LEAF", "MIN_TOTAL", "Ring", "Shipped", "by_value", "export", "forget", "ring"]
