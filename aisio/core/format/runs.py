"""Runs of regular samples: many small samples of the read buffer parsed at once, as columns.

A WebDataset shard of small samples is mostly the same few members over and over: plain files
with short ASCII names, one sample after another, every sample with the same suffixes in the
same order. Where a stretch of the read buffer is that regular, :func:`regular_run` vouches for
it with numpy (each 512-byte block a row: typeflags, sizes, checksums and names compared all at
once) and returns the fields a loader picks from each of its whole samples, already decoded,
with the offset each sample ends at. Python then touches each sample once, not each member
several times: the per-member parser (:mod:`aisio.core.format.samples`) remains the reader of
everything a run does not vouch for, and the one that explains every error.

A run is only an optimisation: the same samples, values and offsets as the per-member parser
followed by :class:`~aisio.core.pipeline.stages.SampleStage` (``tests/unit/core/format/
test_runs.py`` checks this against it on generated archives).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from aisio.core.faults.errors import AISIOError
from aisio.core.format.decode import BASIC_DECODERS, Decoder

BLOCK = 512

_SIZE_WEIGHTS = 8.0 ** np.arange(10, -1, -1)  # float64: exact for 11 octal digits
_CHECKSUM_WEIGHTS = 8.0 ** np.arange(5, -1, -1)
_NAME = 100  # bytes of a header's name field
_DOT, _UNDERSCORE, _PAX = ord("."), ord("_"), ord("x")
_MTIME = np.frombuffer(b" mtime=", np.uint8)


@dataclass(frozen=True)
class RunPlan:
    """What a run gives for each of a sample's picked fields, in the stage's order: ``"key"``
    (``__key__``), ``"url"`` (``__url__``), ``"raw"`` (the member's bytes) or ``"int"``
    (``int(bytes)``, the ``cls`` decoder)."""

    fields: tuple[str, ...]
    kinds: tuple[str, ...]

    @classmethod
    def of(cls, decoder: Decoder | None, fields: tuple[str, ...]) -> RunPlan | None:
        """Returns the plan for a stage that decodes with ``decoder`` (a plain
        :class:`~aisio.core.format.decode.Decoder`, or None) and picks ``fields``, or
        None when a run cannot give what that stage gives (another decoder, a custom one, an
        alternative between fields, a meta field other than the key and the URL)."""
        if decoder is not None and type(decoder).__call__ is not Decoder.__call__:
            return None
        kinds = []
        for field in fields:
            if field in ("__key__", "__url__"):
                kinds.append(field.strip("_"))
                continue
            if ";" in field or field.startswith("__") or field != field.lower():
                return None
            try:
                found = decoder.plan(field) if decoder is not None else None
            except AISIOError:  # a pickle it refuses: the per-sample stage says so
                return None
            kind = "raw" if found is None else ("int" if found is BASIC_DECODERS.get("cls")
                                                 else None)
            if kind is None or "." in field:  # (a suffix of two parts: left to the stage)
                return None
            kinds.append(kind)
        return cls(tuple(fields), tuple(kinds))


class Run(NamedTuple):
    """The whole samples of a regular stretch of the buffer.

    Attributes:
        values: one tuple of picked fields per sample, as the stage returns it.
        ends: for each sample, the buffer index just past its last member's padded data.
        stop: the buffer index of the first member after the run (a header, the first member
            of a sample the run does not include).
        members: tar members in the run.
        last_name: the name of the run's last member.
    """

    values: list[tuple[Any, ...]]
    ends: list[int]
    stop: int
    members: int
    last_name: str


class Columns(NamedTuple):
    """Whole samples of one shard, given at once in place of their dicts: what the parser
    yields for a run when a loader asks for runs (``iter_samples(..., runs=plan)``).

    Attributes:
        values: one tuple of picked fields per sample, as the loader's stage gives it.
        positions: each sample's position, as a sample would carry it.
        extra: the fields every sample of the shard would carry besides (its content id).
    """

    values: list[tuple[Any, ...]]
    positions: list[tuple[int, int, int, bool]]
    extra: dict[str, Any]


def _mtime_only(blocks: np.ndarray, rows: np.ndarray, heads: np.ndarray) -> np.ndarray:
    """Returns, for each pax header at ``rows`` (``heads``), whether its record is one
    ``mtime`` and nothing else (``"28 mtime=1795667187.8313234\n"``, as webdataset's TarWriter
    writes it), in the one block after it: a record the per-member reader ignores."""
    size = ((heads[:, 124:135].astype(np.float64) - 48) @ _SIZE_WEIGHTS).astype(np.int64)
    record = blocks[np.minimum(rows + 1, len(blocks) - 1)][:, :100]
    places = np.arange(100)
    told = (record[:, 0].astype(np.int64) - 48) * 10 + record[:, 1].astype(np.int64) - 48
    value = (places >= 9) & (places < size[:, None] - 1)
    digit = ((record >= 0x30) & (record <= 0x39)) | (record == _DOT)
    return ((size >= 12) & (size < 100) & (told == size)
            & ((record[:, :2] >= 0x30) & (record[:, :2] <= 0x39)).all(1)
            & (record[:, 2:9] == _MTIME).all(1)
            & (record[np.arange(len(rows)), np.clip(size - 1, 0, 99)] == 0x0A)
            & (digit | ~value).all(1))


def _decimals(buf: bytes, at: np.ndarray, sizes: np.ndarray) -> list[int] | None:
    """Returns ``int(buf[a:a + n])`` for each ``a``, ``n``, when every one is 1 to 18 decimal
    digits and nothing else (else None: signs, spaces, underscores are int()'s to read)."""
    longest = int(sizes.max())
    if longest > 18 or int(sizes.min()) < 1:
        return None
    places = np.arange(longest)
    found = np.frombuffer(buf, np.uint8)[np.minimum(at[:, None] + places, len(buf) - 1)]
    inside = places < sizes[:, None]
    digits = found.astype(np.int64) - 48
    if not ((digits >= 0) & (digits <= 9) | ~inside).all():
        return None
    weights = 10 ** np.maximum(sizes[:, None] - 1 - places, 0)
    numbers: list[int] = (np.where(inside, digits, 0) * weights).sum(1).tolist()
    return numbers


CONTINUES = Run([], [], 0, 0, "")
"""What :func:`regular_run` returns when the member at ``pos`` continues the sample in
progress: a run may begin after it."""


def regular_run(buf: bytes, pos: int, plan: RunPlan, url: str, after_key: str | None,
                *, min_samples: int = 8) -> Run | None:
    """Returns the run of regular samples that starts at ``buf[pos]`` (a member's header), or
    None when fewer than ``min_samples`` whole samples there are regular, or
    :data:`CONTINUES` when that member's name begins with ``after_key`` and a dot (it may
    continue the sample in progress).

    Regular: consecutive plain-file members (typeflag ``0``, octal size and checksum with
    their NUL, no ustar prefix, a valid checksum; each after a pax header whose only record
    is its ``mtime``, or none after any) lying whole in ``buf``, whose names are
    ASCII, NUL-terminated, with keys of one length and no dot (``/`` only in the key), not
    starting with ``_`` or ``.``; every sample has the same suffixes in the same order (no
    repeats) as the first, among them each picked field (as written: a suffix in capitals is
    left to the per-member parser, which lower-cases it). A sample is whole when the next
    sample's first member follows it in the run (its header in ``buf``), so a run never
    includes the shard's last sample.
    """
    if after_key is not None:
        name_at = pos
        if buf[pos + 156:pos + 157] == b"x":  # a pax header: the member's own follows its record
            try:
                name_at += BLOCK + (int(buf[pos + 124:pos + 136].strip(b" \0") or b"0", 8)
                                    + BLOCK - 1) // BLOCK * BLOCK
            except ValueError:
                return None
        if buf[name_at:name_at + _NAME].partition(b".")[0] == after_key.encode(
                "utf-8", "surrogateescape"):
            return CONTINUES
    rows = (len(buf) - pos) // BLOCK
    if rows < 2 * min_samples:
        return None
    blocks = np.frombuffer(buf, np.uint8, rows * BLOCK, pos).reshape(rows, BLOCK)
    # Walk the chain of headers, each header's size saying where the next one is; sizes are
    # read only from the blocks whose typeflag is "0" or "x" (a data block rarely is).
    candidates = np.flatnonzero((blocks[:, 156] == 0x30) | (blocks[:, 156] == _PAX))
    steps = np.zeros(rows, np.int64)
    steps[candidates] = 1 + ((blocks[candidates, 124:135].astype(np.float64) - 48)
                             @ _SIZE_WEIGHTS + (BLOCK - 1)).astype(np.int64) // BLOCK
    hops = steps.tolist()
    chain = []
    row = 0
    while row < rows:
        hop = hops[row]
        if hop <= 0:
            break
        chain.append(row)
        row += hop
    if len(chain) < 2 * min_samples:
        return None
    at = np.array(chain)
    heads = blocks[at]
    sums = (np.add.reduce(heads, 1, dtype=np.uint32).astype(np.int64)
            - np.add.reduce(heads[:, 148:156], 1, dtype=np.uint32) + 8 * 32)
    sound = ((heads[:, 135] == 0) & (heads[:, 154] == 0) & (heads[:, 345] == 0)
             & ((heads[:, 124:135] >= 0x30) & (heads[:, 124:135] <= 0x37)).all(1)
             & ((heads[:, 148:154] >= 0x30) & (heads[:, 148:154] <= 0x37)).all(1)
             & (sums == (heads[:, 148:154].astype(np.float64) - 48) @ _CHECKSUM_WEIGHTS))
    lead = at  # where each member begins: its own header, or the pax header before it
    if heads[0, 156] == _PAX:  # webdataset's TarWriter: a pax header (its mtime) every member
        pairs = len(at) // 2
        pax, at, sound = heads[:2 * pairs:2], at[1:2 * pairs:2], sound[:2 * pairs]
        sound = (sound[0::2] & sound[1::2] & (pax[:, 156] == _PAX)
                 & _mtime_only(blocks, lead[:2 * pairs:2], pax))
        lead, heads = lead[:2 * pairs:2], heads[1:2 * pairs:2]
    names = heads[:, :_NAME]
    key_len = int((names[0] == _DOT).argmax())
    keys = names[:, :key_len]
    # Per member here; the rest of each name is checked below as equal, byte for byte, to the
    # same member's of the first sample, whose names split_key reads.
    ok = (sound & (heads[:, 156] == 0x30)
          & (names[:, key_len] == _DOT) & (names[:, 0] != _UNDERSCORE)
          & ~((keys == _DOT) | (keys == 0) | (keys >= 0x80)).any(1))
    bad = np.flatnonzero(~ok)
    count = len(at) if len(bad) == 0 else int(bad[0])
    if count < 2 * min_samples or key_len == 0:
        return None
    # Samples: where the key (the name up to its first dot, all of one length) changes.
    keys = keys[:count]
    starts = np.flatnonzero(np.concatenate(([True], (keys[1:] != keys[:-1]).any(1))))
    width = int(starts[1]) if len(starts) > 1 else count
    whole = len(starts) - 1  # the last sample may continue past the run
    if whole < min_samples:
        return None
    # Every sample: `width` members named as the first sample's after the key, in order.
    regular = np.flatnonzero(np.diff(starts) != width)
    if len(regular):
        whole = int(regular[0])
    tails = names[:width, key_len:]
    same = (names[:whole * width, key_len:].reshape(whole, width, -1) == tails).all((1, 2))
    if not same.all():
        whole = int(np.argmin(same))
    if whole < min_samples:
        return None
    first = [bytes(row).partition(b"\0") for row in names[:width]]
    if any(not nul or b"/" in name[key_len:] or not name.isascii() for name, nul, _ in first):
        return None
    suffix_names = [name[key_len + 1:].decode("ascii") for name, _, _ in first]
    # (split_key reads each such name so: not "_" first, the key up to its only-ever first dot.)
    if len(set(suffix_names)) != width:
        return None
    columns: list[Any] = []
    member_rows = at[:whole * width].reshape(whole, width)
    sizes = ((heads[:whole * width, 124:135].astype(np.float64) - 48) @ _SIZE_WEIGHTS
             ).astype(np.int64).reshape(whole, width)
    for field, kind in zip(plan.fields, plan.kinds, strict=True):
        if kind == "key":
            columns.append([buf[a:a + key_len].decode("ascii")
                            for a in (at[starts[:whole]] * BLOCK + pos).tolist()])
            continue
        if kind == "url":
            columns.append([url] * whole)
            continue
        if field not in suffix_names:
            return None
        j = suffix_names.index(field)
        data_at = (member_rows[:, j] + 1) * BLOCK + pos
        if kind == "int":
            numbers = _decimals(buf, data_at, sizes[:, j])
            if numbers is None:  # not plain digits: as int() reads them, one by one
                numbers = []
                for a, n in zip(data_at.tolist(), sizes[:, j].tolist(), strict=True):
                    try:
                        numbers.append(int(buf[a:a + n]))
                    except ValueError:  # the run ends before: the stage names this sample
                        whole = min(whole, len(numbers))
                        break
            columns.append(numbers)
        else:
            columns.append([buf[a:b] for a, b in zip(
                data_at.tolist(), (data_at + sizes[:, j]).tolist(), strict=True)])
    if whole < min_samples:
        return None
    columns = [column[:whole] for column in columns]
    ends = (lead[starts[1:whole + 1]] * BLOCK + pos).tolist()
    last = whole * width - 1
    return Run(values=list(zip(*columns, strict=True)), ends=ends, stop=ends[-1],
               members=whole * width,
               last_name=buf[(a := pos + int(at[last]) * BLOCK):a + _NAME].partition(b"\0")[0]
               .decode("ascii"))


__all__ = ["CONTINUES", "Columns", "Run", "RunPlan", "regular_run"]
