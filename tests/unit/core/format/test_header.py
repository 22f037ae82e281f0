"""The tar header is read and checked in one place (aisio.core.format.tar.header).

Three paths read a shard's headers: the general reader (``iter_tar``, ``ShardReader.step``),
the fast per-member path (``aisio.core.format.tar.fast``) and runs
(``aisio.core.format.tar.runs``, many headers at once with numpy). The fast path and runs only
vouch for headers; whatever they do not vouch for goes to the general reader, so a header
that is wrong in any way gives the same typed error, at the same byte, whichever path meets
it. These tests hold the three to that, and runs to vouching for no header the fast path
refuses.
"""

from __future__ import annotations

import ast
import io
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisio import Decoder
from aisio.core.decode.runs import run_plan
from aisio.core.faults.errors import AISIOError, ShardFormatError
from aisio.core.format.samples import iter_samples
from aisio.core.format.tar import BLOCK, iter_tar
from aisio.core.format.tar.fast import plain_members
from aisio.core.format.tar.header import sound_headers
from aisio.core.format.tar.runs import Columns

URL = "ais://bucket/shard-003.tar"
TAG = ("__pos__", 3, 0, frozenset(), {"__version__": "v1"})
PLAN = run_plan(Decoder(None, only=["cls"]), ("__key__", "jpg", "cls"))
BROKEN = 20  # the sample whose jpg header is made wrong: runs cover the samples before it


def _shard(fmt: int = tarfile.USTAR_FORMAT, mtime: float = 1_700_000_000) -> bytes:
    """Returns 40 regular samples ``s00000.{jpg,cls}`` (a float ``mtime`` in the pax format
    gives every member a pax header, as webdataset's TarWriter writes them)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for i in range(40):
            for suffix, data in (("jpg", bytes([i]) * 300), ("cls", str(i).encode())):
                info = tarfile.TarInfo(f"s{i:05d}.{suffix}")
                info.size, info.mtime = len(data), mtime
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _header_of(raw: bytes, name: str) -> int:
    """Returns where the header that names ``name`` begins."""
    return raw.index(name.encode() + b"\x00" * (100 - len(name)))


def _with_checksum(raw: bytearray, at: int) -> None:
    """Writes the checksum of the header at ``raw[at]`` into it."""
    raw[at + 148:at + 156] = b" " * 8
    raw[at + 148:at + 156] = b"%06o\x00 " % sum(raw[at:at + BLOCK])


def _broken(kind: str, fmt: int, mtime: float) -> bytes:
    """Returns the shard with sample BROKEN's jpg made wrong as ``kind`` says."""
    raw = bytearray(_shard(fmt, mtime))
    at = _header_of(bytes(raw), f"s{BROKEN:05d}.jpg")
    if kind == "owner":  # a byte only the checksum notices
        raw[at + 265] ^= 0x01
    elif kind == "checksum":
        raw[at + 150] = ord("7") if raw[at + 150] != ord("7") else ord("6")
    elif kind == "size":  # not octal, under a checksum that matches
        raw[at + 124:at + 136] = b"0000000045x\x00"
        _with_checksum(raw, at)
    elif kind == "cut":
        return bytes(raw[:at + BLOCK + 100])
    return bytes(raw)


def _outcome(read: Any) -> tuple[list[Any], Any]:
    """Returns the items ``read()`` yields and what its error says and carries (None if
    none)."""
    items: list[Any] = []
    try:
        for item in read():
            items.append(item)
    except AISIOError as exc:
        return items, (type(exc), str(exc), exc.offset, exc.member)  # type: ignore[attr-defined]
    return items, None


_FORMATS = [(tarfile.USTAR_FORMAT, 1_700_000_000), (tarfile.GNU_FORMAT, 1_700_000_000),
            (tarfile.PAX_FORMAT, 1_700_000_000.5)]


@pytest.mark.parametrize(("fmt", "mtime"), _FORMATS)
@pytest.mark.parametrize("kind", ["owner", "checksum", "size", "cut"])
def test_a_wrong_header_fails_alike_on_every_path(kind: str, fmt: int, mtime: float) -> None:
    raw = _broken(kind, fmt, mtime)

    def samples(**kwargs: Any) -> Any:
        return lambda: iter_samples(io.BytesIO(raw), url=URL, **kwargs)

    general_members, general = _outcome(lambda: iter_tar(io.BytesIO(raw), url=URL))
    fast_samples, fast = _outcome(samples())
    slow_samples, slow = _outcome(samples(fast=False))
    run_items, with_runs = _outcome(samples(tag=TAG, runs=PLAN))
    assert general is not None and general[0] is ShardFormatError
    assert fast == slow == with_runs == general
    assert fast_samples == slow_samples and len(fast_samples) >= BROKEN - 1
    expected = {"owner": "(checksum mismatch)", "checksum": "(checksum mismatch)",
                "size": "invalid size field", "cut": "is truncated"}[kind]
    assert expected in general[1] and len(general_members) == 2 * BROKEN
    assert any(type(item) is Columns for item in run_items)  # runs met the shard, then the fault


