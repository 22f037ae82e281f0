"""The one-pass reader (aisio.core.format.samples.iter_samples) against the general path and
tarfile.

``iter_samples`` parses common headers itself and hands everything else to the general reader;
these properties check on random archives (plain, pax and GNU members mixed, long and unicode
names, directories and links, meta files, repeated suffixes, small read buffers, corrupt bytes,
truncation, gzip, restarts at a sample's end, pax mtime records) that it yields exactly what
the general path yields, samples, end offsets and errors alike, and what Python's tarfile
reads.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from aisio.core.faults.errors import AISIOError
from aisio.core.format.samples import group_samples, group_samples_with_end, iter_samples
from aisio.core.format.tar import iter_tar
from tests.unit.core.format.test_runs import _add

URL = "ais://bucket/shard-000.tar"

_KEYS = st.sampled_from(["s0", "s1", "a.b/s2", "dir/s3", "__meta__/x", "_s4", "d/", "", "x" * 120,
                         "ünï", "k/" + "y" * 110])
_SUFFIXES = st.sampled_from(["jpg", "cls", "JSON", "seg.png", "txt", "", "jpg"])


@st.composite
def archives(draw: st.DrawFn) -> bytes:
    """Returns a tar archive of random members: files named ``key.suffix`` (in runs that share a
    key, as WebDataset writes them), now and then a directory, a link or a dot-less name."""
    fmt = draw(st.sampled_from([tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT]))
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for _ in range(draw(st.integers(0, 12))):
            key = draw(_KEYS)
            for _ in range(draw(st.integers(1, 3))):
                kind = draw(st.sampled_from(["file"] * 8 + ["dir", "link", "nodot"]))
                name = f"{key}.{draw(_SUFFIXES)}" if kind != "nodot" else key or "plain"
                info = tarfile.TarInfo(name)
                # a fraction: a pax mtime record before the member in the pax format (as
                # webdataset's TarWriter writes every member), which the fast path reads
                info.mtime = draw(st.integers(0, 2**33)) + draw(st.sampled_from([0, 0, 0.25]))
                data = b""
                if kind == "dir":
                    info.type = tarfile.DIRTYPE
                elif kind == "link":
                    info.type = tarfile.SYMTYPE
                    info.linkname = draw(st.sampled_from(["t", "z" * 150]))
                else:
                    data = draw(st.binary(max_size=1300))
                    info.size = len(data)
                try:
                    tar.addfile(info, io.BytesIO(data))
                except ValueError:  # a name ustar cannot store
                    assume(False)
    return out.getvalue()


def _outcome(read: Any) -> tuple[str, Any]:
    """Returns ``("ok", items)`` or ``("error", (the items yielded before the error, what the
    error says and carries))``."""
    items: list[Any] = []
    try:
        for item in read():
            items.append(item)
        return "ok", items
    except AISIOError as exc:
        return "error", (items, type(exc).__name__, str(exc), getattr(exc, "offset", None),
                         getattr(exc, "member", None), getattr(exc, "given_up", None))


def _three_ways(raw: bytes, bufsize: int, start: int = 0) -> tuple[Any, Any, Any]:
    def fast() -> Any:
        return iter_samples(io.BytesIO(raw), url=URL, start_offset=start, bufsize=bufsize,
                            ends=True)

    def general() -> Any:
        return iter_samples(io.BytesIO(raw), url=URL, start_offset=start, bufsize=bufsize,
                            ends=True, fast=False)

    def composed() -> Any:
        members = iter_tar(io.BytesIO(raw), url=URL, start_offset=start, bufsize=bufsize)
        return group_samples_with_end(members, url=URL)

    return _outcome(fast), _outcome(general), _outcome(composed)


_SETTINGS = settings(max_examples=150, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
_BUFSIZES = st.sampled_from([512, 1024, 2048, 4096, 1 << 20])


@_SETTINGS
@given(raw=archives(), bufsize=_BUFSIZES)
def test_fast_path_agrees_with_general_path_and_tarfile(raw: bytes, bufsize: int) -> None:
    fast, general, composed = _three_ways(raw, bufsize)
    assert fast == general == composed
    if fast[0] == "ok":
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r|") as tar:
            pairs = [(info.name, tar.extractfile(info).read())  # type: ignore[union-attr]
                     for info in tar if info.isreg()]
        try:
            expected = list(group_samples(pairs, url=URL))
        except AISIOError:
            pytest.fail("tarfile's members repeat a suffix where aisio's did not")
        assert [sample for sample, _ in fast[1]] == expected


@_SETTINGS
@given(raw=archives(), bufsize=_BUFSIZES, where=st.integers(0, 1 << 16), byte=st.integers(0, 255),
       cut=st.booleans())
def test_corrupt_or_truncated_archives_fail_alike(raw: bytes, bufsize: int, where: int, byte: int,
                                                  cut: bool) -> None:
    assume(raw)
    where %= len(raw)
    bad = raw[:where] if cut else raw[:where] + bytes([byte]) + raw[where + 1:]
    fast, general, composed = _three_ways(bad, bufsize)
    assert fast == general == composed


@_SETTINGS
@given(raw=archives(), bufsize=_BUFSIZES, pick=st.integers(0, 100))
def test_restart_at_any_sample_end_alike(raw: bytes, bufsize: int, pick: int) -> None:
    outcome, samples = _three_ways(raw, bufsize)[0]
    assume(outcome == "ok" and samples)
    start = samples[pick % len(samples)][1]
    fast, general, composed = _three_ways(raw[start:], bufsize, start)
    assert fast == general == composed
    assert fast == ("ok", samples[pick % len(samples) + 1:])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=archives(), bufsize=_BUFSIZES, cut=st.integers(0, 1 << 16))
def test_gzip_shards_alike(raw: bytes, bufsize: int, cut: int) -> None:
    packed = gzip.compress(raw)
    for data in (packed, packed[: cut % (len(packed) + 1)]):
        fast, general, composed = _three_ways(data, bufsize)
        assert fast == general == composed


def test_plain_samples_and_pairs() -> None:
    """Without ``ends`` the samples come alone, as group_samples yields them."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in ("a.jpg", "a.cls", "b.jpg"):
            info = tarfile.TarInfo(name)
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
    raw = out.getvalue()
    samples = list(iter_samples(io.BytesIO(raw), url=URL))
    assert samples == list(group_samples(iter_tar(io.BytesIO(raw), url=URL), url=URL))
    assert [s["__key__"] for s in samples] == ["a", "b"]


