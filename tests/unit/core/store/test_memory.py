"""Tests for the byte-source seam (aisio.core.store.protocol): MemoryStore behaves where a
loader can tell as an AIStore bucket does (offsets, versions, a changed object refused, listings
in pages, typed errors with their "did you mean", Get-Batch's None for a missing object, injected
faults); CachedStore keeps whole shards of any store; each store is an ObjectStore and pickles.

AIStore's own adapter (AISStore) is its client, tested through a scripted transport
(test_client.py, test_batch.py, test_cache.py)."""

from __future__ import annotations

import itertools
import pickle
from pathlib import Path

import pytest

import aisio
from aisio.core.store.ais import AISStore
from aisio.core.store.cache import CachedStore
from aisio.core.store.client import content_id
from aisio.core.store.memory import MemoryStore
from aisio.core.store.protocol import ObjectStore
from aisio.core.store.sources import ObjectRef, check_template, shard_list
from aisio.core.store.urls import ETL, AISPath, Bucket, parse_ais_url

DATA = bytes(range(256)) * 4


def ref(name: str) -> ObjectRef:
    return ObjectRef(parse_ais_url(name))


@pytest.fixture
def memory() -> MemoryStore:
    return MemoryStore({"ais://b": {"s-0.tar": DATA, "s-1.tar": b"one", "x/y": b"z"}})


def test_every_store_is_an_object_store_and_pickles(memory: MemoryStore,
                                                    tmp_path: Path) -> None:
    stores = [memory, AISStore(aisio.AISConfig(endpoint="http://127.0.0.1:9")),
              aisio.ShardCache(tmp_path, max_bytes=1 << 20).over(memory)]
    for store in stores:
        assert isinstance(store, ObjectStore) and isinstance(store, aisio.ObjectStore)
        assert type(pickle.loads(pickle.dumps(store))) is type(store)
    assert not isinstance(object(), ObjectStore)
    copy = pickle.loads(pickle.dumps(memory))
    assert copy.read("ais://b/s-0.tar") == DATA


def test_a_stream_starts_at_its_byte_and_names_its_version_and_size(memory: MemoryStore) -> None:
    stream = memory.open(ref("ais://b/s-0.tar"), start=1000)
    assert stream.read(10) == DATA[1000:1010] and stream.read() == DATA[1010:]
    assert stream.read(5) == b""
    assert stream.size == len(DATA) and stream.version == memory.version(ref("ais://b/s-0.tar"))
    assert memory.opens == [("ais://b/s-0.tar", 1000)]


def test_a_new_version_is_refused_where_the_old_one_was_expected(memory: MemoryStore) -> None:
    old = content_id(memory.open(ref("ais://b/s-1.tar")))
    assert old is not None and old.endswith("size=3")
    assert memory.open(ref("ais://b/s-1.tar"), start=1, expect=old).read() == b"ne"
    memory.put("ais://b/s-1.tar", b"one")  # the same bytes, written again: a new version
    with pytest.raises(aisio.ObjectChangedError, match=r"s-1\.tar changed since the checkpoint"):
        memory.open(ref("ais://b/s-1.tar"), start=1, expect=old)


def test_an_unversioned_store_names_only_the_size() -> None:
    memory = MemoryStore({"b": {"o": b"abc"}}, versioned=False)
    assert memory.version(ref("ais://b/o")) is None
    assert content_id(memory.open(ref("ais://b/o"))) == "size=3"


def test_missing_names_raise_typed_errors_with_what_was_meant(memory: MemoryStore) -> None:
    with pytest.raises(aisio.BucketNotFoundError, match=r"did you mean ais://b/"):
        memory.open(ref("ais://bb/s-0.tar"))
    with pytest.raises(aisio.ObjectNotFoundError, match=r"did you mean the prefix ais://b/x/"
                       ) as info:
        memory.open(ref("ais://b/x"))
    assert info.value.missing == ("ais://b/x",)
    with pytest.raises(aisio.ObjectNotFoundError, match=r"did you mean the template "
                       r"ais://b/s-\{0..1\}\.tar"):
        memory.version(ref("ais://b/s-"))
    with pytest.raises(aisio.ETLNotFoundError, match="does not run on a MemoryStore"):
        memory.open(ObjectRef(AISPath(Bucket("b"), "s-0.tar"), etl=ETL("resize")))


