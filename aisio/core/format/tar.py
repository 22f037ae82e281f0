"""A fast streaming reader for tar shards.

:func:`iter_tar` parses 512-byte tar headers itself instead of going through :mod:`tarfile`, reads
the stream in large chunks and yields the regular files of the archive as :class:`TarMember`
tuples. It understands the formats WebDataset shards are written in: V7, ustar (with the
``prefix`` field), GNU (long names, base-256 sizes) and pax (``path`` and ``size`` records).

Memory stays bounded by about one member plus one read buffer, whatever the size of the shard.
Every structural problem (bad checksum, non-tar data, truncation, garbage sizes) raises
:class:`~aisio.core.faults.errors.ShardFormatError` carrying the byte offset and, when known, the
member.
"""

from __future__ import annotations

import io
import re
import struct
import time
import zlib
from collections.abc import Callable, Iterator
from typing import NamedTuple, Protocol

from aisio.core.faults.errors import BAD_SHARD_HINT, ShardFormatError
from aisio.core.format.compression import DecompressedStream, known_non_tar, open_shard
from aisio.core.system import timing

BLOCK = 512
"""Size of a tar block: headers are one block, member data is padded to a multiple of it."""

_MAX_META_SIZE = 1 << 20
"""Largest GNU long name or pax extended header accepted (a larger one means a corrupt shard)."""

# name, size, chksum, typeflag, magic, prefix (mode/uid/gid, mtime, linkname, ... skipped).
_HEADER = struct.Struct("100s24x12s12x8sc100x6s2x32x32x8x8x155s12x")
_ZERO_BLOCK = bytes(BLOCK)
_NO_CHECKSUM = bytes(8)
_USTAR_MAGIC = b"ustar\x00"

_REGULAR_TYPES = frozenset((b"0", b"\x00", b"7"))
_NO_DATA_TYPES = frozenset((b"1", b"2", b"3", b"4", b"5", b"6"))
_GNU_LONGNAME = b"L"
_GNU_LONGLINK = b"K"
_PAX_HEADER = b"x"
_PAX_GLOBAL = b"g"
_GNU_SPARSE = b"S"
_META_TYPES = frozenset((_GNU_LONGNAME, _GNU_LONGLINK, _PAX_HEADER, _PAX_GLOBAL))

_HINT_TRUNCATED = BAD_SHARD_HINT
_HINT_CORRUPT = BAD_SHARD_HINT
_HINT_NOT_TAR = "check that the object is a tar (WebDataset) shard, plain or gzip/bzip2/xz/zstd"


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


class _Pending:
    """Extended-header state carried over to the member that follows.

    Attributes:
        offset: offset of the first extended header, or None when there is none.
        longname: a GNU long name ('L' record).
        pax_path: a pax ``path`` record.
        pax_size: a pax ``size`` record.
    """

    __slots__ = ("longname", "offset", "pax_path", "pax_size")

    def __init__(self) -> None:
        self.offset: int | None = None
        self.longname: str | None = None
        self.pax_path: str | None = None
        self.pax_size: int | None = None

    def clear(self) -> None:
        """Forgets everything (once the member they apply to has been read)."""
        self.offset = None
        self.longname = None
        self.pax_path = None
        self.pax_size = None


def _where(url: str | None) -> str:
    return url if url is not None else "<stream>"


def _error(
    url: str | None, offset: int, what: str, hint: str, member: str | None = None
) -> ShardFormatError:
    """Returns a ShardFormatError for ``shard <url> <what>; <hint>``."""
    return ShardFormatError(
        f"shard {_where(url)} {what}; {hint}", url=url, offset=offset, member=member
    )


def _parse_number(field: bytes) -> int:
    """Returns the value of a numeric header field (octal text or GNU base-256).

    Raises:
        ValueError: when the field is neither.
    """
    if field and field[0] & 0x80:
        if field[0] == 0x80:
            return int.from_bytes(field[1:], "big")
        if field[0] == 0xFF:
            return int.from_bytes(field[1:], "big") - 256 ** (len(field) - 1)
        raise ValueError("bad base-256 marker")
    end = field.find(b"\x00")
    if end >= 0:
        field = field[:end]
    field = field.strip()
    if not field:
        return 0
    if not field.isdigit():
        raise ValueError("not octal")
    return int(field, 8)


def _checksum_ok(header: memoryview, chksum_field: bytes, expected: int) -> bool:
    """Returns whether ``expected`` matches the unsigned or signed checksum of ``header``."""
    # adler32 started at 0 keeps the plain byte sum in its low 16 bits while that sum stays
    # below 65521; 256 bytes sum to at most 65280, so two halves give the exact total.
    total = (zlib.adler32(header[:256], 0) & 0xFFFF) + (zlib.adler32(header[256:], 0) & 0xFFFF)
    unsigned = total - sum(chksum_field) + 8 * 0x20
    if expected == unsigned:
        return True
    # Some old tars summed signed chars; tarfile accepts those too.
    high = sum(1 for byte in header.tobytes() if byte >= 0x80)
    high -= sum(1 for byte in chksum_field if byte >= 0x80)
    return expected == unsigned - 256 * high


