"""No leaks: file descriptors and sockets after early stops and errors, memory across epochs,
and a DataLoader2 shutdown that returns."""

from __future__ import annotations

import gc
import multiprocessing.process
import multiprocessing.queues
import os
import threading
from pathlib import Path
from typing import Any

import pytest

import aisio
from aisio.core.store.client import Client
from aisio.core.store.urls import Bucket
from tests.conftest import default_loader, write_shards


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _rss_mb(pid: int | None = None) -> float:
    with open(f"/proc/{pid or 'self'}/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.fixture
def shards(ais_client: Client, bucket: Bucket, tmp_path: Path) -> tuple[str, list[str]]:
    return write_shards(ais_client, bucket, tmp_path, shards=4, per_shard=50, payload=4000)


def test_no_fd_growth_after_early_stops_and_errors(ais_endpoint: str,
                                                   shards: tuple[str, list[str]]) -> None:
    template, _ = shards

    def stop_early() -> None:
        pipe = aisio.AISFileLoader(template, url=ais_endpoint).ais_parse_webdataset()
        for i, _ in enumerate(pipe):
            if i == 3:
                break

    def fail_midway() -> None:
        with pytest.raises(aisio.ObjectNotFoundError):
            list(aisio.AISFileLoader([template, template.replace("{0000..0003}", "missing")],
                                     url=ais_endpoint).ais_parse_webdataset())

    for round_ in (stop_early, fail_midway):
        round_()  # warm the connection pool
        gc.collect()
        before = _fds()
        for _ in range(20):
            round_()
        gc.collect()
        assert _fds() <= before + 2, round_.__name__


@pytest.mark.torchdata
def test_memory_is_flat_across_epochs_and_shutdown_returns(
        ais_endpoint: str, shards: tuple[str, list[str]]) -> None:
    template, keys = shards
    loader = default_loader(template, url=ais_endpoint, num_workers=2, seed=0,
                                     shuffle_buffer=50)
    rss = []
    try:
        for epoch in range(16):
            assert sum(1 for _ in loader) == len(keys)
            if epoch in (3, 15):
                gc.collect()
                rss.append(_rss_mb())
    finally:
        done = threading.Event()
        threading.Thread(target=lambda: (loader.shutdown(), done.set()), daemon=True).start()
        assert done.wait(30), "DataLoader2 shutdown hung"
    assert rss[1] - rss[0] < 20, f"main-process RSS grew {rss[1] - rss[0]:.1f} MB in 12 epochs"


@pytest.mark.torchdata
def test_shutdown_after_an_early_break_returns(ais_endpoint: str, monkeypatch: pytest.MonkeyPatch,
                                               shards: tuple[str, list[str]]) -> None:
    """README.md: "returns within about a second" (workers get 1 s, then are terminated).
    Checked by what leaving the loop and shutdown() wait on, not by a clock: every join of a
    worker process and every blocking get from a multiprocessing queue has a timeout, none
    longer than torch's own status-check interval (5 s), so neither a read in a worker nor
    torchdata's unbounded answer wait and 20 s joins can hold the training process."""
    template, _ = shards
    loader = default_loader(template, url=ais_endpoint, num_workers=2)
    waits: list[tuple[str, float | None]] = []
    join, get = multiprocessing.process.BaseProcess.join, multiprocessing.queues.Queue.get

    def recorded_join(self: Any, timeout: float | None = None) -> None:
        waits.append(("join", timeout))
        join(self, timeout)

    def recorded_get(self: Any, block: bool = True, timeout: float | None = None) -> Any:
        if block:
            waits.append(("get", timeout))
        return get(self, block, timeout)

    for i, _ in enumerate(loader):
        if i == 5:  # leaving the loop closes the epoch's workers already
            monkeypatch.setattr(multiprocessing.process.BaseProcess, "join", recorded_join)
            monkeypatch.setattr(multiprocessing.queues.Queue, "get", recorded_get)
            break
    done = threading.Event()
    threading.Thread(target=lambda: (loader.shutdown(), done.set()), daemon=True).start()
    assert done.wait(60), "shutdown() hung"  # a hang guard, not a measure
    monkeypatch.undo()
    assert any(kind == "join" for kind, _ in waits), waits  # the workers were joined
    unbounded = [(kind, timeout) for kind, timeout in waits if timeout is None or timeout > 5]
    assert not unbounded, waits