def _shard(*keys: str) -> io.BytesIO:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for key in keys:
            info = tarfile.TarInfo(f"{key}.cls")
            info.size = 1
            tar.addfile(info, io.BytesIO(b"1"))
    return io.BytesIO(out.getvalue())


class _Shards:
    """Two small shards, opened anew by every iteration."""

    def __iter__(self) -> Any:
        yield "s0", _shard("a", "b")
        yield "s1", _shard("c")


def test_parser_keeps_one_valid_iterator_checked_per_shard() -> None:
    """WebDatasetParser yields samples outside torch's per-item wrapper, and still invalidates
    an iterator once another is made (at the old one's next shard)."""
    from aisio.datapipes.pipes import WebDatasetParser

    pipe = WebDatasetParser(_Shards())
    first = iter(pipe)
    assert next(first)["__key__"] == "a"
    assert [s["__key__"] for s in pipe] == ["a", "b", "c"]
    assert next(first)["__key__"] == "b"  # the rest of its shard
    with pytest.raises(RuntimeError, match="invalidated"):
        next(first)


def test_stage_times_count_every_member() -> None:
    """The one-pass reader adds its members (meta files and dot-less names too) and its time
    to the process's stage totals, as iter_tar does."""
    from aisio.core.system import timing

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(300):
            for name in (f"k{i}.jpg", f"k{i}.cls") + (("__index__",) if i == 7 else ()):
                info = tarfile.TarInfo(name)
                info.size = 3
                tar.addfile(info, io.BytesIO(b"abc"))
    before = timing.snapshot()
    assert len(list(iter_samples(io.BytesIO(out.getvalue()), url=URL))) == 300
    after = timing.snapshot()
    assert after["parse_n"] - before["parse_n"] == 601
    assert after["parse"] >= before["parse"] and after["read"] > before["read"]


