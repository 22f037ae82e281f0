"""Tests for aisio.core.transport.delivery: a Delivery crossing to the training process (within
one process: what multiprocessing's pickler sends and what the receiver rebuilds; batching
into deliveries: tests/unit/core/epochs/test_progress.py), and Failure, an aisio error raised
in a worker sent on as an item."""

from __future__ import annotations

import multiprocessing
import os
import pickle
from typing import Any

import pytest

import aisio
from aisio.core.faults.policy import SKIPPED
from aisio.core.format.tar.runs import Columns
from aisio.core.pipeline.stages import Positioned
from aisio.core.transport.delivery import (
    POSITION,
    VERSION,
    Delivery,
    Failure,
    _to_another_process,
    batch_delivery,
    deliveries,
)
from aisio.core.transport.ring import Shipped


def raise_in_a_worker() -> aisio.ShardFormatError:
    try:
        raise aisio.ShardFormatError("s.tar is truncated", url="ais://b/s.tar", offset=512)
    except aisio.ShardFormatError as exc:
        return exc


def test_a_failure_in_the_training_process_is_the_error_alone() -> None:
    error = raise_in_a_worker()
    failure = Failure.of(error)
    assert failure.error is error and failure.traceback is None
    assert not hasattr(error, "__notes__")


def test_a_failure_in_a_worker_notes_where_and_carries_its_traceback_as_text(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # as in a worker process: multiprocessing names a parent
    monkeypatch.setattr(multiprocessing, "parent_process", lambda: object())
    error = raise_in_a_worker()
    error.__notes__ = ["a note of its own"]
    failure = pickle.loads(pickle.dumps(Failure.of(error)))
    where = f"worker process {os.getpid()}"
    assert failure.error.__notes__ == ["a note of its own", f"raised in {where}"]
    assert (failure.error.url, failure.error.offset) == ("ais://b/s.tar", 512)
    text = failure.traceback
    assert text is not None and text.startswith(f"in {where}:\nTraceback")
    assert "raise_in_a_worker" in text and "ShardFormatError: s.tar is truncated" in text


pytestmark = pytest.mark.usefixtures("own_ring")


def crossed(delivery: Delivery, *, shared: bool) -> Delivery:
    """Returns ``delivery`` as the receiving process rebuilds it (see test_reader.crossed)."""
    rebuild, args = _to_another_process(delivery)  # what ForkingPickler sends for a Delivery
    value, *rest = args
    assert (type(value) is Shipped) == shared
    if not shared:
        return rebuild(*pickle.loads(pickle.dumps(args)))  # type: ignore[no-any-return]
    arrive, shipped_args = value.__reduce__()
    return rebuild(arrive(*shipped_args), *pickle.loads(pickle.dumps(rest)))  # type: ignore[no-any-return]


POSITIONS = [(3, 0, 512, False), (3, 1, 1024, True), (5, 0, 700, False)]


def test_a_delivery_crosses_with_its_positions_versions_and_emptiness() -> None:
    value = [b"a" * 40_000, b"b" * 40_000]
    back = crossed(Delivery(value, POSITIONS, versions={3: "v3"}), shared=True)
    assert (list(back.positions), back.empty, back.versions) == (POSITIONS, False, {3: "v3"})
    assert back.unpack() == value
    small = crossed(Delivery([b"c"], POSITIONS), shared=False)
    assert (list(small.positions), small.empty, small.unpack()) == (POSITIONS, False, [b"c"])
    empty = crossed(Delivery(None, POSITIONS, empty=True, versions={5: "v5"}), shared=False)
    assert (list(empty.positions), empty.empty, empty.versions) == (POSITIONS, True, {5: "v5"})


def test_pin_memory_keeps_the_positions_versions_and_emptiness() -> None:
    """torch's DataLoader calls pin_memory on each item with pin_memory=True: what a resume
    counts must come through (the pinning itself needs an accelerator)."""
    value = [b"p" * 40_000, b"q" * 40_000]
    shipped = crossed(Delivery(value, POSITIONS, versions={3: "v3"}), shared=True)
    for before, expected in [(shipped, value), (Delivery([1, 2], POSITIONS, versions={5: "v"}),
                                                [1, 2]),
                             (Delivery(None, POSITIONS, empty=True), None)]:
        pinned = before.pin_memory()
        assert (pinned.value, list(pinned.positions), pinned.empty, pinned.versions) == (
            expected, POSITIONS, before.empty, before.versions)


def test_deliveries_name_the_content_of_the_shards_their_samples_come_from() -> None:
    """Each delivery carries the content id of each shard its samples (skipped ones too) come
    from: what a resume compares before it reads a shard again."""
    samples = [{"__key__": "a", POSITION: (3, 0, 10, False), VERSION: "v3"},
               {"__key__": "b", POSITION: (3, 1, 20, True), VERSION: "v3"},
               {"__key__": "c", POSITION: (5, 0, 10, False)},
               {"__key__": "d", POSITION: (6, 0, 10, False), VERSION: "v6"}]
    triples = [Positioned()(dict(sample)) for sample in samples]
    assert [version for _, _, version in triples] == ["v3", "v3", None, "v6"]
    assert [value["__key__"] for value, _, _ in triples] == ["a", "b", "c", "d"]
    assert batch_delivery(triples).versions == {3: "v3", 6: "v6"}
    skipped = [(SKIPPED if k < 2 else v, p, s) for k, (v, p, s) in enumerate(triples)]
    assert batch_delivery(skipped[:2]).versions == {3: "v3"}  # an empty one too
    assert [d.versions for d in deliveries(triples)] == [{3: "v3"}, {3: "v3"}, None, {6: "v6"}]
    # the skipped samples ride along with the next one kept
    assert [d.versions for d in deliveries(skipped)] == [{3: "v3"}, {6: "v6"}]
    assert [d.versions for d in deliveries(triples, batch_size=3)] == [{3: "v3"}, {6: "v6"}]
    assert [d.versions for d in deliveries(skipped[:2])] == [{3: "v3"}]


def test_a_worker_error_without_notes_of_its_own_gets_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(multiprocessing, "parent_process", lambda: object())
    failure = Failure.of(raise_in_a_worker())
    assert failure.error.__notes__ == [f"raised in worker process {os.getpid()}"]


@pytest.mark.parametrize("batch_size", [None, 1, 3, 4])
def test_a_run_of_samples_is_delivered_as_its_samples_one_by_one_would_be(
        batch_size: int | None) -> None:
    """A run (Columns: many samples' values at once, from the parser) among single samples:
    the same deliveries, values, positions and content ids, as the samples one by one."""
    def triple(i: int, version: str | None) -> tuple[Any, Any, str | None]:
        return (f"v{i}", (2, i, 100 * i, False), version)

    one_by_one = [triple(0, None), (SKIPPED, (2, 1, 100, False), None),
                  *(triple(i, "c2") for i in range(2, 9)), triple(9, "c2")]
    run = Columns([f"v{i}" for i in range(2, 9)], [(2, i, 100 * i, False) for i in range(2, 9)],
                  {VERSION: "c2"})
    mixed = [*one_by_one[:2], run, one_by_one[-1]]
    want = [(d.value, list(d.positions), d.versions, d.empty)
            for d in deliveries(one_by_one, batch_size=batch_size)]
    got = [(d.value, list(d.positions), d.versions, d.empty)
           for d in deliveries(mixed, batch_size=batch_size)]
    assert got == want


@pytest.mark.parametrize("version", ["c7", None])
@pytest.mark.parametrize("batch_size", [None, 2, 3])
def test_a_run_names_its_own_shards_content_and_no_other(
        version: str | None, batch_size: int | None) -> None:
    """A run's content id goes with the deliveries of its samples, under its shard's index (not
    a sample's ordinal), and with no delivery of another shard's samples after it; a run with
    no content id names none (a resume would expect the content ``"None"``)."""
    run_positions = [(7, i, 100 * (i + 1), i == 3) for i in range(4)]
    run_triples = [(f"v{i}", position, version) for i, position in enumerate(run_positions)]
    after = [("w0", (9, 0, 50, False), None), ("w1", (9, 1, 90, False), None)]
    run = Columns([f"v{i}" for i in range(4)], run_positions,
                  {VERSION: version} if version is not None else {})
    want = [(d.value, list(d.positions), d.versions)
            for d in deliveries([*run_triples, *after], batch_size=batch_size)]
    got = [(d.value, list(d.positions), d.versions)
           for d in deliveries([run, *after], batch_size=batch_size)]
    assert got == want
    assert all(d.versions in ({7: version}, None) for d in deliveries([run], batch_size=2))


def test_a_batch_delivery_is_its_kept_values_collated() -> None:
    triples = [("a", (1, 0, 10, False), None), (SKIPPED, (1, 1, 20, False), None),
               ("c", (1, 2, 30, True), None)]
    assert batch_delivery(triples, collate="".join).value == "ac"
    assert batch_delivery(triples).value == ["a", "c"]


def test_pin_memory_pins_each_tensor_of_a_batch_and_keeps_the_rest(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With an accelerator, torch's DataLoader asks each item for its tensors in pinned memory:
    every tensor in dicts, lists and tuples is pinned (for the device asked), everything else
    and the batch's structure stay as they are, and so do the worker's warnings."""
    import torch

    from aisio.core.transport import delivery as delivery_module

    pinned_for: list[Any] = []

    def pin_memory(self: torch.Tensor, device: Any = None) -> torch.Tensor:
        pinned_for.append(device)
        return self + 100  # (no accelerator here: a copy that shows it went through)

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    monkeypatch.setattr(delivery_module, "_can_pin", lambda: True)
    value = {"x": [torch.tensor(1), (torch.tensor(2), "k", 3)], "y": b"raw", "z": None}
    warned = ((UserWarning, "a skip in a worker"),)
    for device in (None, "cuda:1"):
        pinned_for.clear()
        out = Delivery(value, POSITIONS, versions={3: "v"}, warned=warned).pin_memory(device)
        assert out.value == {"x": [101, (102, "k", 3)], "y": b"raw", "z": None}
        assert type(out.value["x"]) is list and type(out.value["x"][1]) is tuple
        assert pinned_for == [device, device]
        assert (list(out.positions), out.versions, out.warned) == (POSITIONS, {3: "v"}, warned)
