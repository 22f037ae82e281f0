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
