"""The general reader of a tar stream: every header kind, every error.

:func:`iter_tar` reads the stream in large chunks and yields the regular files of the archive
as :class:`TarMember` tuples, each header read and checked by :mod:`.header`.
:class:`ShardReader` is the reader it steps: the fast path (:mod:`.fast`) reads plain members
from its buffer and hands it everything else.

Memory stays bounded by about one member plus one read buffer, whatever the size of the shard.
Every structural problem (bad checksum, non-tar data, truncation, garbage sizes) raises
:class:`~aisio.core.faults.errors.ShardFormatError` carrying the byte offset and, when known, the
member.
"""

from __future__ import annotations

import io
import time
import zlib
from collections.abc import Callable, Iterator
from typing import NamedTuple, Protocol

from aisio.core.faults.errors import ShardFormatError
from aisio.core.format.compression import DecompressedStream, open_shard
from aisio.core.format.tar.header import (
    BLOCK,
    GNU_LONGLINK,
    GNU_LONGNAME,
    GNU_SPARSE,
    HEADER,
    HINT_CORRUPT,
    HINT_SPARSE,
    HINT_TRUNCATED,
    MAX_META_SIZE,
    NO_CHECKSUM,
    NO_DATA_TYPES,
    PAX_GLOBAL,
    PAX_HEADER,
    REGULAR_TYPES,
    USTAR_MAGIC,
    ZERO_BLOCK,
    Pending,
    check_header,
    check_short_object,
    decode_name,
    error,
    member_size,
    parse_pax,
    pax_path,
    where,
)
from aisio.core.system import timing


class TarMember(NamedTuple):
    """A regular file read from a tar shard.

    Attributes:
        name: the member's path inside the archive (long-name and pax records applied).
        data: the member's content.
        offset: byte offset in the shard of the member's first header, including any GNU
            long-name or pax extended headers that precede it.
        end: byte offset just past the member's padded data (where the next header starts).
    """

    name: str
    data: bytes
    offset: int
    end: int


class BinaryReadable(Protocol):
    """Anything with a ``read(n)`` method returning bytes (short reads allowed, ``b""`` at EOF)."""

    def read(self, size: int = ..., /) -> bytes | None:
        """Returns up to ``size`` bytes."""
        ...


class _Source:
    """Buffered view of a stream: a bytes buffer, a read position and absolute offsets.

    Attributes:
        buf: bytes read but not yet consumed start at ``buf[pos]``.
        pos: read position in ``buf``.
        base: absolute shard offset of ``buf[0]``.
    """

    __slots__ = ("_deferred", "_read", "base", "buf", "bufsize", "gather", "pos")

    def __init__(self, read: Callable[[int], bytes | None], start_offset: int, bufsize: int,
                 gather: bool = False):
        self._read = read
        self.bufsize = bufsize
        self.gather = gather
        self._deferred: BaseException | None = None  # a gathering read's error, not yet due
        self.buf = b""
        self.pos = 0
        self.base = start_offset

    def fill(self, need: int) -> int:
        """Returns the bytes available after reading until ``need`` are buffered or EOF."""
        rest = self.buf[self.pos :]
        self.base += self.pos
        self.pos = 0
        chunks = [rest] if rest else []
        have = len(rest)
        read = self._read
        # With bytes left over, read only what completes them: joining them with a whole new
        # chunk would copy that chunk once more (a sixth of the time on 100 KiB members:
        # benchmarks/README.md, Figures behind the code's comments).
        size = 0 if rest else self.bufsize
        want = max(need, self.bufsize) if self.gather else need
        if self._deferred is not None:
            error, self._deferred = self._deferred, None
            raise error
        while have < want:
            try:
                chunk = read(max(size, want - have))
            except Exception as exc:
                if have < need:
                    raise
                # Gathering beyond what is needed: the bytes read so far are parsed first, and
                # the error raised when more are needed, as without gathering.
                self._deferred = exc
                break
            if not chunk:
                break
            chunks.append(chunk)
            have += len(chunk)
        self.buf = b"".join(chunks)
        return have

    def take(self, size: int) -> bytes:
        """Returns the next ``size`` bytes (fewer only at EOF), buffered or read directly."""
        available = len(self.buf) - self.pos
        if available >= size:
            data = self.buf[self.pos : self.pos + size]
            self.pos += size
            return data
        if size <= self.bufsize:
            available = self.fill(size)
            data = self.buf[:size]
            self.pos = min(size, available)
            return data
        return self._take_direct(size)

    def _take_direct(self, size: int) -> bytes:
        """Returns the next ``size`` bytes (fewer only at EOF), read around the buffer."""
        out = io.BytesIO()
        out.write(self.buf[self.pos :])
        have = len(self.buf) - self.pos
        start = self.base + self.pos
        self.buf = b""
        self.pos = 0
        read = self._read
        chunk_size = self.bufsize
        while have < size:
            chunk = read(min(chunk_size, size - have))
            if not chunk:
                break
            out.write(chunk)
            have += len(chunk)
        self.base = start + have
        return out.getvalue()

    @property
    def offset(self) -> int:
        """Returns the absolute shard offset of the next unread byte."""
        return self.base + self.pos