def test_listings_come_in_name_order_a_page_at_a_time(memory: MemoryStore) -> None:
    pages = list(memory.list_pages(Bucket("b"), "s-", page_size=1))
    assert [[e["name"] for e in page] for page in pages] == [["s-0.tar"], ["s-1.tar"]]
    assert list(memory.list_pages(Bucket("b"), "none")) == [[]]
    assert [r.uri() for r in shard_list("ais://b/", memory)] == [
        "ais://b/s-0.tar", "ais://b/s-1.tar", "ais://b/x/y"]
    with pytest.raises(aisio.ObjectNotFoundError, match=r"s-2\.tar.*did you mean ais://b/s-"
                       r"\{0..1\}\.tar"):
        check_template(memory, parse_ais_url("ais://b/s-{0..2}.tar"))


def test_get_batch_gives_none_for_a_missing_object(memory: MemoryStore) -> None:
    got = list(memory.get_batch([ref("ais://b/s-1.tar"), ref("ais://b/gone"),
                                 ref("ais://b/x/y")]))
    assert got == [b"one", None, b"z"]


def test_injected_faults_raise_or_end_the_stream_at_their_byte(memory: MemoryStore) -> None:
    error = aisio.AISConnectionError("reset", url="ais://b/s-0.tar", offset=100)
    memory.fail("ais://b/s-0.tar", at=100, error=error, times=1)
    stream = memory.open(ref("ais://b/s-0.tar"), start=40)
    assert stream.read(1000) == DATA[40:100]
    with pytest.raises(aisio.AISConnectionError) as info:
        stream.read(1000)
    assert info.value is error
    assert memory.open(ref("ais://b/s-0.tar")).read() == DATA  # the fault was used up
    memory.fail("ais://b/s-0.tar", at=10)  # a truncated read: the stream ends early
    assert b"".join(iter(memory.open(ref("ais://b/s-0.tar")).read, b"")) == DATA[:10]
    memory.fail("ais://b/s-1.tar", error=aisio.ObjectNotFoundError("gone", url="x"))
    with pytest.raises(aisio.ObjectNotFoundError, match="gone"):
        memory.open(ref("ais://b/s-1.tar"))


# ---- a ShardCache over any store (CachedStore) ------------------------------------------------

def read_all(stream: object) -> bytes:
    return b"".join(iter(stream.read, b""))  # type: ignore[attr-defined]


def test_a_cached_store_serves_a_whole_shard_until_it_changes(memory: MemoryStore,
                                                              tmp_path: Path) -> None:
    cache = aisio.ShardCache(tmp_path, max_bytes=1 << 20)
    store = cache.over(memory)
    assert isinstance(store, CachedStore)
    shard = ref("ais://b/s-0.tar")
    partial = store.open(shard)
    partial.read(10)
    partial.close()  # not read to the end: never kept
    assert cache.size() == 0
    assert read_all(store.open(shard)) == DATA  # read to the end: kept
    memory.opens.clear()
    hit = store.open(shard)
    assert read_all(hit) == DATA and memory.opens == []  # from the cache
    assert hit.version == memory.version(shard) and hit.local_path  # type: ignore[attr-defined]
    assert read_all(store.open(shard, start=7)) == DATA[7:]  # another byte: from the store
    memory.put("ais://b/s-0.tar", DATA[::-1])
    memory.opens.clear()
    assert read_all(store.open(shard)) == DATA[::-1] and memory.opens  # changed: never stale


def test_a_cached_store_keeps_nothing_that_names_no_version(tmp_path: Path) -> None:
    memory = MemoryStore({"b": {"o": DATA}}, versioned=False)
    cache = aisio.ShardCache(tmp_path, max_bytes=1 << 20)
    for _ in range(2):
        assert read_all(cache.over(memory).open(ref("ais://b/o"))) == DATA
    assert cache.size() == 0 and len(memory.opens) == 2


def test_a_cached_store_passes_listings_and_batches_through(memory: MemoryStore,
                                                            tmp_path: Path) -> None:
    store = aisio.ShardCache(tmp_path, max_bytes=1 << 20).over(memory)
    assert list(store.list_pages(Bucket("b"), "x")) == [[{"name": "x/y", "size": 1}]]
    assert store.bucket_names() == ["b"]
    assert list(store.get_batch([ref("ais://b/x/y")])) == [b"z"]
    assert list(itertools.islice(store.get_batch([ref("ais://b/nope")]), 1)) == [None]
