"""Tests for aisio.core.store.cache: keys (object and ETL, never host and port), and reads
through a scripted transport: a whole shard is kept and served until the object changes; a
partial read, a damaged entry or an unversioned object is never served; the least recently used
go first; a cache that cannot write warns once and reads go on.

Against a real cluster: tests/integration/core/store/test_cache.py."""

from __future__ import annotations

import os
import pickle
import random
from pathlib import Path

import pytest

from aisio import ETL, ShardCache
from aisio.core.store.client import Client
from aisio.core.store.urls import AISPath, Bucket, object_url
from tests.unit.core.store.scripted import PROXY, Step, answer, scripted_client, serve


def test_keys_name_object_and_etl_not_host_and_port(tmp_path: Path) -> None:
    cache = ShardCache(tmp_path, max_bytes=1)
    path = AISPath(Bucket("b"), "s.tar")
    here, moved = object_url("http://127.0.0.1:1", path), object_url("http://127.0.0.1:2", path)
    assert cache.path_for(here, "v=1") == cache.path_for(moved, "v=1")
    assert cache.path_for(here, "v=1") != cache.path_for(here, "v=2")
    etl = object_url("http://127.0.0.1:1", path, ETL("resize", {"w": 64}))
    other = object_url("http://127.0.0.1:1", path, ETL("resize", {"w": 32}))
    assert len({cache.path_for(u, "v=1") for u in (here, etl, other)}) == 3


# ---- reads through a scripted transport (tests/unit/core/store/scripted.py) -----------------

OBJECT = AISPath(Bucket("b"), "train/shard-0001.tar")
URL = object_url(PROXY, OBJECT)
DATA = random.Random(1).randbytes(5000)
VERSION = "v=1;xxh=xxh-1;size=5000"  # what names DATA's content, as head() and serve() say


def head(version: str | None = "1", checksum: str | None = "xxh-1", size: int = len(DATA)
         ) -> Step:
    """Returns the answer to a HEAD of the object: its version, checksum and size."""
    headers = {"Ais-Version": version, "Ais-Checksum-Value": checksum, "Ais-Size": str(size)}
    return answer(200, headers={k: v for k, v in headers.items() if v is not None})


def fill(cache: ShardCache, client: Client, *, upto: int | None = None) -> bytes:
    """Reads the object through ``cache.filling`` (to the end, or ``upto`` bytes) and closes."""
    tee = cache.filling(URL, client.open(URL, name=OBJECT.uri()))
    # to the end as a reader meets it: a read that returns b""
    got = b"".join(iter(lambda: tee.read(4096), b"")) if upto is None else tee.read(upto)
    tee.close()
    return got


def test_a_shard_read_to_the_end_is_served_from_the_cache_until_it_changes(
        tmp_path: Path) -> None:
    cache = ShardCache(tmp_path, max_bytes=1 << 20)
    client, transport = scripted_client(head(), serve(DATA), head(), head(version="2"))
    assert cache.open(URL, client) is None  # a miss: read it from the cluster
    assert fill(cache, client) == DATA
    hit = cache.open(URL, client)
    assert hit is not None and hit.read() == DATA and hit.version == VERSION
    hit.close()
    assert cache.open(URL, client) is None  # overwritten: never served stale
    assert [s.method for s in transport.seen] == ["HEAD", "GET", "HEAD", "HEAD"]


def test_a_shard_not_read_to_the_end_is_not_kept(tmp_path: Path) -> None:
    cache = ShardCache(tmp_path, max_bytes=1 << 20)
    client, _ = scripted_client(serve(DATA), head())
    assert fill(cache, client, upto=1000) == DATA[:1000]
    assert cache.size() == 0 and list(tmp_path.iterdir()) == []
    assert cache.open(URL, client) is None


def test_a_damaged_entry_is_dropped_and_read_again(tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    cache = ShardCache(tmp_path, max_bytes=1 << 20)
    client, _ = scripted_client(serve(DATA), head())
    fill(cache, client)
    (entry,) = tmp_path.glob("*.shard")
    raw = bytearray(entry.read_bytes())
    raw[100] ^= 0xFF  # one flipped bit of the shard's bytes
    entry.write_bytes(bytes(raw))
    assert cache.open(URL, client) is None
    assert not entry.exists() and "is damaged" in caplog.text


def test_an_object_that_names_no_version_nor_checksum_is_never_cached(tmp_path: Path) -> None:
    cache = ShardCache(tmp_path, max_bytes=1 << 20)
    client, transport = scripted_client(serve(DATA, version=None, checksum=None),
                                        head(version=None, checksum=None))
    assert fill(cache, client) == DATA
    cache.store(URL, DATA, None)
    assert cache.size() == 0 and cache.open(URL, client) is None
    assert len(transport.seen) == 2


def test_the_least_recently_used_shards_are_evicted_first(tmp_path: Path) -> None:
    entry = len(DATA) + 16  # the bytes and the checksum trailer
    cache = ShardCache(tmp_path, max_bytes=3 * entry)
    urls = {name: object_url(PROXY, AISPath(Bucket("b"), name)) for name in "abcd"}
    for when, name in enumerate("abc", start=1):
        cache.store(urls[name], DATA, VERSION)
        os.utime(cache.path_for(urls[name], VERSION), (when, when))  # a: oldest, c: newest
    client, _ = scripted_client(head())
    hit = cache.open(urls["a"], client)  # reading a makes it the most recently used
    assert hit is not None
    hit.close()
    assert os.stat(cache.path_for(urls["a"], VERSION)).st_mtime > 3
    cache.store(urls["d"], DATA, VERSION)  # one too many: b goes
    kept = {name for name, url in urls.items() if cache.path_for(url, VERSION).exists()}
    assert kept == {"a", "c", "d"} and cache.size() <= cache.max_bytes


def test_a_cache_that_cannot_write_warns_once_and_reads_go_on(tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-directory"
    blocked.write_bytes(b"")
    with pytest.warns(RuntimeWarning, match="cannot write"):
        cache = ShardCache(blocked / "cache", max_bytes=1 << 20)
    client, _ = scripted_client(serve(DATA))
    source = client.open(URL, name=OBJECT.uri())
    assert cache.filling(URL, source) is source  # reads go on, uncached, with no more warnings
    assert source.read() == DATA
    revived = pickle.loads(pickle.dumps(cache))  # a worker's copy tries to write again
    assert revived._failed is False and revived.max_bytes == cache.max_bytes
