"""WebDataset grouping: tar members to samples.

The rules are those of the ``webdataset`` library (1.0.x):

* a member name splits into a *key* (the directories plus the file name up to its first dot) and
  a *suffix* (everything after that dot, lower-cased): ``train/a.b/0001.seg.PNG`` gives key
  ``train/a.b/0001`` and suffix ``seg.png``;
* names whose file name has no dot are skipped, as are meta files: a top-level name like
  ``__index__`` or anything under a top-level ``__meta__/`` directory (for file names starting
  with a dot, see :func:`split_key`);
* a sample is a run of *consecutive* members sharing a key, and a suffix may appear only once in
  a sample.

:func:`iter_samples` reads a tar stream into samples in one pass: the fast path every loader
takes (see its docstring); :func:`group_samples` groups members already read.
"""

from __future__ import annotations

import re
import struct
import time
import zlib
from collections.abc import Iterable, Iterator
from typing import Any

from aisio.core.faults.errors import AISIOError, ShardFormatError
from aisio.core.format.runs import CONTINUES, Columns, RunPlan, regular_run
from aisio.core.format.tar import BLOCK, BinaryReadable, ShardReader, TarMember
from aisio.core.system import timing

MemberLike = TarMember | tuple[str, bytes]
"""A :class:`TarMember`, or a plain ``(name, data)`` pair (which has no offsets)."""

NO_OFFSET = -1
"""The end offset reported for samples built from plain ``(name, data)`` pairs."""


def _is_meta(name: str) -> bool:
    """Returns whether ``name`` is a WebDataset meta file (``__x__`` or ``__x__/...``)."""
    if not name.startswith("__"):
        return False
    slash = name.find("/")
    if slash < 0:
        return name.endswith("__")
    return slash >= 4 and name[slash - 2 : slash] == "__"


def split_key(name: str) -> tuple[str, str] | None:
    """Returns the ``(key, suffix)`` of a member name, or None when WebDataset skips the member.

    The key is the path up to the first dot of the file name (directories, dots included, are
    kept); the suffix is the rest, lower-cased. Like ``webdataset``, a file name starting with a
    dot keeps its directory as the key (``d/.jpg`` -> ``("d/", "jpg")``) unless that directory's
    own name has a dot or there is no directory (then the member is skipped).

    Args:
        name: a tar member's path.
    """
    if _is_meta(name):
        return None
    slash = name.rfind("/")
    dot = name.find(".", slash + 1)
    if dot < 0:
        return None
    if dot == slash + 1 and (slash < 0 or "." in name[name.rfind("/", 0, slash) + 1 : slash]):
        return None
    return name[:dot], name[dot + 1 :].lower()


def _duplicate(url: str, name: str, suffix: str, key: str, offset: int | None
               ) -> ShardFormatError:
    where = f" at byte {offset}" if offset is not None else ""
    return ShardFormatError(
        f"shard {url} has member {name!r}{where} whose suffix '{suffix}' is already taken in "
        f"sample {key!r}; give every file of a sample a distinct suffix",
        url=url,
        offset=offset,
        member=name,
    )