def _decode_name(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _parse_pax(data: bytes, pending: _Pending, url: str | None, offset: int) -> None:
    """Stores the ``path`` and ``size`` records of a pax extended header in ``pending``."""
    pos = 0
    while pos < len(data) and data[pos] != 0:
        space = data.find(b" ", pos, pos + 24)
        length = int(data[pos:space]) if space > pos and data[pos:space].isdigit() else 0
        end = pos + length
        if length <= space - pos + 1 or end > len(data) or data[end - 1] != 0x0A:
            raise _error(
                url, offset, f"has a malformed pax extended header at byte {offset}", _HINT_CORRUPT
            )
        key, equals, value = data[space + 1 : end - 1].partition(b"=")
        if not equals:
            raise _error(url, offset, f"has a malformed pax record at byte {offset}", _HINT_CORRUPT)
        if key == b"path":
            pending.pax_path = _decode_name(value)
        elif key == b"size":
            if not value.isdigit():
                raise _error(
                    url,
                    offset,
                    f"has an invalid pax size {value!r} at byte {offset}",
                    _HINT_CORRUPT,
                )
            pending.pax_size = int(value)
        elif key.startswith(b"GNU.sparse."):
            raise _error(
                url,
                offset,
                f"has a sparse member at byte {offset}, which aisio does not support",
                "rewrite the shard without sparse files",
            )
        pos = end


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
    reader = ShardReader(stream, url, start_offset, bufsize)
    timer = reader.timer
    # Stage timing (aisio.core.system.timing): read = inside stream.read, parse = the rest of the
    # time
    # spent producing members; added to the process totals every 256 members and at the end.
    clock = time.perf_counter
    parse = read_before = 0.0
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
                timing.add("read", timer.seconds - read_before, 0)
                timing.add("parse", parse - (timer.seconds - read_before), 256)
                read_before = timer.seconds
                parse = 0.0
                timing.flush()
            yield member
    except GeneratorExit:  # closed unfinished: not counted (see aisio.core.format.samples._scan)
        closed = True
        raise
    finally:
        if not closed:
            read = timer.seconds - read_before
            timing.add("read", read, 0)
            timing.add("parse", parse - read, count & 255)
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
    (:func:`aisio.core.format.samples.iter_samples`) parses common members itself, straight from
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
        self._pending = _Pending()

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
        head = f"shard {_where(url)} "
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
                available = src.fill(BLOCK)
                buf = src.buf
                pos = 0
                if available < BLOCK:
                    if src.base == 0 and self.start_offset == 0:
                        _check_short_object(buf[:available], url)
                    _check_clean_eof(src, available, pending, url)
                    return None
            header_offset = src.base + pos
            name_f, size_f, chksum_f, typeflag, magic, prefix_f = _HEADER.unpack_from(buf, pos)
            if chksum_f == _NO_CHECKSUM and buf[pos : pos + BLOCK] == _ZERO_BLOCK:
                return None
            # A quick check first; _check_header re-checks strictly and explains what is wrong.
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
                _check_header(buf, pos, chksum_f, header_offset, self.last_name, url)
            raw_name = name_f.partition(b"\x00")[0]
            if magic == _USTAR_MAGIC and prefix_f[0]:
                raw_name = prefix_f.partition(b"\x00")[0] + b"/" + raw_name
            name = self.last_name = raw_name.decode("utf-8", "surrogateescape")
            try:
                size = int(size_f.partition(b"\x00")[0], 8)
            except ValueError:
                size = -1
            if size < 0 or pending.pax_size is not None:
                size = _member_size(size_f, typeflag, pending, name, header_offset, url)
            src.pos = pos + BLOCK
            padded = (size + BLOCK - 1) & ~(BLOCK - 1)
            if typeflag in _REGULAR_TYPES:
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
            if typeflag in _NO_DATA_TYPES:
                pending.clear()
            else:
                _read_extension(src, typeflag, size, padded, pending, header_offset, name, url)


def _looks_like_header_start(head: bytes) -> bool:
    """Returns whether ``head`` (under 512 bytes) could be the start of a tar header: a name of
    printable bytes padded with NULs to byte 100, then an octal mode field, as far as present."""
    name, nul, padding = head[:100].partition(b"\x00")
    if not name or not nul or any(byte < 0x20 for byte in name) or padding.strip(b"\x00"):
        return False
    mode = head[100:108].partition(b"\x00")[0].strip()
    return all(0x30 <= byte <= 0x37 for byte in mode)


def _check_short_object(head: bytes, url: str | None) -> None:
    """Raises "not a tar" for a whole object shorter than one tar header that does not start
    like one (a truncated tar keeps its "truncated" error)."""
    if not head:
        raise _error(url, 0, "is empty (0 bytes), not a tar archive", _HINT_NOT_TAR)
    if _looks_like_header_start(head):
        return
    what = known_non_tar(head)
    kind = f"it is {what}" if what else "its first bytes are not a tar header"
    raise _error(
        url,
        0,
        f"is not a tar file: {kind}, and at {len(head)} bytes it is shorter than one "
        f"{BLOCK}-byte tar header",
        _HINT_NOT_TAR,
    )


def _check_clean_eof(src: _Source, available: int, pending: _Pending, url: str | None) -> None:
    """Raises unless the stream ended on a header boundary with no extended header pending."""
    if available:
        raise _error(
            url,
            src.base + available,
            f"is truncated at byte {src.base + available} inside a tar header "
            f"({available} of {BLOCK} bytes present)",
            _HINT_TRUNCATED,
        )
    if pending.offset is not None:
        name = pending.pax_path or pending.longname
        raise _error(
            url,
            src.base,
            f"is truncated at byte {src.base} right after the extended header of member "
            f"{name!r}, which is missing",
            _HINT_TRUNCATED,
            name,
        )


def _check_header(
    buf: bytes, pos: int, chksum_f: bytes, offset: int, last_name: str | None, url: str | None
) -> None:
    """Raises ShardFormatError unless the header at ``buf[pos]`` has a valid checksum."""
    try:
        expected = _parse_number(chksum_f)
    except ValueError:
        expected = -1
    if expected >= 0 and _checksum_ok(memoryview(buf)[pos : pos + BLOCK], chksum_f, expected):
        return
    if offset == 0:
        what = known_non_tar(buf[pos : pos + 8])
        raise _error(
            url,
            offset,
            f"is not a tar file: {f'it is {what}; ' if what else ''}its first 512 bytes are not "
            "a valid tar header (checksum mismatch)",
            _HINT_NOT_TAR,
        )
    after = f" after the header of {last_name!r}" if last_name is not None else ""
    raise _error(
        url,
        offset,
        f"has a corrupt tar header at byte {offset}{after} (checksum mismatch)",
        _HINT_CORRUPT,
    )


def _member_size(
    size_f: bytes, typeflag: bytes, pending: _Pending, name: str, offset: int, url: str | None
) -> int:
    """Returns the data size of the record whose header is at ``offset``."""
    if pending.pax_size is not None and typeflag not in _META_TYPES:
        return pending.pax_size
    try:
        size = _parse_number(size_f)
    except ValueError:
        size = -1
    if size < 0:
        raise _error(
            url,
            offset,
            f"has an invalid size field {size_f!r} in the tar header of member {name!r} "
            f"at byte {offset}",
            _HINT_CORRUPT,
            name,
        )
    return size


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
        member = _pax_path(data)
        where = (f"inside the extended header of member {member!r}" if member is not None
                 else "inside an extended header, before the member it names")
    raise _error(
        url,
        start + got,
        f"is truncated at byte {start + got} {where} (expected {padded - got} more bytes)",
        _HINT_TRUNCATED,
        member,
    )


_PAX_PATH = re.compile(rb"(?:^|\n)\d+ path=([^\n]*)\n")


def _pax_path(data: bytes) -> str | None:
    """Returns the ``path`` record of a pax header's first bytes, if it arrived whole."""
    match = _PAX_PATH.search(data)
    return _decode_name(match.group(1)) if match else None


def _read_extension(
    src: _Source,
    typeflag: bytes,
    size: int,
    padded: int,
    pending: _Pending,
    offset: int,
    name: str,
    url: str | None,
) -> None:
    """Consumes a non-regular record: stores extended-header info or skips the data."""
    if typeflag == _GNU_SPARSE:
        raise _error(
            url,
            offset,
            f"has a sparse member {name!r} at byte {offset}, which aisio does not support",
            "rewrite the shard without sparse files",
            name,
        )
    is_meta = typeflag in (_GNU_LONGNAME, _PAX_HEADER)
    if is_meta and size > _MAX_META_SIZE:
        raise _error(
            url,
            offset,
            f"has an extended header of {size} bytes at byte {offset} (at most "
            f"{_MAX_META_SIZE} allowed)",
            _HINT_CORRUPT,
        )
    if is_meta:
        data = _read_data(src, size, padded, name, url, header=typeflag == _PAX_HEADER)
        if pending.offset is None:
            pending.offset = offset
        if typeflag == _GNU_LONGNAME:
            pending.longname = _decode_name(data.partition(b"\x00")[0])
        else:
            _parse_pax(data, pending, url, offset)
        return
    if typeflag == _GNU_LONGLINK:
        if pending.offset is None:
            pending.offset = offset
    elif typeflag != _PAX_GLOBAL:
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
            raise _error(
                url,
                start + count - remaining,
                f"is truncated at byte {start + count - remaining} inside record {name!r} "
                f"(expected {remaining} more bytes)",
                _HINT_TRUNCATED,
                name,
            )


__all__ = ["BinaryReadable", "ShardReader", "TarMember", "iter_tar"]
