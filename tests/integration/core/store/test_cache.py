"""The shard cache against a real cluster: never stale, never damaged, never fatal, keyed by
object (not by host and port), and whole shards however long their end-of-archive tail."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import aisio
from aisio.core.store.client import Client
from aisio.core.store.urls import AISPath, Bucket, bucket_url
from tests.conftest import tar_bytes
from tests.faultproxy import fault_proxy


def _shard(tag: bytes, count: int = 4) -> bytes:
    return tar_bytes([(f"k{i}.bin", tag * 700) for i in range(count)])


def _read(bucket: Bucket, endpoint: str, cache: aisio.ShardCache,
          on_error: str = "raise") -> list[tuple[str, bytes]]:
    pipe = aisio.AISFileLoader(bucket.uri("s.tar"), url=endpoint, cache=cache,
                               on_error=on_error).ais_parse_webdataset(on_error=on_error)
    return [(s["__key__"], s["bin"]) for s in pipe]


def _entries(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.shard"))


@pytest.fixture
def cache(tmp_path: Path) -> aisio.ShardCache:
    return aisio.ShardCache(tmp_path / "cache", max_bytes=10**9)


def test_an_overwritten_object_is_not_served_stale(ais_endpoint: str, ais_client: Client,
                                                   bucket: Bucket,
                                                   cache: aisio.ShardCache) -> None:
    ais_client.put_object(AISPath(bucket, "s.tar"), _shard(b"a"))
    assert {data for _, data in _read(bucket, ais_endpoint, cache)} == {b"a" * 700}
    assert len(_entries(cache.directory)) == 1
    ais_client.put_object(AISPath(bucket, "s.tar"), _shard(b"b"))  # same size, new bytes
    assert {data for _, data in _read(bucket, ais_endpoint, cache)} == {b"b" * 700}
    assert {data for _, data in _read(bucket, ais_endpoint, cache)} == {b"b" * 700}


@pytest.mark.parametrize("where", ["member data", "member header"])
def test_a_damaged_entry_is_dropped_and_read_again(ais_endpoint: str, ais_client: Client,
                                                   bucket: Bucket, cache: aisio.ShardCache,
                                                   where: str) -> None:
    ais_client.put_object(AISPath(bucket, "s.tar"), _shard(b"a"))
    first = _read(bucket, ais_endpoint, cache)
    (entry,) = _entries(cache.directory)
    raw = bytearray(entry.read_bytes())
    offset = 2048 + 100 if where == "member data" else 1536  # k1.bin's data / its header
    raw[offset : offset + 20] = b"\xff" * 20
    entry.write_bytes(bytes(raw))
    assert _read(bucket, ais_endpoint, cache) == first  # raises ShardFormatError if served
    (entry,) = _entries(cache.directory)  # written again, whole
    assert _read(bucket, ais_endpoint, cache) == first


def test_a_cluster_on_another_port_hits_the_same_entries(ais_endpoint: str, ais_client: Client,
                                                         bucket: Bucket,
                                                         cache: aisio.ShardCache) -> None:
    ais_client.put_object(AISPath(bucket, "s.tar"), _shard(b"a"))
    first = _read(bucket, ais_endpoint, cache)
    with fault_proxy(ais_endpoint) as moved:  # the same cluster behind another port
        assert _read(bucket, moved.endpoint, cache) == first
        assert moved.object_gets == 0  # served from the cache (one HEAD for the version)


def test_a_long_tail_after_the_end_of_archive_is_still_cached(
        ais_endpoint: str, ais_client: Client, bucket: Bucket, cache: aisio.ShardCache) -> None:
    raw = tar_bytes([(f"k{i}.bin", b"a" * 700) for i in range(4)], tail=b"\0" * (3 << 20))
    ais_client.put_object(AISPath(bucket, "s.tar"), raw)
    first = _read(bucket, ais_endpoint, cache)
    assert len(first) == 4
    (entry,) = _entries(cache.directory)
    assert entry.stat().st_size >= len(raw)
    with fault_proxy(ais_endpoint) as proxy:
        assert _read(bucket, proxy.endpoint, cache) == first
        assert proxy.object_gets == 0


@pytest.fixture
def tiny_mount(tmp_path: Path) -> Iterator[Path]:
    """A 64 KB tmpfs (root only): the cache's filesystem fills up at once."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
            capture_output=True, check=False).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_a_cache_that_cannot_write_degrades_to_uncached_reads(
        ais_endpoint: str, ais_client: Client, bucket: Bucket, tiny_mount: Path,
        fault: str) -> None:
    for i in range(3):  # each ~200 KB: more than the whole filesystem
        ais_client.put_object(AISPath(bucket, f"s{i}.tar"), _shard(bytes([65 + i]), count=250))
    cache = aisio.ShardCache(tiny_mount / "cache", max_bytes=10**9)
    if fault == "read-only":
        subprocess.run(["mount", "-o", "remount,ro", str(tiny_mount)], check=True)
    names = [bucket.uri(f"s{i}.tar") for i in range(3)]
    for concurrency in (1, 2):
        with pytest.warns(RuntimeWarning, match="cannot write") as caught:
            pipe = aisio.AISFileLoader(names, url=ais_endpoint, cache=cache, on_error="skip",
                                       concurrency=concurrency)
            samples = list(pipe.ais_parse_webdataset(on_error="skip"))
        assert len(samples) == 3 * 250
        assert len([w for w in caught if "cannot write" in str(w.message)]) == 1
        cache = aisio.ShardCache(tiny_mount / "cache", max_bytes=10**9)  # warns again, once


def test_objects_that_name_no_version_nor_checksum_are_not_cached(
        ais_endpoint: str, ais_client: Client, bucket: Bucket, cache: aisio.ShardCache) -> None:
    # Versioning and checksums off: neither HEAD nor GET names the content, so an entry could
    # never be told from a newer object of the same size.
    ais_client.request("PATCH", bucket_url(ais_client.endpoint, bucket), name=bucket.uri(),
                       what="setting props", json={"action": "set-bprops", "value": {
                           "versioning": {"enabled": False}, "checksum": {"type": "none"}}}
                       ).close()
    ais_client.put_object(AISPath(bucket, "s.tar"), _shard(b"a"))
    assert ais_client.object_version(AISPath(bucket, "s.tar")) is None
    with fault_proxy(ais_endpoint) as proxy:
        first = _read(bucket, proxy.endpoint, cache)
        assert _read(bucket, proxy.endpoint, cache) == first
        assert proxy.object_gets == 2  # each pass read the object from the cluster
    assert len(first) == 4
    assert _entries(cache.directory) == []


def test_samples_name_their_cached_shard_as_webdataset_does(
        ais_endpoint: str, ais_client: Client, bucket: Bucket, cache: aisio.ShardCache) -> None:
    import tarfile

    ais_client.put_object(AISPath(bucket, "s.tar"), _shard(b"a"))
    pipe = aisio.webdataset_pipe(bucket.uri("s.tar"), url=ais_endpoint, cache=cache,
                                 shuffle_buffer=0)
    first = list(pipe)  # read from the cluster, into the cache
    (entry,) = _entries(cache.directory)
    again = list(pipe)  # from the cache
    assert {s["__local_path__"] for s in first} == {s["__local_path__"] for s in again} == {
        str(entry)}
    with tarfile.open(entry) as tar:  # a tar, as webdataset's cached shards are
        assert [m.name for m in tar.getmembers()] == [f"k{i}.bin" for i in range(4)]
    uncached = list(aisio.webdataset_pipe(bucket.uri("s.tar"), url=ais_endpoint))
    assert all("__local_path__" not in s for s in uncached)
