"""Tests for aisio.core.transport.ring within one process: what a worker puts in a slot, the
training process gets back, equal; and when the ring is full or a payload too large, the
value is pickled instead (never a wait). Across processes:
tests/integration/core/transport/test_ring.py.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import torch

from aisio.core.transport import ring as ring_module
from aisio.core.transport.delivery import Delivery
from aisio.core.transport.ring import Ring, Shipped, export

BIG = 32 * 1024


def equal(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, torch.Tensor):
        return (a.dtype == b.dtype and a.shape == b.shape
                and bool(torch.equal(a, b)) and b.is_contiguous())
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b))
    return bool(a == b)


def arrive(shipped: Shipped) -> Shipped:
    """Returns ``shipped`` as the receiving process sees it (it frees the slot)."""
    return Shipped(shipped.skeleton, shipped.slot, shipped.key, received=True)


def payload(seed: int) -> Any:
    gen = torch.Generator().manual_seed(seed)
    tensors = {str(dtype): torch.randint(0, 100, (40, 300), generator=gen).to(dtype)
               for dtype in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                             torch.float16, torch.bfloat16, torch.float32, torch.float64,
                             torch.bool, torch.complex64)}
    return {
        "jpg": [bytes([seed % 256, i]) * (BIG // 2) for i in range(3)],
        "small": b"kept in the pickle",
        "tensors": tensors,
        "strided": torch.arange(BIG, dtype=torch.int32).view(128, -1).t(),
        "scalar": torch.tensor(3.5),
        "array": np.arange(BIG, dtype=np.float32).reshape(64, -1),
        "fortran": np.asfortranarray(np.arange(BIG, dtype=np.int16).reshape(64, -1)),
        "nested": ([b"x" * BIG, (torch.ones(BIG // 4), 7)], "cls", None),
    }


@pytest.mark.parametrize("seed", [0, 1])
def test_a_value_comes_out_of_a_slot_equal(seed: int) -> None:
    ring = Ring(slots=2)
    value = payload(seed)
    shipped = export(value, ring)
    assert shipped is not None and ring.in_flight() == 1
    assert shipped.skeleton["small"] == b"kept in the pickle"  # too small to move
    assert len(pickle.dumps(shipped.skeleton)) < 20_000  # the payload is not in the pickle
    out = arrive(shipped).open()
    assert equal(value, out)
    assert ring.in_flight() == 0


def test_a_slot_is_reused_and_grown_never_waited_for() -> None:
    ring = Ring(slots=2, max_slot=8 << 20)
    value = [b"a" * BIG] * 4
    first, second = export(value, ring), export(value, ring)
    assert first is not None and second is not None
    assert export(value, ring) is None  # the ring is full: pickle, don't wait
    arrive(first).open()
    third = export(value, ring)
    assert third is not None and third.key == first.key  # the freed slot, reused
    assert ring.allocated() == 2
    assert export([b"b" * (9 << 20)], ring) is None  # larger than a slot may be
    arrive(second).release()
    arrive(third).release()
    bigger = export([b"c" * (4 << 20)], ring)  # outgrows its slot: a larger one replaces it
    assert bigger is not None and bigger.key[2] > third.key[2]
    assert arrive(bigger).open() == [b"c" * (4 << 20)]


def test_aisio_shm_0_is_read_as_each_value_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    """AISIO_SHM=0 pickles every value, set at any time before they are sent (it was read once,
    at import). Across the loaders' processes: tests/integration/loaders/test_environment.py"""
    ring = Ring()
    small = torch.arange(4)
    monkeypatch.setenv("AISIO_SHM", "0")
    assert export([b"x" * BIG] * 4, ring) is None and ring.allocated() == 0
    assert ring_module.by_value([small])[0] is small
    monkeypatch.setenv("AISIO_SHM", "1")
    shipped = export([b"x" * BIG] * 4, ring)
    assert shipped is not None and ring.allocated() == 1
    assert type(ring_module.by_value([small])[0]) is not torch.Tensor
    arrive(shipped).release()


def test_small_values_are_pickled() -> None:
    ring = Ring()
    assert export([b"x" * 1000] * 60, ring) is None  # leaves below MIN_LEAF
    assert export({"a": b"x" * 5000}, ring) is None  # below MIN_TOTAL in all
    assert ring.allocated() == 0


