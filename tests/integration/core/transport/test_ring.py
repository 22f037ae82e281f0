"""Payloads from worker processes through shared memory: equal on arrival on every loader, and
no shared memory left behind after a normal run, a SIGKILLed worker or a SIGKILLed trainer:
no process left mapping a segment or holding its file descriptor (torch's ``file_descriptor``
sharing leaves nothing in ``/dev/shm`` to list)."""

from __future__ import annotations

import contextlib
import fcntl
import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

from aisio.core.store.client import Client
from aisio.core.store.urls import Bucket
from aisio.core.transport import ring
from aisio.core.transport.delivery import Delivery
from aisio.runtime.workers import pipe_size, prepare_process, worker_init_fn
from tests.conftest import LOADERS, ROOT, needs_dataloader2, write_shards
from tests.integration.runtime.test_workers import _iterate_in_thread

KIB = 1024


def batch(step: int) -> Any:
    """The value of delivery ``step``: bytes, tensors of several dtypes, nested containers."""
    gen = torch.Generator().manual_seed(step)
    return {
        "bin": [bytes([step % 251, i]) * (20 * KIB) for i in range(8)],
        "img": torch.randint(0, 255, (8, 3, 32, 32), generator=gen, dtype=torch.uint8),
        "feat": (torch.rand(8, 512, generator=gen), torch.rand(8, 512, generator=gen).half()),
        "cls": torch.arange(8) + step,
        "key": [f"k{step}-{i}" for i in range(8)],
    }


class Prepared(IterableDataset):
    """Yields ``count`` deliveries of :func:`batch` (a slow consumer makes the ring fill).
    ``prepare``: the worker registers how deliveries cross first, as aisio's workers do as they
    start (:func:`~aisio.runtime.workers.prepare_process`); False leaves it to the loader."""

    def __init__(self, count: int, prepare: bool = True) -> None:
        self.count = count
        self.prepare = prepare

    def __iter__(self) -> Iterator[Delivery]:
        if self.prepare:
            prepare_process()
        for step in range(self.count):
            yield Delivery(batch(step), [(0, step, step + 1, False)])


def _as_is(item: Any) -> Any:
    return item