def group_samples_with_end(
    members: Iterable[MemberLike], *, url: str
) -> Iterator[tuple[dict[str, Any], int]]:
    """Yields ``(sample, end)`` for each sample; ``end`` is where the sample's last member ends.

    A reader that stopped after a sample can restart the shard at ``end`` (a member boundary).
    ``end`` is :data:`NO_OFFSET` (-1) when the members are plain ``(name, data)`` pairs.

    Each sample is a new dict with ``__key__``, ``__url__`` and one entry ``suffix -> bytes`` per
    member. Only one sample is held at a time.

    Args:
        members: tar members in archive order (from :func:`aisio.core.format.tar.iter_tar`).
        url: the shard's name, stored in ``__url__`` and used in error messages.

    Raises:
        ShardFormatError: a suffix repeats within a sample. Before an error (this one, or one
            from ``members``) every sample known to be whole is yielded (the one in progress
            is, when the error names a member of another sample), and the error names in
            ``given_up`` the key of the sample the fault interrupted, not yielded: the one whose
            file the error names, else the one in progress (files of it may lie past the
            fault).
    """
    sample: dict[str, Any] | None = None
    end = NO_OFFSET
    try:
        for member in members:
            if isinstance(member, TarMember):
                name, data, offset, member_end = member
            else:
                name, data = member
                offset, member_end = None, NO_OFFSET
            parts = split_key(name)
            if parts is None:
                continue
            key, suffix = parts
            if sample is None or sample["__key__"] != key:
                if sample is not None:
                    yield sample, end
                sample = {"__key__": key, "__url__": url}
            if suffix in sample:
                raise _duplicate(url, name, suffix, key, offset)
            sample[suffix] = data
            end = member_end
    except AISIOError as exc:
        if getattr(exc, "given_up", None) is None:
            at = getattr(exc, "member", None)
            parts = split_key(at) if at else None
            if sample is not None and parts is not None and parts[0] != sample["__key__"]:
                yield sample, end  # the fault is in another sample's file: this one is whole
            given_up = _given_up(sample, parts)
            if given_up is not None:
                exc.given_up = given_up  # type: ignore[attr-defined]
        raise
    if sample is not None:
        yield sample, end


def _given_up(sample: dict[str, Any] | None, at: tuple[str, str] | None) -> str | None:
    """Returns the key of the sample a fault interrupts: the one whose file it is in (``at``,
    the faulting member's key and suffix, when the error names a member), else the one in
    progress (more of its files may lie past the fault), else None."""
    if at is not None:
        return at[0]
    return None if sample is None else str(sample["__key__"])


def group_samples(members: Iterable[MemberLike], *, url: str) -> Iterator[dict[str, Any]]:
    """Yields the WebDataset samples made of ``members``, in order.

    See :func:`group_samples_with_end`, which this wraps.

    Args:
        members: tar members in archive order (from :func:`aisio.core.format.tar.iter_tar`).
        url: the shard's name, stored in ``__url__`` and used in error messages.

    Raises:
        ShardFormatError: a suffix repeats within a sample.
    """
    for sample, _ in group_samples_with_end(members, url=url):
        yield sample


def iter_samples(
    stream: BinaryReadable,
    *,
    url: str,
    start_offset: int = 0,
    bufsize: int = 1 << 20,
    ends: bool = False,
    fast: bool = True,
    tag: Tag | None = None,
    runs: RunPlan | None = None,
) -> Iterator[Any]:
    """Yields the WebDataset samples of a tar stream, read and grouped in one pass.

    The same samples, offsets and errors as ``group_samples(iter_tar(stream, ...))`` (see
    :func:`aisio.core.format.tar.iter_tar` for the tar formats, compression, offsets and errors, and
    :func:`group_samples_with_end` for the grouping), at a fraction of the cost per member: a
    plain regular-file header (typeflag ``0``, an octal size, no ustar ``prefix``, no extended
    header before it) whose member lies in the read buffer is parsed and checksummed here, and
    its name split here; anything else (pax and GNU long names, other record types, a member
    across the buffer's end, the end of the archive, any header this does not vouch for) goes
    through the general reader (:meth:`aisio.core.format.tar.ShardReader.step`), which also explains
    every error.

    Args:
        stream: a binary file-like with ``read(n)``; short reads are fine.
        url: the shard's name, stored in ``__url__`` and used in error messages.
        start_offset: where a reopened stream starts (see :func:`aisio.core.format.tar.iter_tar`).
        bufsize: how many bytes to read at a time.
        ends: yield ``(sample, end)`` pairs instead of samples, ``end`` being the offset just
            past the sample's last member (where a reader restarts after it).
        fast: False reads every member through the general reader (for tests).
        tag: ``(field, shard, first, skip, extra)``: give each sample its position in
            ``field``, ``(shard, ordinal, end, last)``, counting ordinals from ``first``, and
            the ``extra`` fields; samples whose ordinal is in ``skip`` are read but not
            yielded (a resumed shard task: :func:`aisio.core.pipeline.parse.task_samples`). ``last``
            is True for the shard's final sample only.
        runs: with a ``tag`` whose ``skip`` is empty: where the read buffer holds a run of
            regular samples (:func:`aisio.core.format.runs.regular_run`), yield them at once
            as one :class:`~aisio.core.format.runs.Columns` of the fields ``runs`` picks, in
            place of their dicts (for a loader whose per-sample stage is that pick).

    Raises:
        ShardFormatError: as :func:`aisio.core.format.tar.iter_tar`, or a suffix repeats in a
            sample.
        LoaderUnavailableError: the shard is zstd-compressed and ``zstandard`` is missing.
    """
    if runs is not None and (tag is None or tag[3] or ends or not fast):
        runs = None
    return _scan(ShardReader(stream, url, start_offset, bufsize), url, ends, fast, tag, runs)