def iter_tar(
    stream: BinaryReadable,
    *,
    url: str | None = None,
    start_offset: int = 0,
    bufsize: int = 1 << 20,
) -> Iterator[TarMember]:
    """Yields the regular files of a tar stream, plain or compressed, as :class:`TarMember`.

    A stream read from its start (``start_offset`` 0) may be gzip, bzip2, xz or zstd
    compressed: it is recognised by its first bytes, whatever its name, and decompressed as it
    streams (see :mod:`aisio.core.format.compression`). Offsets then count bytes of the decompressed
    tar, and error messages say so. The rest is as for a plain tar, below.

    Directories, links, devices, FIFOs and GNU long-link records are skipped; GNU long names,
    pax ``path``/``size`` records and the ustar ``prefix`` field are applied to the member that
    follows. Names are decoded as UTF-8 (undecodable bytes become surrogate escapes). Every
    header's checksum is verified.

    Reading stops at the first all-zero block (end of archive) or at a clean end of stream on a
    header boundary. A zero-byte stream (from ``start_offset`` 0) is no tar at all: an error, as
    is any stream shorter than one tar header that does not start like one.

    Args:
        stream: a binary file-like with ``read(n)``; short reads are fine.
        url: the shard's name, used in error messages.
        start_offset: added to every reported offset; pass the byte at which the stream starts
            when it was reopened at a member boundary (an HTTP ``Range`` request). Such a stream
            is taken to be plain tar.
        bufsize: how many bytes to read at a time; members larger than this are read straight
            from the stream.

    Raises:
        ShardFormatError: the stream is not a tar archive, a header is corrupt, the stream ends
            inside a header or a member, or the compressed data is corrupt or ends early.
            ``offset`` and (when known) ``member`` are set.
        LoaderUnavailableError: the shard is zstd-compressed and ``zstandard`` is missing.
    """
    return _members(stream, url, start_offset, bufsize)


def _members(stream: BinaryReadable, url: str | None, start_offset: int, bufsize: int
             ) -> Iterator[TarMember]:
    """Yields the members of ``stream`` (see :func:`iter_tar`), timing the stages."""
    reader = ShardReader(stream, url, start_offset, bufsize)
    times = StageTimes(reader.timer)
    clock = time.perf_counter
    parse = 0.0  # seconds spent producing members since the last report, reads included
    count = 0
    closed = False
    try:
        start = clock()
        try:
            reader.open()
        finally:
            parse += clock() - start
        while True:
            start = clock()
            try:
                member = reader.step()
            except ShardFormatError as exc:
                reader.reraise(exc)
                raise
            finally:
                parse += clock() - start
            if member is None:
                reader.finish()
                return
            count += 1
            if count & 255 == 0:
                times.report(parse, 256)
                parse = 0.0
            yield member
    except GeneratorExit:  # closed unfinished: not counted (see StageTimes)
        closed = True
        raise
    finally:
        if not closed:
            times.report(parse, count & 255)


class StageTimes:
    """One shard's stage times (:mod:`aisio.core.system.timing`): ``read``, the seconds inside
    the stream's ``read``, and ``parse``, the rest of the time spent producing its members,
    added to the process's totals every 256 or so members and at the end. A reader closed
    unfinished (dropped by a loop that stopped, or collected later, maybe while another epoch
    or loader runs in this process) leaves out what it did since its last report rather than
    count it there."""

    __slots__ = ("_read_before", "_timer")

    def __init__(self, timer: _TimedReader) -> None:
        self._timer = timer
        self._read_before = 0.0

    def report(self, busy: float, members: int) -> None:
        """Adds ``members`` parsed in ``busy`` seconds, the reads since the last report among
        them, to the process's totals."""
        seconds = self._timer.seconds
        read = seconds - self._read_before
        self._read_before = seconds
        timing.add("read", read, 0)
        timing.add("parse", busy - read, members)
        timing.flush()


class _TimedReader:
    """A stream's ``read`` that adds up the seconds spent in it."""

    __slots__ = ("_read", "seconds")

    def __init__(self, stream: BinaryReadable) -> None:
        self._read = stream.read
        self.seconds = 0.0

    def read(self, size: int = -1, /) -> bytes | None:
        start = time.perf_counter()
        try:
            return self._read(size)
        finally:
            self.seconds += time.perf_counter() - start


