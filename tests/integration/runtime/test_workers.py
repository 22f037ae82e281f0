"""DataLoader2 worker faults: a killed worker, a killed training process, a stalled read at
shutdown, and errors raised in a worker reaching the training loop intact."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import pytest

import aisio
from aisio.core.store.client import Client
from aisio.core.store.urls import AISPath, Bucket
from tests.conftest import LOADERS, default_loader, needs_dataloader2, tar_bytes, write_shards
from tests.faultproxy import fault_proxy


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _iterate_in_thread(loader: Any, on_item: Any, timeout: float) -> BaseException | None:
    """Iterates ``loader`` in a thread; returns what it raised (None if it ended); fails the
    test if it is still waiting after ``timeout`` seconds (then shuts the loader down)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            for i, _ in enumerate(loader):
                on_item(i)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        loader.shutdown()
        pytest.fail(f"the loader was still waiting after {timeout} s")
    return outcome[0]


@pytest.fixture
def shards(ais_client: Client, bucket: Bucket, tmp_path: Path) -> tuple[str, list[str]]:
    return write_shards(ais_client, bucket, tmp_path, shards=8, per_shard=100, payload=2000)


def _returns(call: Any, guard: float = 60) -> None:
    """Runs ``call`` in a thread; fails the test if it has not returned after ``guard`` seconds
    (a hang guard: the defects it catches wait forever, or for a 60 s stalled read)."""
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(guard)
    assert not thread.is_alive(), f"{call} was still waiting after {guard} s"


@pytest.mark.parametrize(("kind", "thread"), [
    ("dataloader", False), ("stateful", True),
    *((("dataloader2", True),) if "dataloader2" in LOADERS else ())])
def test_a_killed_worker_raises_naming_worker_and_signal(kind: str, thread: bool,
                                                         ais_endpoint: str,
                                                         shards: tuple[str, list[str]]) -> None:
    """In the main thread, torch's SIGCHLD handler raises its RuntimeError wherever the main
    thread is (here: in the training step); in another thread, torch's periodic check of its
    workers raises it as the loop waits for a batch, and DataLoader2's own liveness checks do."""
    template, _ = shards
    loader = LOADERS[kind](template, url=ais_endpoint, num_workers=2, seed=0)
    killed: list[int] = []

    def on_item(i: int) -> None:
        if i == 20 and not killed:
            if kind == "dataloader2":
                process = loader.current.reading_service._worker_processes[1][0]
            else:
                process = loader.current._iterator._workers[1]
            os.kill(process.pid, signal.SIGKILL)  # as the OOM killer does
            killed.append(process.pid)
            if not thread:  # the training step goes on until the worker is gone: SIGCHLD
                os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)  # comes in the step
        time.sleep(0.002)

    error: BaseException | None = None
    try:
        if thread:
            error = _iterate_in_thread(loader, on_item, timeout=30)
        else:
            try:
                for i, _ in enumerate(loader):  # an epoch: bounded
                    on_item(i)
            except Exception as exc:
                error = exc
    finally:
        _returns(loader.shutdown)
    assert isinstance(error, aisio.WorkerDiedError), repr(error)
    assert "worker process 1" in str(error) and "SIGKILL" in str(error)
    assert error.pid == killed[0] and error.exitcode == -signal.SIGKILL


