"""Compressed shards (gzip, bzip2, xz, zstd) and short non-tar objects in aisio.core.format.tar."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import random
import sys
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisio.core.faults.errors import LoaderUnavailableError, ShardFormatError
from aisio.core.format.compression import compression_of
from aisio.core.format.tar import iter_tar
from tests.unit.core.format.test_tar import MIXED, ShortReader, make_tar

URL = "ais://bucket/shard.tar.gz"
NOISE = [("n/0001.bin", random.Random(1).randbytes(30000)), ("n/0001.cls", b"1"),
         ("n/0002.bin", random.Random(2).randbytes(30000))]
COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": lambda raw: gzip.compress(raw, mtime=0),
    "bzip2": bz2.compress,
    "xz": lzma.compress,
}


def members(raw: bytes, **kwargs: object) -> list[tuple[str, bytes]]:
    return [(m.name, m.data) for m in iter_tar(io.BytesIO(raw), url=URL, **kwargs)]  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", sorted(COMPRESSORS))
def test_compressed_shard_reads_like_the_plain_one(kind: str) -> None:
    raw = make_tar(MIXED)
    packed = COMPRESSORS[kind](raw)
    assert compression_of(packed[:6]) == kind
    plain = list(iter_tar(io.BytesIO(raw), url=URL))
    got = list(iter_tar(io.BytesIO(packed), url=URL, bufsize=1024))
    assert got == plain  # names, data and offsets (into the decompressed tar)


@pytest.mark.parametrize("kind", sorted(COMPRESSORS))
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**16))
def test_compressed_shard_survives_short_reads(kind: str, seed: int) -> None:
    packed = COMPRESSORS[kind](make_tar(MIXED))
    got = [(m.name, m.data) for m in iter_tar(ShortReader(packed, seed, most=50), url=URL)]
    assert got == MIXED


def test_detection_is_by_magic_not_name() -> None:
    raw = make_tar(MIXED)
    # A gzip shard named .tar and a plain shard named .tgz both read.
    assert [(m.name, m.data) for m in iter_tar(io.BytesIO(gzip.compress(raw)),
                                               url="ais://b/s.tar")] == MIXED
    assert [(m.name, m.data) for m in iter_tar(io.BytesIO(raw), url="ais://b/s.tgz")] == MIXED


def test_multi_member_gzip_reads_as_one_stream() -> None:
    raw = make_tar(MIXED)
    packed = gzip.compress(raw[:2048]) + gzip.compress(raw[2048:])
    assert members(packed) == MIXED


@pytest.mark.parametrize("kind", sorted(COMPRESSORS))
def test_truncated_compressed_shard_names_member_and_decompressed_offset(kind: str) -> None:
    raw = make_tar(NOISE)
    packed = COMPRESSORS[kind](raw)
    with pytest.raises(ShardFormatError) as info:
        members(packed[: len(packed) // 2])
    err = info.value
    assert err.url == URL and err.offset is not None
    assert "truncated" in str(err) and kind in str(err) and "decompressed" in str(err)
    if kind != "bzip2":  # bzip2 gives nothing before its first 900 KB block is whole
        assert 0 < err.offset < len(raw)


def test_compressed_stream_ending_early_on_a_member_boundary_is_truncation() -> None:
    raw = make_tar(MIXED)
    cut = list(iter_tar(io.BytesIO(raw)))[2].offset  # a member boundary, before end of archive
    packed = gzip.compress(raw)
    partial = gzip.compress(raw[:cut])[:-8]  # the same data without the gzip trailer
    assert len(partial) < len(packed)
    with pytest.raises(ShardFormatError, match="truncated") as info:
        members(partial)
    assert info.value.offset is not None and info.value.offset <= cut


@pytest.mark.parametrize("kind", sorted(COMPRESSORS))
def test_corrupt_compressed_data_is_a_shard_format_error(kind: str) -> None:
    raw = make_tar(MIXED * 3)
    packed = bytearray(COMPRESSORS[kind](raw))
    middle = len(packed) // 2
    packed[middle : middle + 16] = bytes(16)
    with pytest.raises(ShardFormatError) as info:
        members(bytes(packed))
    assert info.value.url == URL
    assert info.value.offset is not None


@pytest.mark.parametrize("blob", [b"{\"k\": 1}\n", b"hello", b"\x89PNG\r\n\x1a\n" + bytes(40),
                                  b"PK\x03\x04" + bytes(100), bytes(range(1, 200))])
def test_short_object_that_is_not_a_tar_is_not_a_tar(blob: bytes) -> None:
    with pytest.raises(ShardFormatError, match="is not a tar file") as info:
        members(blob)
    assert "truncated" not in str(info.value)
    assert info.value.offset == 0


def test_short_prefix_of_a_real_tar_is_still_truncated() -> None:
    raw = make_tar(MIXED)
    for cut in (20, 150, 300):
        with pytest.raises(ShardFormatError, match="truncated"):
            members(raw[:cut])


def test_zip_is_named_in_the_not_a_tar_error() -> None:
    out = io.BytesIO()
    import zipfile

    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("a.txt", "x" * 2000)
    with pytest.raises(ShardFormatError, match="zip archive"):
        members(out.getvalue())


def test_zstd_shard() -> None:
    # zstandard is in both test environments (optional for users): the real decoding runs here.
    import zstandard

    raw = make_tar(MIXED)
    packed = zstandard.ZstdCompressor().compress(raw)
    assert compression_of(packed[:6]) == "zstd"
    assert members(packed) == MIXED
    # Several frames back to back, as `zstd` writes for a file written in pieces.
    halves = zstandard.ZstdCompressor().compress(raw[:4096]) + zstandard.ZstdCompressor(
        ).compress(raw[4096:])
    assert members(halves) == MIXED


def test_zstd_shard_without_zstandard(monkeypatch: pytest.MonkeyPatch) -> None:
    import zstandard

    packed = zstandard.ZstdCompressor().compress(make_tar(MIXED))
    monkeypatch.setitem(sys.modules, "zstandard", None)  # as if it were not installed
    with pytest.raises(LoaderUnavailableError, match="pip install zstandard"):
        members(packed)


def test_resumed_stream_is_taken_as_plain_tar() -> None:
    raw = make_tar(MIXED)
    start = list(iter_tar(io.BytesIO(raw)))[1].offset
    rest = list(iter_tar(io.BytesIO(raw[start:]), start_offset=start))
    assert [m.name for m in rest] == [name for name, _ in MIXED[1:]]


def test_a_bad_member_in_a_compressed_shard_is_named_as_in_a_plain_one() -> None:
    """The error of a compressed shard says so and keeps what the plain shard's names: the
    member at fault (by which a skip decides the sample it gives up) and the offset (here a
    member's size field that is not a number)."""
    raw = bytearray(make_tar(NOISE))
    second = list(iter_tar(io.BytesIO(bytes(raw)), url=URL))[1].offset
    raw[second + 124:second + 136] = b"garbage!".ljust(12, b"\0")  # its size, not octal
    raw[second + 148:second + 156] = b" " * 8
    raw[second + 148:second + 156] = b"%06o\0 " % sum(raw[second:second + 512])
    with pytest.raises(ShardFormatError) as plain:
        members(bytes(raw))
    with pytest.raises(ShardFormatError) as packed:
        members(COMPRESSORS["gzip"](bytes(raw)))
    assert plain.value.member is not None
    assert (packed.value.member, packed.value.offset) == (plain.value.member, plain.value.offset)
    assert "gzip-compressed" in str(packed.value)