def test_a_small_batchs_tensors_travel_in_the_pickle_not_in_a_segment_each() -> None:
    """A batch too small for a slot (64 x 2 KiB samples and their labels) is pickled; its
    small tensors go by value: no shared-memory segment and socket connection per tensor."""
    from multiprocessing.reduction import ForkingPickler

    from aisio.core.transport.delivery import register_reducer

    register_reducer()  # as a loader does where it is built
    labels = torch.arange(64)
    weights = torch.rand(4, 3).t()  # not contiguous
    scalar = torch.tensor(7, dtype=torch.uint8)
    value = ([b"x" * 2048] * 64, labels, {"w": weights, "s": [scalar]})
    data = bytes(ForkingPickler.dumps(Delivery(value, [(0, k, k + 1, False) for k in range(64)])))
    assert b"rebuild_storage" not in data and b"share_memory" not in data
    back = pickle.loads(data)
    assert equal(value, back.value)
    assert back.value[2]["w"].is_contiguous() and back.value[2]["s"][0].dtype == torch.uint8
    # a tensor too big for the pickle still goes torch's way when no slot takes it
    big = torch.zeros(ring_module.MIN_TOTAL // 8, dtype=torch.float64)
    assert ring_module.by_value([big])[0] is big


def test_a_delivery_dropped_unopened_frees_its_slot() -> None:
    ring = Ring(slots=1)
    shipped = export([b"x" * BIG] * 4, ring)
    assert shipped is not None
    received = arrive(shipped)
    del shipped  # the sender's copy never frees the slot
    assert ring.in_flight() == 1
    delivery = Delivery(received, [(0, 0, 10, False)])
    del received
    del delivery  # the epoch stopped before this one was unpacked
    assert ring.in_flight() == 0


def test_delivery_unpack_and_pin_memory_open_a_shipped_value() -> None:
    ring = Ring(slots=2)
    value = (torch.arange(BIG), [b"y" * BIG])
    for method in ("unpack", "pin_memory"):
        shipped = export(value, ring)
        assert shipped is not None
        delivery = Delivery(arrive(shipped), [(0, k, k + 1, False) for k in range(2)])
        out = delivery.unpack() if method == "unpack" else delivery.pin_memory().value
        assert equal(value, out)
        assert ring.in_flight() == 0
    plain = Delivery(value, [(0, 0, 1, False)])
    assert plain.unpack() is value and equal(plain.pin_memory().value, value)


def test_a_plain_pickle_of_a_delivery_carries_its_value() -> None:
    """Only multiprocessing's pickler moves payloads to shared memory (a checkpoint or a
    deepcopy of a delivery keeps its value)."""
    value = [b"z" * BIG] * 4
    back = pickle.loads(pickle.dumps(Delivery(value, [(0, 0, 1, False)])))
    assert back.value == value and list(back.positions) == [(0, 0, 1, False)]


def test_a_slot_handle_travels_once() -> None:
    """The first delivery of a slot carries its handle; the receiver keeps the slot mapped and
    says so in the slot, and later deliveries name it by key alone."""
    ring = Ring(slots=1)
    value = [b"h" * BIG] * 4
    try:
        for round_ in range(3):
            shipped = export(value, ring)
            assert shipped is not None
            rebuild, args = shipped.__reduce__()
            assert (args[1] is not None) == (round_ == 0)
            assert rebuild(*args).open() == value  # as unpickling in the receiver does
    finally:
        ring_module._held.clear()


def test_the_deterministic_orders_small_samples_travel_in_the_pickle() -> None:
    """The same for a reader's chunks: per-sample tensors too small for a slot (32 x 32 x 3
    images) are pickled by value, not passed in a segment each."""
    from multiprocessing.reduction import ForkingPickler

    from aisio.core.order.reader import Chunk, RoundChunks, register_reducer

    register_reducer()
    values = [(torch.full((3, 32, 32), k, dtype=torch.uint8), k) for k in range(4)]
    pack = RoundChunks([Chunk(0, 0, values[:2], [], False), Chunk(1, 0, values[2:], [], True)])
    data = bytes(ForkingPickler.dumps(pack))
    assert b"rebuild_storage" not in data
    back = pickle.loads(data)
    assert equal([c.values for c in pack], [c.values for c in back])
    assert [c.done for c in back] == [False, True]


def test_forget_unmaps_the_slots_of_ended_workers_only() -> None:
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    gone = int(ended.stdout)  # (a reused pid would only keep its slots mapped longer)
    live = os.getpid()
    try:
        ring_module._held.update({(gone, 0, 1): "slot", (gone, 1, 1): "slot",
                                  (live, 0, 1): "slot", (live, 2, 3): "slot"})
        ring_module.forget()
        assert sorted(ring_module._held) == [(live, 0, 1), (live, 2, 3)]
    finally:
        ring_module._held.clear()


def test_a_process_keeps_one_ring() -> None:
    """Its slots are reused from one delivery to the next: the same ring on every call."""
    assert ring_module.ring() is ring_module.ring()
    assert ring_module.ring().pid == os.getpid()


def test_a_grown_slot_replaces_only_its_own_older_mapping() -> None:
    """The receiver keeps each worker slot mapped by key; a slot grown in place (a new
    generation) unmaps its older generation and nothing else: later deliveries, which name
    their slot by key alone, still arrive."""
    ring = Ring(slots=2, max_slot=8 << 20)
    value = [b"a" * BIG] * 4
    try:
        first, second = export(value, ring), export(value, ring)
        assert first is not None and second is not None
        for shipped in (first, second):
            rebuild, args = shipped.__reduce__()
            assert rebuild(*args).open() == value  # the handle travels: now held by key
        bigger = export([b"c" * (4 << 20)], ring)  # slot 0 outgrows itself
        assert bigger is not None and bigger.key[:2] == first.key[:2]
        rebuild, args = bigger.__reduce__()
        assert rebuild(*args).open() == [b"c" * (4 << 20)]
        assert sorted(ring_module._held) == sorted([bigger.key, second.key])
        again = export(value, ring)  # a held slot again: its key alone crosses
        assert again is not None and again.key in (bigger.key, second.key)
        rebuild, args = again.__reduce__()
        assert args[1] is None and rebuild(*args).open() == value
    finally:
        ring_module._held.clear()



def unusual_tensors() -> dict[str, Any]:
    """Tensors whose memory is not their value as flat bytes, or that have none."""
    return {
        "grad": torch.rand(16, 16, requires_grad=True),
        "sparse": torch.eye(16).to_sparse(),
        "csr": torch.eye(16).to_sparse_csr(),
        "nested": torch.nested.nested_tensor([torch.arange(3.0), torch.arange(5.0)]),
        "empty": torch.empty(0, 5),
    }


def same_tensor(a: Any, b: Any) -> bool:
    if a.is_nested:
        return b.is_nested and all(
            torch.equal(x, y) for x, y in zip(a.unbind(), b.unbind(), strict=True))
    if a.layout != torch.strided:
        return b.layout == a.layout and torch.equal(a.to_dense(), b.to_dense())
    return (a.dtype == b.dtype and a.shape == b.shape and a.requires_grad == b.requires_grad
            and torch.equal(a.detach(), b.detach()))


@pytest.mark.usefixtures("own_ring")
@pytest.mark.filterwarnings("ignore:.*(sparse|nested).*:UserWarning")
@pytest.mark.parametrize("with_slot", [False, True])
@pytest.mark.parametrize("name", ["grad", "sparse", "csr", "nested", "empty"])
def test_tensors_whose_memory_is_not_their_value_cross_as_torch_sends_them(
        name: str, with_slot: bool) -> None:
    """Grad-requiring, sparse, nested and empty tensors are left to torch's own pickling,
    beside a payload in a slot or in a small batch pickled by value, and arrive as they were
    (a sparse or nested tensor has no ``nbytes``: its whole batch failed to pickle, so never
    arrived). Conjugate, negative and quantized ones are left to torch too, which loses their
    bit or quantizer itself."""
    from multiprocessing.reduction import ForkingPickler

    from aisio.core.transport.delivery import register_reducer

    register_reducer()
    tensor = unusual_tensors()[name]
    value = {"payload": [b"p" * BIG] * 3 if with_slot else b"", "tensor": tensor}
    back = pickle.loads(bytes(ForkingPickler.dumps(Delivery(value, [(0, 0, 1, False)]))))
    assert (type(back.value) is Shipped) == with_slot
    out = back.unpack()
    assert out["payload"] == value["payload"]
    assert same_tensor(tensor, out["tensor"])


def test_a_freed_slot_taken_again_is_in_flight_until_it_is_released() -> None:
    """A slot reused for a delivery is marked in flight again: until the receiver has copied
    it out, no later delivery may be written over it (the first would arrive with the
    second's bytes)."""
    ring = Ring(slots=1)
    first = export([b"1" * BIG] * 4, ring)
    assert first is not None
    arrive(first).open()
    second = export([b"2" * BIG] * 4, ring)  # the freed slot, reused
    assert second is not None and second.key == first.key and ring.in_flight() == 1
    assert export([b"3" * BIG] * 4, ring) is None  # in flight: pickled, not written over it
    assert arrive(second).open() == [b"2" * BIG] * 4


def test_a_payload_that_just_outgrows_its_slot_gets_a_larger_one() -> None:
    """A slot holds its header and the payload: a payload as large as the slot itself does not
    fit in it (written there, it would run past the slot's end)."""
    ring = Ring(slots=1)
    first = export([b"a" * BIG] * 4, ring)  # makes a slot of 1 MiB
    assert first is not None
    slot_size = first.slot.nbytes
    arrive(first).release()
    value = [b"b" * slot_size]  # the slot's size exactly: one header too many
    bigger = export(value, ring)
    assert bigger is not None and bigger.key[2] > first.key[2]
    assert arrive(bigger).open() == value


def test_a_payload_larger_than_a_slot_may_be_is_pickled_with_slots_free() -> None:
    ring = Ring(slots=2, max_slot=2 << 20)
    assert export([b"x" * (3 << 20)], ring) is None
    assert ring.allocated() == 0


def test_a_shipped_value_pickled_whole_opens_equal() -> None:
    """What crosses is the skeleton (where each leaf lies in the slot), pickled: rebuilt in the
    receiving process it still names each leaf's place."""
    ring = Ring(slots=1)
    value = {"a": [b"a" * BIG, b"b" * BIG], "t": torch.arange(BIG), "n": np.ones(BIG)}
    shipped = export(value, ring)
    assert shipped is not None
    try:
        out = pickle.loads(pickle.dumps(shipped)).open()
    finally:
        ring_module._held.clear()
    assert equal(value, out)
