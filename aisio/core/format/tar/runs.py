"""Runs of regular samples: many small samples of the read buffer parsed at once, as columns.

A WebDataset shard of small samples is mostly the same few members over and over: plain files
with short ASCII names, one sample after another, every sample with the same suffixes in the
same order. Where a stretch of the read buffer is that regular, :func:`regular_run` vouches for
it with numpy (each 512-byte block a row: typeflags, sizes, checksums and names compared all at
once) and returns the fields a loader picks from each of its whole samples, already decoded,
with the offset each sample ends at. Python then touches each sample once, not each member
several times: the per-member parser (:mod:`.fast`, :mod:`.stream`) remains the reader of
everything a run does not vouch for, and the one that explains every error.

A run is only an optimisation: the same samples, values and offsets as the per-member parser
followed by :class:`~aisio.core.pipeline.stages.SampleStage` (``tests/unit/core/format/
test_runs.py`` checks this against it on generated archives). Which headers it vouches for is
decided in :mod:`.header`, as for the per-member fast path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np

from aisio.core.format.tar.header import (
    BLOCK,
    NAME,
    PAX_HEADER,
    SIZE,
    SIZE_END,
    TYPEFLAG,
    mtime_only,
    octal_sizes,
    sizes_of,
    sound_headers,
)

_DOT, _UNDERSCORE, _FILE, _PAX = ord("."), ord("_"), ord("0"), ord("x")


@dataclass(frozen=True)
class RunPlan:
    """What a run gives for each of a sample's picked fields, in the stage's order: ``"key"``
    (``__key__``), ``"url"`` (``__url__``), ``"raw"`` (the member's bytes) or ``"int"``
    (``int(bytes)``, the ``cls`` decoder); a stage's plan is made by
    :func:`aisio.core.decode.runs.run_plan`."""

    fields: tuple[str, ...]
    kinds: tuple[str, ...]


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

    Regular: consecutive plain-file members (typeflag ``0``, headers that
    :func:`~aisio.core.format.tar.header.sound_headers` vouches for; each after a pax header
    whose only record is its ``mtime``, or none after any) lying whole in ``buf``, whose names
    are ASCII, NUL-terminated, with keys of one length and no dot (``/`` only in the key), not
    starting with ``_`` or ``.``; every sample has the same suffixes in the same order (no
    repeats) as the first, among them each picked field (as written: a suffix in capitals is
    left to the per-member parser, which lower-cases it). A sample is whole when the next
    sample's first member follows it in the run (its header in ``buf``), so a run never
    includes the shard's last sample.
    """
    if after_key is not None:
        continues = _continues(buf, pos, after_key)
        if continues is not False:
            return continues
    rows = (len(buf) - pos) // BLOCK
    if rows < 2 * min_samples:
        return None
    blocks = np.frombuffer(buf, np.uint8, rows * BLOCK, pos).reshape(rows, BLOCK)
    at = _chain(blocks)
    if len(at) < 2 * min_samples:
        return None
    members = _members(blocks, at)
    shape = _shape(members, min_samples)
    if shape is None:
        return None
    return _run(buf, pos, plan, url, members, shape, min_samples)


def _continues(buf: bytes, pos: int, after_key: str) -> Run | Literal[False] | None:
    """Returns :data:`CONTINUES` when the member at ``buf[pos]`` (after its pax header, if it
    has one) is named ``after_key`` and a dot, None when that pax header's size is unreadable,
    else False."""
    name_at = pos
    if buf[pos + TYPEFLAG:pos + TYPEFLAG + 1] == PAX_HEADER:  # the member's own header follows
        try:
            name_at += BLOCK + (int(buf[pos + SIZE:pos + SIZE_END].strip(b" \0") or b"0", 8)
                                + BLOCK - 1) // BLOCK * BLOCK
        except ValueError:
            return None
    if buf[name_at:name_at + NAME].partition(b".")[0] == after_key.encode(
            "utf-8", "surrogateescape"):
        return CONTINUES
    return False


def _chain(blocks: np.ndarray) -> np.ndarray:
    """Returns the rows of the chain of headers from ``blocks[0]``, each header's size saying
    where the next one is (sizes are read only from the blocks whose typeflag is "0" or "x": a
    data block rarely is)."""
    rows = len(blocks)
    candidates = np.flatnonzero((blocks[:, TYPEFLAG] == _FILE) | (blocks[:, TYPEFLAG] == _PAX))
    steps = np.zeros(rows, np.int64)
    steps[candidates] = 1 + (octal_sizes(blocks[candidates, SIZE:SIZE + 11]) + BLOCK - 1) // BLOCK
    hops = steps.tolist()
    chain = []
    row = 0
    while row < rows:
        hop = hops[row]
        if hop <= 0:
            break
        chain.append(row)
        row += hop
    return np.array(chain, np.int64)


class _Members(NamedTuple):
    """The members of a chain of headers: where each begins (its pax header, if any), its own
    header's row and bytes, and whether that header (and its pax header) is sound."""

    lead: np.ndarray
    at: np.ndarray
    heads: np.ndarray
    sound: np.ndarray


def _members(blocks: np.ndarray, at: np.ndarray) -> _Members:
    """Returns the members of the chain of headers at rows ``at``: each header its own member,
    or, when the first is a pax header (webdataset's TarWriter writes one, its mtime, before
    every member), the headers taken in pairs."""
    heads = blocks[at]
    sound = sound_headers(heads)
    if heads[0, TYPEFLAG] != _PAX:
        return _Members(at, at, heads, sound)
    pairs = len(at) // 2
    pax = heads[:2 * pairs:2]
    lead = at[:2 * pairs:2]
    sound = (sound[:2 * pairs:2] & sound[1:2 * pairs:2] & (pax[:, TYPEFLAG] == _PAX)
             & mtime_only(blocks, lead, pax))
    return _Members(lead, at[1:2 * pairs:2], heads[1:2 * pairs:2], sound)


class _Shape(NamedTuple):
    """The samples of a run: the keys' length, the index of each sample's first member, the
    members a sample has, how many samples are whole and regular, and their suffixes."""

    key_len: int
    starts: np.ndarray
    width: int
    whole: int
    suffixes: list[str]


def _shape(members: _Members, min_samples: int) -> _Shape | None:
    """Returns the shape of the regular samples ``members`` begin with, or None when fewer
    than ``min_samples`` are."""
    names = members.heads[:, :NAME]
    key_len = int((names[0] == _DOT).argmax())
    keys = names[:, :key_len]
    # Per member here; the rest of each name is checked below as equal, byte for byte, to the
    # same member's of the first sample, whose names split_key reads.
    ok = (members.sound & (members.heads[:, TYPEFLAG] == _FILE)
          & (names[:, key_len] == _DOT) & (names[:, 0] != _UNDERSCORE)
          & ~((keys == _DOT) | (keys == 0) | (keys >= 0x80)).any(1))
    bad = np.flatnonzero(~ok)
    count = len(members.at) if len(bad) == 0 else int(bad[0])
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
    suffixes = [name[key_len + 1:].decode("ascii") for name, _, _ in first]
    # (split_key reads each such name so: not "_" first, the key up to its only-ever first dot.)
    if len(set(suffixes)) != width:
        return None
    return _Shape(key_len, starts, width, whole, suffixes)


def _run(buf: bytes, pos: int, plan: RunPlan, url: str, members: _Members, shape: _Shape,
         min_samples: int) -> Run | None:
    """Returns the run of ``shape``'s whole samples: the fields ``plan`` picks from each, or
    None when one of them is missing or fewer than ``min_samples`` samples give them all."""
    key_len, starts, width, whole, suffixes = shape
    at = members.at
    member_rows = at[:whole * width].reshape(whole, width)
    sizes = sizes_of(members.heads[:whole * width]).reshape(whole, width)
    columns: list[list[Any]] = []
    for field, kind in zip(plan.fields, plan.kinds, strict=True):
        if kind == "key":
            columns.append([buf[a:a + key_len].decode("ascii")
                            for a in (at[starts[:whole]] * BLOCK + pos).tolist()])
        elif kind == "url":
            columns.append([url] * whole)
        elif field not in suffixes:
            return None
        else:
            j = suffixes.index(field)
            data_at = (member_rows[:, j] + 1) * BLOCK + pos
            columns.append(_column(buf, kind, data_at, sizes[:, j]))
    whole = min((len(column) for column in columns), default=whole)
    if whole < min_samples:
        return None
    ends = (members.lead[starts[1:whole + 1]] * BLOCK + pos).tolist()
    last = pos + int(at[whole * width - 1]) * BLOCK
    return Run(values=list(zip(*(column[:whole] for column in columns), strict=True)),
               ends=ends, stop=ends[-1], members=whole * width,
               last_name=buf[last:last + NAME].partition(b"\0")[0].decode("ascii"))


def _column(buf: bytes, kind: str, data_at: np.ndarray, sizes: np.ndarray) -> list[Any]:
    """Returns one picked field of each sample: its member's bytes (``"raw"``), or their
    ``int()`` (``"int"``), up to the first sample whose bytes ``int()`` refuses (the run ends
    before it: the stage names that sample)."""
    if kind != "int":
        return [buf[a:b] for a, b in zip(data_at.tolist(), (data_at + sizes).tolist(),
                                         strict=True)]
    numbers = _decimals(buf, data_at, sizes)
    if numbers is not None:
        return numbers
    numbers = []  # not plain digits: as int() reads them, one by one
    for a, n in zip(data_at.tolist(), sizes.tolist(), strict=True):
        try:
            numbers.append(int(buf[a:a + n]))
        except ValueError:
            break
    return numbers


__all__ = ["CONTINUES", "Columns", "Run", "RunPlan", "regular_run"]