def _one_member(name: bytes, data: bytes) -> bytes:
    info = tarfile.TarInfo(name.decode())
    info.size, info.mtime = len(data), 1_700_000_000
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@settings(max_examples=300, deadline=None)
@given(where=st.integers(0, BLOCK - 1), byte=st.integers(0, 255), fix=st.booleans())
def test_runs_vouch_for_no_header_the_fast_path_refuses(where: int, byte: int,
                                                        fix: bool) -> None:
    """One byte of a plain header changed (its checksum rewritten, or not): when the check of
    many headers at once (runs) calls it sound, a file whose data lies in the buffer, the fast
    path reads it too; whatever the fast path reads, the general reader reads alike."""
    raw = bytearray(_one_member(b"s00001.jpg", b"x" * 700))
    raw[where] = byte
    if fix and not 148 <= where < 156:
        _with_checksum(raw, 0)
    sound = bool(sound_headers(np.frombuffer(bytes(raw[:BLOCK]), np.uint8).reshape(1, BLOCK))[0])
    read: list[Any] = []
    plain_members(bytes(raw), 0, len(raw) - BLOCK, 0, 1, read)
    if sound and raw[156] == ord("0"):
        padded = (int(raw[124:135], 8) + BLOCK - 1) // BLOCK * BLOCK
        assert len(read) == 1 or BLOCK + padded > len(raw)  # (else its data is not all here)
    if read:
        assert read == [tuple(next(iter_tar(io.BytesIO(bytes(raw)), url=URL)))]