@pytest.mark.parametrize("mtime", [0, 0.5])
def test_common_members_do_not_take_the_general_path(monkeypatch: pytest.MonkeyPatch,
                                                     mtime: float) -> None:
    """Plain files in the buffer are parsed by the fast path: the general reader is called only
    for the first member (which fills the buffer) and the end of the archive (a guard against a
    fast path that silently never applies); so are members after a pax header holding only
    their fractional mtime, as webdataset's TarWriter writes them."""
    from aisio.core.format.tar import ShardReader

    calls = []
    step = ShardReader.step

    def counted(self: ShardReader) -> Any:
        calls.append(1)
        return step(self)

    monkeypatch.setattr(ShardReader, "step", counted)
    out = io.BytesIO()
    fmt = tarfile.PAX_FORMAT if mtime else tarfile.GNU_FORMAT
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for i in range(100):
            for suffix in ("jpg", "cls"):
                info = tarfile.TarInfo(f"train/{i:05d}.{suffix}")
                info.mtime = 1_700_000_000 + i + mtime
                info.size = 2048 if suffix == "jpg" else 1
                tar.addfile(info, io.BytesIO(bytes(info.size)))
    assert len(list(iter_samples(io.BytesIO(out.getvalue()), url=URL))) == 100
    assert len(calls) == 2


def _pax_mtime_archive(repeat_at: int | None = None) -> bytes:
    """Samples ``sNNN.{jpg,cls}`` whose members each follow a pax header holding only their
    fractional mtime (webdataset's TarWriter's way); sample ``repeat_at`` repeats its jpg."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for i in range(12):
            suffixes = ["jpg", "cls"] + (["jpg"] if i == repeat_at else [])
            for suffix in suffixes:
                info = tarfile.TarInfo(f"s{i:03d}.{suffix}")
                info.mtime = 1_700_000_000.5 + i
                data = bytes([i]) * (300 + 97 * i)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.mark.parametrize("bufsize", range(1024, 12288, 512))
def test_pax_mtime_members_fail_alike_wherever_the_buffer_ends(bufsize: int) -> None:
    """A repeated suffix among members with pax mtime headers, the buffer ending anywhere: the
    same samples and the same error, at the offset of the member's pax header."""
    fast, general, composed = _three_ways(_pax_mtime_archive(repeat_at=7), bufsize)
    assert fast == general == composed and fast[0] == "error"


@pytest.mark.parametrize("edit", ["uname", "length"])
def test_a_bad_pax_mtime_header_is_left_to_the_general_reader(edit: str) -> None:
    """A pax mtime header whose checksum fails (a byte of its owner's name changed) or whose
    record declares another length: the fast path does not skip it, so it fails as the
    general reader says."""
    raw = bytearray(_pax_mtime_archive())
    at = raw.index(b"././@PaxHeader", 4 * 1024)  # a pax header some members in
    if edit == "uname":
        raw[at + 265] ^= 0x01
    else:
        record = at + 512
        raw[record:record + 2] = b"%02d" % (int(raw[record:record + 2]) - 1)
    fast, general, composed = _three_ways(bytes(raw), 1 << 20)
    assert fast == general == composed and fast[0] == "error"


def test_a_pax_header_whose_size_field_has_no_nul_is_left_to_the_general_reader() -> None:
    """A pax header whose size fills its field's 12 bytes with octal digits (no NUL, as some
    writers do) and whose first record is an mtime: the fast path, which reads a size of 11
    digits, must not take it for an mtime-only header and skip the records after it (here a
    ``path`` that renames the member)."""
    # 104 bytes of records (0o150): 11 digits read "0o15", the first record's length, 13
    pax = {"mtime": "123", "comment": "c" * 62, "path": "s005.txt"}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for i in range(12):
            for suffix in ("jpg", "cls"):
                _add(tar, f"s{i:03d}.{suffix}", bytes([i]) * 300, mtime=123,
                     pax=pax if (i, suffix) == (5, "cls") else None)
    raw = bytearray(out.getvalue())
    at = raw.index(b"././@PaxHeader")
    size = int(raw[at + 124:at + 136].rstrip(b"\0"), 8)
    assert raw[at + 512:at + 525] == b"13 mtime=123\n" and size == 0o150
    raw[at + 124:at + 136] = b"%012o" % size
    raw[at + 148:at + 156] = b" " * 8
    raw[at + 148:at + 156] = b"%06o\0 " % sum(raw[at:at + 512])
    fast, general, composed = _three_ways(bytes(raw), 1 << 20)
    assert fast == general == composed and fast[0] == "ok"
    assert {"txt", "jpg"} <= set(fast[1][5][0]) and "cls" not in fast[1][5][0]