class ShardReader:
    """One tar stream being read: its buffer, the state extended headers carry over, and the
    general reader (:meth:`step`), which handles every header kind and every error.

    :func:`iter_tar` calls :meth:`step` for each member; the fast path
    (:func:`aisio.core.format.tar.fast.batches`) reads plain members itself, straight from
    ``src``, and calls :meth:`step` for everything else.

    Attributes:
        url: the shard's name, for error messages.
        src: the buffered tar stream (set by :meth:`open`).
        timer: the raw stream's reads, timed.
        last_name: the last member read (named in a later header's error).
    """

    __slots__ = ("_pending", "bufsize", "decompressed", "gather", "last_name", "src",
                 "start_offset", "stream", "timer", "url")

    def __init__(self, stream: BinaryReadable, url: str | None, start_offset: int,
                 bufsize: int, *, gather: bool = False) -> None:
        self.stream = stream
        self.url = url
        self.start_offset = start_offset
        self.bufsize = bufsize
        #: refill the buffer to ``bufsize`` bytes, however many reads that takes (for runs of
        #: small samples: a run's cost is mostly per buffer), not to what one read gives
        self.gather = gather
        self.timer = _TimedReader(stream)
        self.src = _Source(self.timer.read, start_offset, bufsize, gather)
        self.decompressed: DecompressedStream | None = None
        self.last_name: str | None = None
        self._pending = Pending()

    def open(self) -> None:
        """Checks the arguments and recognises a compressed stream (reading its first bytes)."""
        if self.bufsize < BLOCK:
            raise ValueError(f"bufsize must be at least {BLOCK}, got {self.bufsize}")
        if self.start_offset:
            return  # reopened at a member boundary: plain tar
        tar_stream, self.decompressed = open_shard(self.timer, url=self.url)
        self.src = _Source(tar_stream.read, 0, self.bufsize, self.gather)

    def reraise(self, exc: ShardFormatError) -> None:
        """Raises what to report instead of ``exc``, an error met while reading the tar of a
        compressed stream: the compressed stream's own fault, or ``exc`` saying that its
        offsets count bytes of the decompressed tar. Returns when ``exc`` stands as it is."""
        decompressed, url = self.decompressed, self.url
        if decompressed is None:
            return
        if decompressed.ended_early and "truncated" not in exc.message:
            decompressed.check_complete()  # the cause: the compressed stream ended early
        head = f"shard {where(url)} "
        if exc.message.startswith(head) and "decompressed" not in exc.message:
            raise ShardFormatError(
                f"{head}({decompressed.compression}-compressed; offsets count bytes of the "
                f"decompressed tar) {exc.message[len(head):]}",
                url=exc.url, offset=exc.offset, member=exc.member,
            ) from exc

    def finish(self) -> None:
        """Raises ShardFormatError if a compressed stream ended before its end marker."""
        if self.decompressed is not None:
            self.decompressed.check_complete()

    def _refill(self) -> bool:
        """Returns whether a whole header is buffered after reading more, False at a clean end
        of the stream; raises ShardFormatError at any other end."""
        src = self.src
        available = src.fill(BLOCK)
        if available >= BLOCK:
            return True
        if src.base == 0 and self.start_offset == 0:
            check_short_object(src.buf[:available], self.url)
        _check_clean_eof(src, available, self._pending, self.url)
        return False

    def step(self) -> TarMember | None:
        """Returns the next regular file at ``src``'s position (extended headers applied,
        directories and links skipped), or None at the end of the archive."""
        src = self.src
        pending = self._pending
        url = self.url
        while True:
            buf = src.buf
            pos = src.pos
            if len(buf) - pos < BLOCK:
                if not self._refill():
                    return None
                buf = src.buf
                pos = 0
            header_offset = src.base + pos
            name_f, size_f, chksum_f, typeflag, magic, prefix_f = HEADER.unpack_from(buf, pos)
            if chksum_f == NO_CHECKSUM and buf[pos : pos + BLOCK] == ZERO_BLOCK:
                return None
            # A quick check first; check_header re-checks strictly and explains what is wrong.
            try:
                chksum = int(chksum_f.partition(b"\x00")[0], 8)
            except ValueError:
                chksum = -1
            if (
                chksum
                != (zlib.adler32(buf[pos : pos + 256], 0) & 0xFFFF)
                + (zlib.adler32(buf[pos + 256 : pos + BLOCK], 0) & 0xFFFF)
                - sum(chksum_f)
                + 8 * 0x20
            ):
                check_header(buf, pos, chksum_f, header_offset, self.last_name, url)
            raw_name = name_f.partition(b"\x00")[0]
            if magic == USTAR_MAGIC and prefix_f[0]:
                raw_name = prefix_f.partition(b"\x00")[0] + b"/" + raw_name
            name = self.last_name = raw_name.decode("utf-8", "surrogateescape")
            try:
                size = int(size_f.partition(b"\x00")[0], 8)
            except ValueError:
                size = -1
            if size < 0 or pending.pax_size is not None:
                size = member_size(size_f, typeflag, pending, name, header_offset, url)
            src.pos = pos + BLOCK
            padded = (size + BLOCK - 1) & ~(BLOCK - 1)
            if typeflag in REGULAR_TYPES:
                name = self.last_name = pending.pax_path or pending.longname or name
                if typeflag == b"\x00" and name.endswith("/"):
                    pending.clear()  # an old-style (V7) directory
                    continue
                if len(buf) - pos - BLOCK >= padded:
                    data = buf[pos + BLOCK : pos + BLOCK + size]
                    src.pos = pos + BLOCK + padded
                else:
                    data = _read_data(src, size, padded, name, url)
                offset = header_offset if pending.offset is None else pending.offset
                pending.clear()
                return TarMember(name, data, offset, src.base + src.pos)
            if typeflag in NO_DATA_TYPES:
                pending.clear()
            else:
                _read_extension(src, typeflag, size, padded, pending, header_offset, name, url)


