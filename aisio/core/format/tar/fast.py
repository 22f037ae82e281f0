"""The fast path: a tar stream's members read straight from the read buffer, many at a call.

Most members of a WebDataset shard are plain files whose headers all look alike.
:func:`plain_members` reads those (a plain regular-file header, typeflag ``0``, an octal size,
no ustar ``prefix``, no extended header before it but a pax header holding only an ``mtime``,
its member whole in the buffer) with :data:`~.header.COMMON` and checks each checksum exactly;
:func:`batches` hands the general reader (:meth:`.stream.ShardReader.step`) everything else
(pax and GNU long names, other record types, a member across the buffer's end, the end of the
archive, any header the fast path does not vouch for), so every error is still the general
reader's, and asks :func:`.runs.regular_run` for runs of whole samples where a loader wants
them. The fast path reads the same members, offsets and errors as the general reader
(``tests/unit/core/format/test_samples_against_tarfile.py``).
"""

from __future__ import annotations

import zlib
from collections.abc import Generator

from aisio.core.faults.errors import ShardFormatError
from aisio.core.format.tar.header import (
    BLOCK,
    CHECKSUMS,
    CHKSUM,
    CHKSUM_END,
    COMMON,
    after_mtime_header,
    tail_sum,
)
from aisio.core.format.tar.runs import CONTINUES, Run, RunPlan, regular_run
from aisio.core.format.tar.stream import ShardReader

Member = tuple[str, bytes, int, int]
"""A member as the fast path gives it: name, data, offset and end, as in a ``TarMember``."""

Batch = list[Member] | tuple[Run, int]
"""What :func:`batches` yields: members, or a run and the shard offset of its buffer's start."""

BATCH = 64
"""The most members :func:`batches` reads from the buffer before handing them on (a bound on
the bytes held twice: in the buffer and in the members' data)."""

SMALL = 1 << 15
"""Runs are for samples of this size or less (32 KiB). Once a run, or a member, shows bigger
ones, the rest of the shard goes member by member: a run saves a few microseconds of Python
per sample, nothing beside a 100 KiB member's bytes, while looking for one in every buffer
(where few whole big samples fit) cost more than that (benchmarks/README.md, Figures behind
the code's comments)."""


def plain_members(buf: bytes, pos: int, limit: int, base: int, most: int,
                  out: list[Member]) -> int:
    """Appends to ``out`` the plain members that begin at ``buf[pos]``, at most ``most`` of
    them, and returns where the first header it does not read begins.

    Args:
        buf: the read buffer.
        pos: where a member (its header, or the pax header before it) begins in ``buf``.
        limit: the last position in ``buf`` where a whole header fits (``len(buf) - 512``).
        base: the shard offset of ``buf[0]``.
        most: how many members to read at most.
        out: where each member goes, as ``(name, data, offset, end)``.
    """
    unpack_from = COMMON.unpack_from
    adler32 = zlib.adler32
    checksums = CHECKSUMS
    append = out.append
    tail = b""  # a header's last 356 bytes, the same in every header a writer makes: their sum
    tail_total = 0
    for _ in range(most):
        if pos > limit:
            break
        head = pos  # where the member begins: its pax header, if it has one
        name_f, size_d, size_nul, chk_d, chk_nul, _, typeflag, prefix = unpack_from(buf, pos)
        if typeflag == 0x78 and not (size_nul or chk_nul or prefix):  # "x": pax
            pos = after_mtime_header(buf, pos, size_d, chk_d, limit)
            if not pos:
                return head
            name_f, size_d, size_nul, chk_d, chk_nul, _, typeflag, prefix = unpack_from(buf, pos)
        if typeflag != 0x30 or size_nul or chk_nul or prefix:  # "0": a plain file
            return head
        try:
            size = int(size_d, 8)
            chk = checksums[chk_d]
        except ValueError:
            return head
        data_at = pos + BLOCK
        stop = data_at + ((size + BLOCK - 1) & -BLOCK)
        if size < 0 or stop - BLOCK > limit:
            return head
        header_tail = buf[pos + CHKSUM_END:data_at]
        if header_tail != tail:
            tail, tail_total = header_tail, tail_sum(header_tail) + 8 * 0x20
        if (adler32(buf[pos:pos + CHKSUM], 0) & 0xFFFF) + tail_total != chk:
            return head
        append((name_f.partition(b"\x00")[0].decode("utf-8", "surrogateescape"),
                buf[data_at:data_at + size], base + head, base + stop))
        pos = stop
    return pos


def batches(reader: ShardReader, url: str, fast: bool, runs: RunPlan | None
            ) -> Generator[Batch | None, str | None, None]:
    """Yields the members of ``reader``'s tar stream in batches, then None; send it the key of
    the sample in progress (None to start). Raises ShardFormatError as :func:`.stream.iter_tar`.

    A batch is a list of members (``TarMember`` or the fast path's tuples of the same fields),
    or, with ``runs``, a ``(Run, base)`` of whole samples (:func:`.runs.regular_run`), looked
    for once a buffer, which ends the sample in progress. ``url`` is the shard's ``__url__``;
    ``fast`` False reads every member through the general reader (for tests).
    """
    try:
        reader.open()
        src = reader.src
        buf, pos, base = src.buf, src.pos, src.base
        limit = len(buf) - BLOCK if fast else -1
        tried: bytes | None = None  # the buffer a run was last looked for in
        name: str | None = None  # the last member's name, None before the first
        key = yield []
        while True:
            if runs is not None and buf is not tried and pos <= limit:
                tried = buf  # once a buffer: a run ends where the buffer stops vouching
                run = regular_run(buf, pos, runs, url, key)
                if run is CONTINUES:  # look again after the sample in progress
                    tried = None
                elif run is not None:
                    # Small samples: from now on the buffer is filled whole (a run's cost is
                    # mostly per buffer; big members are better read as they come).
                    src.gather = run.stop - pos <= len(run.values) * SMALL
                    if not src.gather:
                        runs = None  # big samples: member by member (see SMALL)
                    key = yield run, base
                    pos, name = run.stop, run.last_name
                    continue
            most = 1 if runs is not None and tried is None else BATCH
            batch: list[Member] = []
            pos = plain_members(buf, pos, limit, base, most, batch)
            if batch:
                if runs is not None and any(len(member[1]) > SMALL for member in batch):
                    runs = None  # big samples: member by member (see SMALL)
                name = batch[-1][0]
                key = yield batch
                if len(batch) == most:
                    continue
            src.pos = pos  # anything else: the general reader, which explains every error
            reader.last_name = name
            member = reader.step()
            if member is None:
                break
            name = member.name
            if runs is not None and len(member.data) > SMALL:
                runs = None
            buf, pos, base = src.buf, src.pos, src.base
            limit = len(buf) - BLOCK if fast else -1
            key = yield [member]
    except ShardFormatError as exc:
        reader.reraise(exc)
        raise
    reader.finish()
    yield None