TRAINING = """
import ctypes, os, sys, threading, time
import aisio

def guards(data):
    # in the worker: its pid, aisio's thread watching the training process, and the signal
    # the kernel sends it when the thread that started it ends (PR_GET_PDEATHSIG: a setting of
    # each thread, read where the worker set it, its main thread; "-" in another thread)
    sig = ctypes.c_int(0)
    ctypes.CDLL(None).prctl(2, ctypes.byref(sig), 0, 0, 0)
    watch = any(t.name == "aisio-parent-watch" for t in threading.enumerate())
    main = threading.current_thread() is threading.main_thread()
    return f"{os.getpid()}:{int(watch)}:{sig.value if main else '-'}"

if __name__ == "__main__":
    template, endpoint, kind = sys.argv[1:4]
    make = {"dataloader2": aisio.webdataset_loader, "dataloader": aisio.webdataset_dataloader,
            "stateful": aisio.webdataset_stateful_loader,
            "nodes": aisio.webdataset_node_loader}[kind]
    extra = {"method": "process"} if kind == "nodes" else {}
    loader = make(template, url=endpoint, num_workers=2, seed=0, batch_size=2, collate=False,
                  tuple_fields=("__key__", "bin"),
                  decode=aisio.Decoder(None, custom={"bin": guards}), **extra)
    seen = set()
    for epoch in range(2):  # workers that served an epoch already: the second one
        for batch in loader:
            if epoch == 1 and len(seen) < 2:
                seen |= {g for _, g in batch}
                if len(seen) == 2:
                    print(" ".join(sorted(seen)), flush=True)
            if epoch == 1:
                time.sleep(0.05)  # a slow training step: the workers wait, prefetched
"""


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_workers_exit_when_the_training_process_is_killed(kind: str, ais_endpoint: str,
                                                          tmp_path: Path,
                                                          shards: tuple[str, list[str]]) -> None:
    """Every loader with worker processes (nodes: ``method="process"``): each worker runs aisio's
    watch on the training process, and asks the kernel for SIGKILL when the training process
    ends (not nodes' processes: a pool starts them from another thread); SIGKILL the training
    process in its second epoch, and its workers are gone (a 30 s hang guard: without aisio's
    guards torch's workers wait 5 s or more, DataLoader2's for ever)."""
    template, _ = shards
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(TRAINING))
    proc = subprocess.Popen([sys.executable, str(script), template, ais_endpoint, kind],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        workers = [w.split(":") for w in proc.stdout.readline().split()]
        pids = [int(pid) for pid, _, _ in workers]
        assert len(pids) == 2 and all(_alive(p) for p in pids) and proc.pid not in pids
        assert [watch for _, watch, _ in workers] == ["1", "1"], workers
        kernel = "0" if kind == "nodes" else str(int(signal.SIGKILL))
        assert all(sig in (kernel, "-") for _, _, sig in workers), workers
        if kind in ("dataloader", "stateful"):  # they decode in the worker's main thread
            assert [sig for _, _, sig in workers] == [kernel, kernel], workers
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = [p for p in pids if _alive(p)]
        for pid in left:  # do not leave them behind for the next tests
            os.kill(pid, signal.SIGKILL)
        assert not left, f"workers {left} outlived the training process"
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


# A stalled read lasts until the proxy stops (10 minutes at most), and the client waits as long
# (read_timeout): a shutdown or close that waits for a stalled read does not return before the
# 60 s hang guard of _returns; one that leaves the reads behind returns at once.
STALL = 600


# DataLoader2's workers prefetch far enough to reach the stalled shards before the break;
# torch's DataLoader (2 items a worker) does not, so there is nothing stalled to test there.
@needs_dataloader2
@pytest.mark.parametrize(("num_workers", "concurrency"), [(2, 1), (2, 4)])
def test_stopping_early_while_a_read_stalls_returns_fast(ais_endpoint: str, num_workers: int,
                                                         concurrency: int, bucket: Bucket,
                                                         shards: tuple[str, list[str]]) -> None:
    template, keys = shards
    # Shards 0-3 are read in full; 4-7 stall after 60 KB. Each worker reads two good shards
    # (worker 0 gets 0, 2, 4, 6; worker 1 gets 1, 3, 5, 7), then gets stuck in a read.
    stalled = tuple(f"/v1/objects/{bucket.name}/shard-{i:04d}.tar" for i in range(4, 8))
    good = sum(1 for k in keys if int(k[1:5]) < 4)
    with fault_proxy(ais_endpoint, stall_after=60_000, stall_seconds=STALL,
                     break_paths=stalled) as proxy:
        config = aisio.AISConfig(endpoint=proxy.endpoint, read_timeout=STALL)
        loader = default_loader(template, config=config, num_workers=num_workers,
                                concurrency=concurrency, shuffle_shards=False,
                                shuffle_buffer=0)  # a buffer would wait on the stalled reads
        try:
            for i, _ in enumerate(loader):
                if i == good - 15:  # fewer left than the prefetch buffers hold: never blocks
                    break
            deadline = time.monotonic() + 10
            while proxy.stalls < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert proxy.stalls >= 2  # reads are stuck (in both workers, or in the threads)
        finally:
            _returns(loader.shutdown)


def test_closing_a_pipe_while_its_threads_stall_returns_fast(
        ais_endpoint: str, bucket: Bucket, shards: tuple[str, list[str]]) -> None:
    template, keys = shards
    stalled = tuple(f"/v1/objects/{bucket.name}/shard-{i:04d}.tar" for i in range(4, 8))
    good = sum(1 for k in keys if int(k[1:5]) < 4)
    with fault_proxy(ais_endpoint, stall_after=60_000, stall_seconds=STALL,
                     break_paths=stalled) as proxy:
        # No retries: once the proxy stops, the abandoned fetch threads end at once.
        config = aisio.AISConfig(endpoint=proxy.endpoint, read_timeout=STALL, max_retries=0)
        samples = iter(aisio.webdataset_pipe(template, config=config, concurrency=4,
                                             shuffle_shards=False, shuffle_buffer=0))
        for _ in range(good - 5):
            next(samples)
        deadline = time.monotonic() + 10
        while proxy.stalls < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proxy.stalls >= 4  # the four fetch threads are stuck in a read
        _returns(samples.close)  # what breaking out of a loop over the pipe does
        assert any(t.name.startswith("aisio-get") for t in threading.enumerate())  # left behind
    deadline = time.monotonic() + 30  # the proxy stopped: the threads left behind end
    while any(t.name.startswith("aisio-get") for t in threading.enumerate()):
        assert time.monotonic() < deadline, "fetch threads outlived their connections"
        time.sleep(0.05)


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_a_worker_error_arrives_intact(name: str, ais_endpoint: str, ais_client: Client,
                                      bucket: Bucket) -> None:
    raw = tar_bytes([(f"k{i}.bin", b"x" * 700) for i in range(4)])[:2300]  # cut in k1.bin's data
    ais_client.put_object(AISPath(bucket, "truncated.tar"), raw)
    shard = bucket.uri("truncated.tar")
    loader = LOADERS[name](shard, url=ais_endpoint, num_workers=2)
    try:
        with pytest.raises(aisio.ShardFormatError) as info:
            list(loader)
    finally:
        loader.shutdown()
    error = info.value
    assert (error.url, error.offset, error.member) == (shard, 2300, "k1.bin")
    assert str(error).startswith(f"shard {shard}")
    assert "Caught" not in str(error)
    if name == "nodes":  # read in a thread of this process: the error keeps its own traceback
        assert "aisio/core/format/tar/" in "".join(traceback.format_tb(error.__traceback__))
        return
    # from a worker process: the worker's traceback is the error's cause, and a note says so
    cause = error.__cause__
    assert isinstance(cause, aisio.WorkerTraceback), repr(cause)
    assert "worker process" in str(cause) and "aisio/core/format/tar/" in str(cause)
    assert any("worker process" in note for note in getattr(error, "__notes__", []))