def same(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and bool(torch.equal(a, b))
    return bool(a == b)


def _segments(holder: int | str, *creators: int) -> list[str]:
    """Returns the shared-memory segments that processes ``creators`` made and process
    ``holder`` (``"self"``: this one) holds, mapped or open. torch's ``file_descriptor``
    sharing unlinks a segment at once (nothing is left in ``/dev/shm`` to list): it lives, as
    ``/dev/shm/torch_<creator pid>_... (deleted)``, while a process maps it or holds its fd."""
    marks = tuple(f"/dev/shm/torch_{pid}_" for pid in creators)
    found = []
    with contextlib.suppress(OSError):  # a process that ended meanwhile, or not ours
        with open(f"/proc/{holder}/maps") as fh:
            found += [line.split(None, 5)[-1].strip() for line in fh if any(
                mark in line for mark in marks)]
        for fd in os.listdir(f"/proc/{holder}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{holder}/fd/{fd}")
                if target.startswith(marks):
                    found.append(target)
    return found


def _holders(*creators: int) -> dict[int, list[str]]:
    """Returns every process on this machine that holds a segment ``creators`` made."""
    held = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            found = _segments(entry, *creators)
            if found:
                held[int(entry)] = found
    return held


def test_deliveries_arrive_equal_through_shared_memory_and_leave_nothing() -> None:
    loader = DataLoader(Prepared(40), batch_size=None, num_workers=1, prefetch_factor=2,
                        collate_fn=_as_is)
    shipped = 0
    it = iter(loader)
    worker = it._workers[0].pid  # type: ignore[attr-defined]
    for step, item in enumerate(it):
        shipped += type(item.value) is ring.Shipped
        assert same(item.unpack(), batch(step)), step
        if step == 5:  # the check sees the worker's slots while they are in use
            assert _segments("self", worker) and _segments(worker, worker)
    assert shipped == 40
    del it, item
    ring.forget()
    gc.collect()
    assert not _segments("self", worker, os.getpid()) and not _holders(worker)


def test_a_spawned_worker_of_aisio_sends_through_shared_memory_too() -> None:
    """A worker that starts without the training process's memory (``spawn``) registers how
    deliveries cross as aisio's worker_init_fn starts it: nothing registers at import."""
    loader = DataLoader(Prepared(3, prepare=False), batch_size=None, num_workers=1,
                        collate_fn=_as_is, multiprocessing_context="spawn",
                        worker_init_fn=worker_init_fn())
    kinds = []
    for step, item in enumerate(loader):
        kinds.append(type(item.value) is ring.Shipped)
        assert same(item.unpack(), batch(step)), step
    assert kinds == [True] * 3


def test_a_full_ring_falls_back_to_pickling(monkeypatch: pytest.MonkeyPatch) -> None:
    """With one slot, the training loop holds the first delivery unopened (its slot in flight)
    while the next three arrive: they are pickled, never wait for the slot; all arrive equal,
    in order. No timing: only the training loop frees the slot."""
    monkeypatch.setattr(ring, "SLOTS", 1)
    loader = DataLoader(Prepared(24), batch_size=None, num_workers=1, prefetch_factor=4,
                        collate_fn=_as_is)
    kinds, held = [], []
    for step, item in enumerate(loader):
        kinds.append(type(item.value) is ring.Shipped)
        held.append(item)
        if step < 3:
            continue  # the first delivery stays unopened until the fourth has arrived
        for at, waiting in enumerate(held, start=step + 1 - len(held)):
            assert same(waiting.unpack(), batch(at)), at
        held.clear()
    assert kinds[:4] == [True, False, False, False], kinds
    assert any(kinds[4:]), kinds  # the freed slot is used again


KILL_WORKER = """
import gc, json, os, signal, time
from torch.utils.data import DataLoader
from aisio.core.transport import ring
from tests.integration.core.transport.test_ring import Prepared, _as_is, _segments, batch, same
loader = DataLoader(Prepared(1000), batch_size=None, num_workers=1, prefetch_factor=4,
                    collate_fn=_as_is)
it = iter(loader)
worker = it._workers[0].pid
error, delivered = None, 0
try:
    for step, item in enumerate(it):
        assert same(item.unpack(), batch(step))
        delivered += 1
        if step == 20:
            held = _segments("self", worker)
            os.kill(worker, signal.SIGKILL)
        time.sleep(0.01)
except RuntimeError as exc:
    error = str(exc)
del it, item  # (small tensors cross in torch's own shared memory, held by the items)
ring.forget()
gc.collect()
print(json.dumps({"worker": worker, "error": error, "delivered": delivered, "held": held,
                  "mapped": _segments("self", worker)}), flush=True)
"""


def test_a_killed_worker_leaves_no_shared_memory(tmp_path: Path) -> None:
    """Deliveries queued before the kill still arrive (their slots are held), then the loader
    names the dead worker; its slots are unmapped and no process holds them."""
    script = tmp_path / "kill_worker.py"
    script.write_text(textwrap.dedent(KILL_WORKER))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    # torch names the worker one of two ways, whichever notices first: its SIGCHLD handler
    # ("killed by signal") or the data queue's liveness check ("exited unexpectedly").
    error = result["error"] or ""
    assert str(result["worker"]) in error and (
        "killed by signal" in error or "exited unexpectedly" in error), result
    assert result["delivered"] >= 21 and result["held"] and result["mapped"] == []
    assert not _holders(result["worker"])


TRAINING = """
import sys, time
from torch.utils.data import DataLoader
from tests.integration.core.transport.test_ring import Prepared, _as_is
loader = DataLoader(Prepared(100000), batch_size=None, num_workers=2, prefetch_factor=4,
                    collate_fn=_as_is)
it = iter(loader)
for i, item in enumerate(it):
    item.unpack()
    if i == 10:
        print(" ".join(str(w.pid) for w in it._workers), flush=True)
    time.sleep(0.02)
"""


def test_a_killed_trainer_leaves_no_shared_memory(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(TRAINING))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                            cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout is not None
        workers = [int(p) for p in proc.stdout.readline().split()]
        assert len(workers) == 2
        assert set(_holders(proc.pid, *workers)) >= {proc.pid, *workers}  # slots in use
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 30  # torch's workers see their parent gone within ~5 s
        while any(os.path.exists(f"/proc/{p}") for p in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(os.path.exists(f"/proc/{p}") for p in workers)
        assert not _holders(proc.pid, *workers)  # no process left holding their memory
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


_WIDE = pipe_size()


def _result_queues(loader: Any) -> list[Any]:
    """The queues a loader's workers send their items to the training process through."""
    service = getattr(loader, "reading_service", None)
    if service is not None:  # DataLoader2: one per worker
        return [results for _, _, results in service._worker_processes]
    return [loader._iterator._worker_result_queue]  # DataLoader: one for all its workers


def _pipe_size(results: Any) -> int:
    return int(fcntl.fcntl(results._reader.fileno(), fcntl.F_GETPIPE_SZ))


@pytest.fixture
def large(ais_client: Client, bucket: Bucket, tmp_path: Path) -> tuple[str, list[str]]:
    return write_shards(ais_client, bucket, tmp_path, shards=3, per_shard=20,
                        payload=100 * KIB)


@pytest.mark.parametrize("order", ["fast", "deterministic"])
@pytest.mark.parametrize("name", sorted(LOADERS))
def test_every_loader_delivers_large_samples_equal(name: str, order: str, ais_endpoint: str,
                                                   large: tuple[str, list[str]],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """100 KiB samples, batched in a worker (on torchdata.nodes, a mapper process), or sent
    as packs of rounds in the deterministic order: through shared memory, equal to a read in
    one process."""
    template, keys = large
    options: dict[str, Any] = {"url": ais_endpoint, "seed": 1, "batch_size": 8,
                               "tuple_fields": ("__key__", "bin"), "collate": False,
                               "shuffle_shards": False, "order": order}
    if name == "nodes":
        options["method"] = "process"
    opened = []
    real_open = ring.Shipped.open
    monkeypatch.setattr(ring.Shipped, "open",
                        lambda self, **kw: opened.append(1) or real_open(self, **kw))
    got: dict[int, dict[str, bytes]] = {}
    for workers in (0, 1):
        loader = LOADERS[name](template, num_workers=workers, **options)
        try:
            got[workers] = {key: data for batch_ in loader for key, data in batch_}
            if workers and name != "nodes":  # (nodes: the mapper's own queues)
                assert [_pipe_size(q) for q in _result_queues(loader.current)] == [_WIDE]
        finally:
            loader.shutdown()
        assert bool(opened) == (workers == 1), (workers, len(opened))
    assert sorted(got[0]) == sorted(keys)
    assert got[1] == got[0]


@needs_dataloader2
def test_a_killed_dataloader2_worker_is_named_with_batches_in_shared_memory(
        ais_endpoint: str, ais_client: Client, bucket: Bucket, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches through shared memory: a SIGKILLed worker is still reported as such (its slots'
    handles crossed once, so the deliveries it queued unpickle), and leaves nothing behind."""
    import aisio

    template, _ = write_shards(ais_client, bucket, tmp_path, shards=8, per_shard=100,
                               payload=8 * KIB)
    loader = aisio.webdataset_loader(template, url=ais_endpoint, num_workers=2, seed=0,
                                     batch_size=16, collate=False)
    killed: list[int] = []
    shipped: list[bool] = []
    real_open = ring.Shipped.open
    monkeypatch.setattr(ring.Shipped, "open",
                        lambda self, **kw: shipped.append(True) or real_open(self, **kw))

    def on_item(i: int) -> None:
        if i == 20 and not killed:
            process = loader.current.reading_service._worker_processes[1][0]
            os.kill(process.pid, signal.SIGKILL)
            killed.append(process.pid)
        time.sleep(0.002)

    try:
        error = _iterate_in_thread(loader, on_item, timeout=60)
    finally:
        loader.shutdown()
    assert shipped, "no batch came through shared memory"
    assert isinstance(error, aisio.core.faults.errors.WorkerDiedError), repr(error)
    assert "SIGKILL" in str(error) and error.pid == killed[0]
    gc.collect()
    assert not _segments("self", killed[0]) and not _holders(killed[0])