def test_no_tar_function_is_over_60_lines() -> None:
    """Tar parsing stays in named steps: no function of the tar part or of the grouping is
    longer than 60 lines (its docstring included)."""
    root = Path(__file__).resolve().parents[4] / "aisio" / "core" / "format"
    long = []
    for path in [*sorted((root / "tar").glob("*.py")), root / "samples.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if lines > 60:
                    long.append(f"{path.name}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []


def _borrowed(value: int) -> bytes | None:
    """Returns ``value`` as 6 digits of which one is an 8: a digit lent to the next lower
    place (``...30...`` -> ``...28...``), what octal text cannot hold but the same sum; None
    when it has no 0 after another digit to lend into."""
    digits = [int(d) for d in f"{value:06o}"]
    for k in range(5, 0, -1):
        if digits[k] == 0 and digits[k - 1] > 0:
            digits[k - 1] -= 1
            digits[k] = 8
            return "".join(map(str, digits)).encode()
    return None


def _digit_past_seven(field: str) -> bytes:
    """Returns the 40-sample shard with sample BROKEN's jpg header holding an 8 in its size
    (``448``: 296 bytes to one that reads it, one block as 300) or its checksum (the header's
    true sum), its checksum otherwise right."""
    raw = bytearray(_shard())
    at = _header_of(bytes(raw), f"s{BROKEN:05d}.jpg")
    if field == "size":
        raw[at + 124:at + 136] = b"00000000448\x00"
        _with_checksum(raw, at)
        return bytes(raw)
    for mtime in range(8):  # an mtime digit changed until the sum has a 0 to borrow into
        raw[at + 146] = ord("0") + mtime
        raw[at + 148:at + 156] = b" " * 8
        borrowed = _borrowed(sum(raw[at:at + BLOCK]))
        if borrowed is not None:
            raw[at + 148:at + 156] = borrowed + b"\x00 "
            return bytes(raw)
    raise AssertionError("no mtime gave a sum with a 0 to borrow into")


def _keys_and_jpgs(items: list[Any]) -> list[tuple[str, bytes]]:
    """Returns each sample's key and jpg, from dicts and from runs' columns alike."""
    out: list[tuple[str, bytes]] = []
    for item in items:
        if type(item) is Columns:
            out.extend((value[0], value[1]) for value in item.values)
        else:
            out.append((item["__key__"], item["jpg"]))
    return out


def _every_path(raw: bytes) -> list[tuple[list[tuple[str, bytes]], Any]]:
    """Returns what the fast path, the general reader and runs give: samples and error."""
    outcomes = []
    for kwargs in ({}, {"fast": False}, {"tag": TAG, "runs": PLAN}):
        items, error = _outcome(lambda kwargs=kwargs: iter_samples(io.BytesIO(raw), url=URL,
                                                                   **kwargs))
        outcomes.append((_keys_and_jpgs(items), error))
    return outcomes


@pytest.mark.parametrize("field", ["size", "checksum"])
def test_a_size_or_checksum_with_a_digit_past_seven_fails_alike_on_every_path(
    field: str,
) -> None:
    """A header whose size or checksum field holds an 8 (not octal, whatever it adds up to)
    is corrupt on every path: runs vouch for octal digits only, and end before it."""
    raw = _digit_past_seven(field)
    fast, general, runs = _every_path(raw)
    assert general[1] is not None and general[1][0] is ShardFormatError
    assert {"size": "invalid size field", "checksum": "checksum mismatch"}[field] in general[1][1]
    assert fast == general == runs and len(general[0]) >= BROKEN - 1


def _pax_of_broken(raw: bytearray) -> int:
    """Returns where sample BROKEN's jpg's pax header begins (its record one block after)."""
    return _header_of(bytes(raw), f"s{BROKEN:05d}.jpg") - 2 * BLOCK


def test_a_pax_header_with_a_size_record_is_read_alike_on_every_path() -> None:
    """A pax header of one record, as long as webdataset's ``mtime`` one, that is a ``size``
    (it overrides the header's): runs take no such header for an mtime, so the member's
    300 bytes come on every path, not the 10 its own header says."""
    raw = bytearray(_shard(tarfile.PAX_FORMAT, 1_700_000_000.5))
    pax = _pax_of_broken(raw)
    assert raw[pax + BLOCK:pax + BLOCK + 22] == b"22 mtime=1700000000.5\n"
    raw[pax + BLOCK:pax + BLOCK + 22] = b"22 size=0000000000300\n"
    jpg = pax + 2 * BLOCK
    raw[jpg + 124:jpg + 136] = b"%011o\x00" % 10
    _with_checksum(raw, jpg)
    fast, general, runs = _every_path(bytes(raw))
    assert general[1] is None and general[0][BROKEN] == (f"s{BROKEN:05d}", bytes([BROKEN]) * 300)
    assert fast == general == runs


def test_a_pax_record_whose_length_is_not_two_digits_fails_alike_on_every_path() -> None:
    """``1:`` for a record's length (``:`` is the digit after ``9``; 1 and 10 make the
    20 the header says): a malformed pax header to the general reader, so to runs too."""
    raw = bytearray(_shard(tarfile.PAX_FORMAT, 1_700_000_000.5))
    pax = _pax_of_broken(raw)
    raw[pax + 124:pax + 136] = b"%011o\x00" % 20
    _with_checksum(raw, pax)
    raw[pax + BLOCK:pax + BLOCK + 22] = b"1: mtime=1700000000\n\x00\x00"
    fast, general, runs = _every_path(bytes(raw))
    assert general[1] is not None and "malformed pax extended header" in general[1][1]
    assert fast == general == runs and len(general[0]) >= BROKEN - 1


def test_a_pax_header_whose_size_reads_negative_fails_alike_on_every_path() -> None:
    """A pax header (its record block gone) whose size field holds a space, which runs'
    arithmetic reads as -128: one block on, the member's header, so runs look at it in the
    chain; an invalid size on every path, not an index out of range in runs."""
    raw = bytearray(_shard(tarfile.PAX_FORMAT, 1_700_000_000.5))
    pax = _pax_of_broken(raw)
    raw[pax + 124:pax + 136] = b"000000000 0\x00"
    _with_checksum(raw, pax)
    del raw[pax + BLOCK:pax + 2 * BLOCK]
    fast, general, runs = _every_path(bytes(raw))
    assert general[1] is not None and "invalid size field" in general[1][1]
    assert fast == general == runs and len(general[0]) >= BROKEN - 1


@pytest.mark.parametrize("pax", ["sound", "size not octal", "too short", "not an mtime"])
def test_a_pax_header_the_fast_path_refuses_leaves_its_member_to_the_general_reader(
        pax: str) -> None:
    """The fast path reads a member after a sound ``mtime`` pax header; refusing one (a size
    not octal, shorter than an ``mtime`` record, a record that is no ``mtime``) it reads
    nothing and returns where the member begins, for the general reader. Never a header at
    the buffer's byte 1, which a buffer starting with a member's data may hold."""
    member = bytearray(_shard(tarfile.PAX_FORMAT, 1_700_000_000.5))
    assert member[BLOCK:BLOCK + 22] == b"22 mtime=1700000000.5\n"
    if pax == "size not octal":
        member[124:136] = b"00000000028\x00"
    elif pax == "too short":
        member[124:136] = b"%011o\x00" % 11
        _with_checksum(member, 0)
    elif pax == "not an mtime":
        member[BLOCK:BLOCK + 22] = b"22 size=0000000000300\n"
    data = b"\x00" + _one_member(b"other.jpg", b"y" * 10)[:BLOCK]  # a header at byte 1
    buf = data + bytes(2 * BLOCK - len(data)) + bytes(member)
    read: list[Any] = []
    at = plain_members(buf, 2 * BLOCK, len(buf) - BLOCK, 0, 1, read)
    if pax == "sound":
        assert [name for name, *_ in read] == ["s00000.jpg"] and at > 2 * BLOCK
    else:
        assert (at, read) == (2 * BLOCK, [])