Tag = tuple[str, int, int, "frozenset[int] | set[int]", "dict[str, Any]"]
"""What :func:`iter_samples` adds to each sample of a shard task (see its ``tag``)."""


# From a header: the name field, the size's 11 octal digits and the byte after them, the checksum's
# 6 digits and the 2 bytes after them, the typeflag and the first byte of the ustar prefix.
_COMMON = struct.Struct("100s24x11sB12x6sBBB188xB166x")


class _Octal(dict[bytes, int]):
    """Octal fields already parsed, by their bytes (checksums repeat: a lookup costs less than
    ``int(field, 8)``); at most 4,096 of them."""

    def __missing__(self, field: bytes) -> int:
        value = int(field, 8)
        if len(self) >= 4096:
            self.clear()
        self[field] = value
        return value


_CHECKSUMS = _Octal()


def _tail_sum(tail: bytes) -> int:
    """Returns the byte sum of a header's last 356 bytes (``zlib.adler32`` from 0 keeps a byte
    sum below 65,521 exactly in its low 16 bits: ASCII bytes at once, others in two halves)."""
    if tail.isascii():
        return zlib.adler32(tail, 0) & 0xFFFF
    return (zlib.adler32(tail[:178], 0) & 0xFFFF) + (zlib.adler32(tail[178:], 0) & 0xFFFF)


_MTIME_RECORD = re.compile(rb"([1-9][0-9]) mtime=[0-9.]+\n")


def _after_mtime_header(buf: bytes, pos: int, size_d: bytes, chk_d: bytes, limit: int) -> int:
    """Returns where the header after the pax header at ``buf[pos]`` begins, when that pax
    header is sound (its checksum) and holds one record, an ``mtime``, and the header after it
    lies in the buffer; else 0."""
    try:
        size = int(size_d, 8)
        chk = _CHECKSUMS[chk_d]
    except ValueError:
        return 0
    after = pos + 2 * BLOCK
    if not 12 <= size <= 99 or after > limit:
        return 0
    if (zlib.adler32(buf[pos:pos + 148], 0) & 0xFFFF) + _tail_sum(buf[pos + 156:pos + BLOCK]) \
            + 8 * 0x20 != chk:
        return 0
    record = _MTIME_RECORD.fullmatch(buf, pos + BLOCK, pos + BLOCK + size)
    return after if record is not None and int(record[1]) == size else 0


_SMALL = 1 << 15
"""Runs are for samples of this size or less (32 KiB). Once a run, or a member, shows bigger
ones, the rest of the shard goes member by member: a run saves a few microseconds of Python
per sample, nothing beside a 100 KiB member's bytes, while looking for one in every buffer
(where few whole big samples fit) cost more than that (benchmarks/README.md, Figures behind
the code's comments)."""