def _check_clean_eof(src: _Source, available: int, pending: Pending, url: str | None) -> None:
    """Raises unless the stream ended on a header boundary with no extended header pending."""
    if available:
        raise error(
            url,
            src.base + available,
            f"is truncated at byte {src.base + available} inside a tar header "
            f"({available} of {BLOCK} bytes present)",
            HINT_TRUNCATED,
        )
    if pending.offset is not None:
        name = pending.pax_path or pending.longname
        raise error(
            url,
            src.base,
            f"is truncated at byte {src.base} right after the extended header of member "
            f"{name!r}, which is missing",
            HINT_TRUNCATED,
            name,
        )


def _read_data(src: _Source, size: int, padded: int, name: str, url: str | None,
               *, header: bool = False) -> bytes:
    """Returns the ``size`` data bytes of member ``name`` and consumes its padding. With
    ``header`` the record is a pax extended header: a truncation names the member it
    describes (its ``path`` record, when the bytes that arrived hold it), not the header's
    placeholder name (``././@PaxHeader``)."""
    start = src.offset
    data = src.take(size)
    if len(data) == size:
        pad = padded - size
        if not pad or len(src.take(pad)) == pad:
            return data
        got = src.offset - start
    else:
        got = len(data)
    where = f"inside member {name!r}"
    member: str | None = name
    if header:
        member = pax_path(data)
        where = (f"inside the extended header of member {member!r}" if member is not None
                 else "inside an extended header, before the member it names")
    raise error(
        url,
        start + got,
        f"is truncated at byte {start + got} {where} (expected {padded - got} more bytes)",
        HINT_TRUNCATED,
        member,
    )


def _read_extension(
    src: _Source,
    typeflag: bytes,
    size: int,
    padded: int,
    pending: Pending,
    offset: int,
    name: str,
    url: str | None,
) -> None:
    """Consumes a non-regular record: stores extended-header info or skips the data."""
    if typeflag == GNU_SPARSE:
        raise error(
            url,
            offset,
            f"has a sparse member {name!r} at byte {offset}, which aisio does not support",
            HINT_SPARSE,
            name,
        )
    is_meta = typeflag in (GNU_LONGNAME, PAX_HEADER)
    if is_meta and size > MAX_META_SIZE:
        raise error(
            url,
            offset,
            f"has an extended header of {size} bytes at byte {offset} (at most "
            f"{MAX_META_SIZE} allowed)",
            HINT_CORRUPT,
        )
    if is_meta:
        data = _read_data(src, size, padded, name, url, header=typeflag == PAX_HEADER)
        if pending.offset is None:
            pending.offset = offset
        if typeflag == GNU_LONGNAME:
            pending.longname = decode_name(data.partition(b"\x00")[0])
        else:
            parse_pax(data, pending, url, offset)
        return
    if typeflag == GNU_LONGLINK:
        if pending.offset is None:
            pending.offset = offset
    elif typeflag != PAX_GLOBAL:
        pending.clear()  # an unknown record type: skip it along with its data
    _skip(src, padded, name, url)


def _skip(src: _Source, count: int, name: str, url: str | None) -> None:
    """Consumes ``count`` bytes of record ``name`` without keeping more than a buffer."""
    start = src.offset
    remaining = count
    while remaining:
        step = min(remaining, src.bufsize)
        got = len(src.take(step))
        remaining -= got
        if got < step:
            raise error(
                url,
                start + count - remaining,
                f"is truncated at byte {start + count - remaining} inside record {name!r} "
                f"(expected {remaining} more bytes)",
                HINT_TRUNCATED,
                name,
            )


__all__ = ["BinaryReadable", "ShardReader", "StageTimes", "TarMember", "iter_tar"]
