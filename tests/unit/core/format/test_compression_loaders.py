"""Compressed shards (.tar.gz, .tgz, .tar.bz2, .tar.xz) read through the pipes, over a
MemoryStore (the formats alone: tests/unit/core/format/test_compression.py)."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import random
from pathlib import Path

import pytest
import webdataset as wds

import aisio
from aisio.core.store.memory import MemoryStore
from aisio.core.store.urls import AISPath, Bucket
from tests.conftest import sample_keys


def shard(index: int, n: int = 20) -> bytes:
    rng = random.Random(index)
    out = io.BytesIO()
    with wds.TarWriter(out) as sink:
        for i in range(n):
            sink.write({"__key__": f"s{index}/{i:04d}", "bin": rng.randbytes(3000), "cls": i % 7})
    return out.getvalue()


PACK = {
    "tar.gz": lambda raw: gzip.compress(raw),
    "tgz": lambda raw: gzip.compress(raw),
    "tar.bz2": bz2.compress,
    "tar.xz": lzma.compress,
}


@pytest.mark.parametrize("suffix", sorted(PACK))
def test_compressed_shards_read_through_loader_and_parser(
        store: MemoryStore, bucket: Bucket, suffix: str) -> None:
    expected = []
    for i in range(3):
        raw = shard(i)
        store.put(AISPath(bucket, f"train-{i}.{suffix}"), PACK[suffix](raw))
        expected += [f"s{i}/{k:04d}" for k in range(20)]
    pipe = aisio.AISFileLoader(bucket.uri(f"train-{{0..2}}.{suffix}"), store=store
                               ).ais_parse_webdataset()
    samples = list(pipe)
    assert sample_keys(samples) == expected
    assert samples[0]["bin"] == wds_first_bin(shard(0))


def wds_first_bin(raw: bytes) -> bytes:
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        member = next(m for m in tar if m.name.endswith(".bin"))
        handle = tar.extractfile(member)
        assert handle is not None
        return handle.read()


def test_compressed_shards_in_the_full_pipeline_with_cache(
        store: MemoryStore, bucket: Bucket, tmp_path: object) -> None:
    store.put(AISPath(bucket, "a.tar.gz"), gzip.compress(shard(0)))
    store.put(AISPath(bucket, "b.tar"), shard(1))  # plain, beside it
    cache = aisio.ShardCache(str(tmp_path), max_bytes=1 << 30)
    pipe = aisio.webdataset_pipe([bucket.uri("a.tar.gz"), bucket.uri("b.tar")], store=store,
                                 decode="pil", tuple_fields=("bin", "cls"), shuffle_shards=False,
                                 shuffle_buffer=0, cache=cache)
    first = list(pipe)
    assert len(list(Path(tmp_path).glob("*.shard"))) == 2  # both shards, as they are stored
    store.opens.clear()  # counts the reads of the second pass
    pipe = aisio.webdataset_pipe([bucket.uri("a.tar.gz"), bucket.uri("b.tar")], store=store,
                                 decode="pil", tuple_fields=("bin", "cls"), shuffle_shards=False,
                                 shuffle_buffer=0, cache=cache)
    again = list(pipe)  # from the cache: the compressed bytes, decompressed again
    assert store.opens == []  # only the versions were asked: no byte from the store
    assert len(first) == 40 and first == again


def test_bad_compressed_shards_are_typed_and_skippable(
        store: MemoryStore, bucket: Bucket) -> None:
    packed = gzip.compress(shard(0, n=40))
    store.put(AISPath(bucket, "cut.tar.gz"), packed[: len(packed) // 2])
    corrupt = bytearray(lzma.compress(shard(1, n=40)))
    corrupt[len(corrupt) // 2 : len(corrupt) // 2 + 32] = bytes(32)
    store.put(AISPath(bucket, "corrupt.tar.xz"), bytes(corrupt))
    store.put(AISPath(bucket, "tiny.tar"), b'{"not": "a tar"}')
    store.put(AISPath(bucket, "good.tar.bz2"), bz2.compress(shard(2)))

    with pytest.raises(aisio.ShardFormatError, match=r"gzip-compressed.*truncated") as info:
        list(aisio.AISFileLoader(bucket.uri("cut.tar.gz"), store=store
                                 ).ais_parse_webdataset())
    assert info.value.offset and info.value.offset > 0
    with pytest.raises(aisio.ShardFormatError, match="is not a tar file"):
        list(aisio.AISFileLoader(bucket.uri("tiny.tar"), store=store).ais_parse_webdataset())

    report = aisio.ErrorReport()
    names = [bucket.uri(n) for n in ("cut.tar.gz", "corrupt.tar.xz", "tiny.tar", "good.tar.bz2")]
    samples = list(aisio.AISFileLoader(names, store=store).ais_parse_webdataset(
        on_error="skip", report=report))
    assert [s["__key__"] for s in samples][-20:] == [f"s2/{k:04d}" for k in range(20)]
    assert {r["shard"].rsplit("/", 1)[-1] for r in report.records()} == {
        "cut.tar.gz", "corrupt.tar.xz", "tiny.tar"}