def _scan(reader: ShardReader, url: str, ends: bool, fast: bool, tag: Tag | None,
          runs: RunPlan | None = None) -> Iterator[Any]:
    """Yields samples (or ``(sample, end)`` pairs) from ``reader`` (see :func:`iter_samples`)."""
    field, shard, ordinal, skip, extra = tag if tag is not None else ("", 0, 0, frozenset(), {})
    unpack_from = _COMMON.unpack_from
    adler32 = zlib.adler32
    checksums = _CHECKSUMS
    step = reader.step
    timer = reader.timer
    clock = time.perf_counter
    # Stage timing (aisio.core.system.timing) as iter_tar keeps it: read = inside stream.read,
    # parse =
    # the rest of the time spent in here; added to the totals every 256 or so members.
    resumed = clock()
    busy = read_before = 0.0
    members = counted = 0
    sample: dict[str, Any] | None = None
    key: str | None = None
    name: Any = None  # the last member's name (str), None before the first
    end = NO_OFFSET
    duplicate = None
    # A header's checksum counts all its 512 bytes. Its last 356 (typeflag, link name, magic,
    # owner, device, prefix) are the same in every header a writer makes for a regular file:
    # their sum is kept with them, and each header whose tail is byte for byte the same needs
    # only its first 148 bytes summed.
    tail = b""
    tail_sum = 0
    closed = False
    tried: bytes | None = None  # the buffer a run was last looked for in
    try:
        try:
            try:
                reader.open()
                src = reader.src
                buf, pos, base = src.buf, src.pos, src.base
                limit = len(buf) - BLOCK if fast else -1
                while True:
                    if runs is not None and buf is not tried and pos <= limit:
                        tried = buf  # once a buffer: a run ends where the buffer stops vouching
                        run = regular_run(buf, pos, runs, url, key)
                        if run is CONTINUES:  # look again after the sample in progress
                            tried = None
                        elif run is not None:
                            # Small samples (32 KiB or less): from now on the buffer is filled
                            # whole (a run's cost is mostly per buffer; big members are better
                            # read as they come, with no joining of reads).
                            src.gather = run.stop - pos <= len(run.values) * _SMALL
                            if not src.gather:
                                runs = None  # big samples: member by member (see _SMALL)
                            busy += clock() - resumed
                            if sample is not None:  # the run's first sample ends this one
                                members += len(sample) - 2
                                sample[field] = (shard, ordinal, end, False)
                                sample.update(extra)
                                yield sample
                                ordinal += 1
                                sample = key = None
                            count = len(run.values)
                            yield Columns(run.values, [
                                (shard, ordinal + i, base + stop, False)
                                for i, stop in enumerate(run.ends)], extra)
                            ordinal += count
                            members += run.members
                            timing.add("decode", 0.0, count)
                            if members - counted >= 256:
                                seconds = timer.seconds
                                _report(busy, seconds - read_before, members - counted)
                                busy, read_before, counted = 0.0, seconds, members
                            resumed = clock()
                            pos, name = run.stop, run.last_name
                            continue
                    ok = False
                    head = pos  # where the member begins: its pax header, if it has one
                    if pos <= limit:
                        (name_f, size_d, size_nul, chk_d, chk_nul, _, typeflag,
                         prefix) = unpack_from(buf, pos)
                        if typeflag == 0x78 and not (size_nul or chk_nul or prefix):  # "x": pax
                            # One record, the mtime, as webdataset's TarWriter writes before every
                            # member: what follows is read as the general reader reads it then.
                            after = _after_mtime_header(buf, pos, size_d, chk_d, limit)
                            if after:
                                pos = after
                                (name_f, size_d, size_nul, chk_d, chk_nul, _, typeflag,
                                 prefix) = unpack_from(buf, pos)
                        if typeflag == 0x30 and not (size_nul or chk_nul or prefix):  # "0": a file
                            try:
                                size = int(size_d, 8)
                                chk = checksums[chk_d]
                            except ValueError:
                                size = -1
                            data_at = pos + BLOCK
                            stop = data_at + ((size + BLOCK - 1) & -BLOCK)
                            if size >= 0 and stop - BLOCK <= limit:
                                header_tail = buf[pos + 156:data_at]
                                if header_tail != tail:
                                    tail, tail_sum = header_tail, _tail_sum(header_tail) + 8 * 0x20
                                if (adler32(buf[pos:pos + 148], 0) & 0xFFFF) + tail_sum == chk:
                                    name = name_f.partition(b"\x00")[0].decode(
                                        "utf-8", "surrogateescape")
                                    data = buf[data_at:data_at + size]
                                    offset = base + head
                                    pos = stop
                                    ok = True
                    if not ok:  # anything else: the general reader, which explains every error
                        src.pos = pos = head
                        reader.last_name = name
                        member = step()
                        if member is None:
                            break
                        name, data, offset, stop = member
                        buf, pos, base = src.buf, src.pos, src.base
                        stop -= base
                        limit = len(buf) - BLOCK if fast else -1
                    # Grouping as group_samples_with_end, with split_key's common case inlined: the
                    # name's first dot is in its file name (no "/" after it), not a meta file's.
                    member_key, dot, suffix = name.partition(".")
                    if dot and member_key and name[0] != "_" and "/" not in suffix:
                        suffix = suffix.lower()
                    else:
                        parts = split_key(name)
                        if parts is None:
                            members += 1
                            continue
                        member_key, suffix = parts
                    if member_key != key:
                        if sample is not None:
                            busy += clock() - resumed
                            members += len(sample) - 2
                            if members - counted >= 256:
                                seconds = timer.seconds
                                _report(busy, seconds - read_before, members - counted)
                                busy, read_before, counted = 0.0, seconds, members
                            if tag is None:  # _finished(..., last=False), inlined: per sample
                                yield (sample, end) if ends else sample
                            else:  # a next sample began: this one is not the shard's last
                                if ordinal not in skip:
                                    sample[field] = (shard, ordinal, end, False)
                                    sample.update(extra)
                                    yield sample
                                ordinal += 1
                            resumed = clock()
                        sample = {"__key__": member_key, "__url__": url}
                        key = member_key
                    if suffix in sample:  # type: ignore[operator]
                        duplicate = _duplicate(url, name, suffix, member_key, offset)
                        raise duplicate
                    sample[suffix] = data  # type: ignore[index]
                    end = base + stop
                    if runs is not None and len(data) > _SMALL:
                        runs = None  # big samples: member by member (see below)
            except ShardFormatError as exc:
                if exc is not duplicate:
                    reader.reraise(exc)
                raise
            reader.finish()
        except AISIOError as exc:  # as group_samples_with_end: the sample in progress
            if getattr(exc, "given_up", None) is None:
                at = getattr(exc, "member", None)
                parts = split_key(at) if at else None
                if (sample is not None and parts is not None
                        and parts[0] != sample["__key__"]):  # the fault is in another sample
                    item = _finished(sample, end, ends, tag, ordinal, last=False)
                    if item is not None:
                        yield item
                given_up = _given_up(sample, parts)
                if given_up is not None:
                    exc.given_up = given_up  # type: ignore[attr-defined]
            raise
        if sample is not None:
            busy += clock() - resumed
            members += len(sample) - 2
            item = _finished(sample, end, ends, tag, ordinal, last=True)
            if item is not None:
                yield item
    except GeneratorExit:
        # Closed unfinished: dropped by a loop that stopped, or collected later, maybe while
        # another epoch (or loader) runs in this process; what it did since its last report
        # is left out rather than counted there.
        closed = True
        raise
    finally:
        if not closed:
            _report(busy, timer.seconds - read_before, members - counted)


def _finished(sample: dict[str, Any], end: int, ends: bool, tag: Tag | None, ordinal: int, *,
              last: bool) -> Any:
    """Returns what :func:`_scan` yields for a finished sample: the sample, ``(sample, end)``,
    or (with a ``tag``) the sample with its position and extra fields; None when the tag
    skips its ordinal."""
    if tag is None:
        return (sample, end) if ends else sample
    field, shard, _, skip, extra = tag
    if ordinal in skip:
        return None
    sample[field] = (shard, ordinal, end, last)
    sample.update(extra)
    return sample


def _report(busy: float, read: float, members: int) -> None:
    """Adds to the process's stage totals: ``read`` seconds reading, the rest of ``busy``
    parsing ``members`` tar members."""
    timing.add("read", read, 0)
    timing.add("parse", busy - read, members)
    timing.flush()


__all__ = [
    "NO_OFFSET",
    "MemberLike",
    "group_samples",
    "group_samples_with_end",
    "iter_samples",
    "split_key",
]
