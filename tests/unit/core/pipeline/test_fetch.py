"""Tests for aisio.core.pipeline.fetch over a MemoryStore: the fetcher reads whatever store it
is given, in every mode (one stream at a time, threads, Get-Batch), in order, with the error
policy; a cache wraps the store; an ETL's resumed shard is checked against its object's
version. (Against a real cluster: tests/integration/datapipes/test_pipes.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import aisio
from aisio.core.epochs.progress import ShardTask
from aisio.core.faults.policy import ErrorPolicy
from aisio.core.pipeline.fetch import AheadDepth, Fetcher
from aisio.core.store.memory import MemoryStore
from aisio.core.store.sources import ObjectRef
from aisio.core.store.urls import ETL, parse_ais_url

CONFIG = aisio.AISConfig(endpoint="http://127.0.0.1:9")  # never asked: the store answers
NAMES = [f"ais://b/o-{i}" for i in range(7)]


@pytest.fixture
def memory() -> MemoryStore:
    return MemoryStore({"ais://b": {f"o-{i}": f"object {i}".encode() for i in range(7)}})


def fetched(fetcher: Fetcher, items: list[Any]) -> list[tuple[str, bytes]]:
    """Reads each stream to its end, as a parser does: until a read returns no bytes."""
    return [(key if isinstance(key, str) else key.uri(),
             b"".join(iter(lambda stream=stream: stream.read(4096), b"")))
            for key, stream in fetcher.streams(items)]


@pytest.mark.parametrize("mode", [{}, {"concurrency": 3}, {"batch_get": 3}])
def test_every_mode_reads_the_store_in_order_and_skips_a_missing_object(
        memory: MemoryStore, mode: dict[str, int]) -> None:
    memory.delete("ais://b/o-4")
    report = aisio.ErrorReport()
    fetcher = Fetcher(CONFIG, policy=ErrorPolicy("skip", report), store=memory, **mode)
    assert fetched(fetcher, NAMES) == [(n, f"object {n[-1]}".encode()) for n in NAMES
                                       if n != "ais://b/o-4"]
    assert [r["shard"] for r in report.records()] == ["ais://b/o-4"]
    with pytest.raises(aisio.ObjectNotFoundError, match="o-4"):
        fetched(Fetcher(CONFIG, store=memory, **mode), NAMES)


def test_get_batch_groups_a_buckets_objects_read_from_byte_zero(memory: MemoryStore) -> None:
    """Batches of at most 3 consecutive objects of one bucket: a task resumed at a byte is
    read alone, from there, and so is another bucket's object between them."""
    memory.put("ais://c/o-0", b"other bucket")
    tasks: list[Any] = [*NAMES[:4], ShardTask(4, ObjectRef(parse_ais_url(NAMES[4])), start=3),
                        "ais://c/o-0", *NAMES[5:]]
    calls: list[list[str]] = []
    get_batch = memory.get_batch

    def recorded(refs: Any) -> Any:
        calls.append([ref.uri() for ref in refs])
        return get_batch(refs)

    memory.get_batch = recorded  # type: ignore[method-assign]
    got = fetched(Fetcher(CONFIG, batch_get=3, store=memory), tasks)
    assert got[4] == (NAMES[4], b"ect 4") and got[5] == ("ais://c/o-0", b"other bucket")
    assert [uri for uri, _ in got] == [*NAMES[:5], "ais://c/o-0", *NAMES[5:]]
    assert calls == [NAMES[:3], NAMES[5:]]  # o-3 alone (a batch of one is a GET)


def test_a_refused_get_batch_falls_back_to_one_read_each(memory: MemoryStore) -> None:
    def refused(refs: Any) -> Any:
        raise aisio.AISRequestError("Get-Batch is not supported", url="ais://b", status=501)
        yield  # a generator, as a store's is

    memory.get_batch = refused  # type: ignore[method-assign]
    assert fetched(Fetcher(CONFIG, batch_get=4, store=memory), NAMES) == [
        (n, f"object {n[-1]}".encode()) for n in NAMES]


def test_a_cache_wraps_the_store(memory: MemoryStore, tmp_path: Path) -> None:
    fetcher = Fetcher(CONFIG, cache=aisio.ShardCache(tmp_path, max_bytes=1 << 20), store=memory)
    for _ in range(2):
        assert fetched(fetcher, NAMES[:2]) == [(n, f"object {n[-1]}".encode())
                                               for n in NAMES[:2]]
    assert memory.opens == [(NAMES[0], 0), (NAMES[1], 0)]  # the second epoch: from the cache


def test_a_resumed_etl_shard_is_checked_against_its_objects_version(
        memory: MemoryStore) -> None:
    """An ETL's answer names no version; a cached one was kept under its object's, which a
    resume expects: the fetcher asks the store for it before reading."""
    opened: list[ObjectRef] = []
    plain = memory.open

    def through_etl(ref: ObjectRef, *, start: int = 0, expect: str | None = None) -> Any:
        opened.append(ref)
        assert expect is None  # checked already, against the object's version
        return plain(ObjectRef(ref.path), start=start)

    fetcher = Fetcher(CONFIG, etl=ETL("upper"), store=memory)
    version = memory.version(ObjectRef(parse_ais_url(NAMES[0])))
    memory.open = through_etl  # type: ignore[method-assign]
    assert fetcher.open(ObjectRef(parse_ais_url(NAMES[0])), start=2, expect=version).read() == (
        b"ject 0")
    assert opened[0].etl == ETL("upper")  # the fetcher's ETL, given to the store with the ref
    memory.put(NAMES[0], b"new")
    with pytest.raises(aisio.ObjectChangedError, match="transformed samples"):
        fetcher.open(ObjectRef(parse_ais_url(NAMES[0])), start=2, expect=version)


# ---- how many Get-Batch requests are in flight (AheadDepth) ----------------------------------
def test_two_groups_ahead_before_anything_is_measured() -> None:
    assert AheadDepth().now == 2


@pytest.mark.parametrize(("fetch_s", "use_s", "depth"), [
    (0.001, 0.010, 1),   # the request is quick beside its use (loopback): one ahead is enough
    (0.030, 0.010, 3),   # a slow request (a round trip of milliseconds): as many as it covers
    (0.021, 0.010, 3),   # rounded up
    (1.000, 0.010, 4),   # never more than MOST
    (0.010, 0.0, 4),     # a group used in no time: as many as allowed
])
def test_the_depth_covers_a_request_with_the_time_groups_are_used(fetch_s: float,
                                                                   use_s: float,
                                                                   depth: int) -> None:
    ahead = AheadDepth()
    ahead.learn(fetch_s, use_s, nbytes=1 << 20)
    assert ahead.now == depth


def test_big_groups_keep_fewer_ahead() -> None:
    ahead = AheadDepth()
    ahead.learn(1.0, 0.01, nbytes=AheadDepth.BYTES // 2)
    assert ahead.now == 2
    ahead.learn(1.0, 0.01, nbytes=AheadDepth.BYTES * 3)
    assert ahead.now == 1  # never none: the next group is always asked for
