"""A worker's error reaches the training process intact, on every loader, over a MemoryStore
(the workers' faults that need a cluster or a killed process: tests/integration/runtime)."""

from __future__ import annotations

import traceback

import pytest

import aisio
from aisio.core.store.memory import MemoryStore
from aisio.core.store.urls import AISPath, Bucket
from tests.conftest import LOADERS, tar_bytes


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_a_worker_error_arrives_intact(name: str, store: MemoryStore, bucket: Bucket) -> None:
    raw = tar_bytes([(f"k{i}.bin", b"x" * 700) for i in range(4)])[:2300]  # cut in k1.bin's data
    store.put(AISPath(bucket, "truncated.tar"), raw)
    shard = bucket.uri("truncated.tar")
    loader = LOADERS[name](shard, store=store, num_workers=2)
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
