"""The tar header: its layout, its checks, and the typed error for each way it can be wrong.

Every reader of a shard reads headers through this module: the general reader
(:mod:`.stream`) field by field with :data:`HEADER`, the per-member fast path (:mod:`.fast`)
with :data:`COMMON`, :data:`CHECKSUMS` and :func:`tail_sum`, runs (:mod:`.runs`) with
:func:`sound_headers` and :func:`mtime_only` over many headers at once. The fast path and runs
only vouch for plain headers; whatever they do not vouch for goes to the general reader, whose
checks here (:func:`check_header`, :func:`member_size`, :func:`parse_pax`, ...) raise
:class:`~aisio.core.faults.errors.ShardFormatError` with the same message whichever path met it.

Formats: V7, ustar (the ``prefix`` field), GNU (long names, base-256 numbers) and pax
(``path`` and ``size`` records).
"""

from __future__ import annotations

import re
import struct
import zlib

import numpy as np

from aisio.core.faults.errors import BAD_SHARD_HINT, ShardFormatError
from aisio.core.format.compression import known_non_tar

BLOCK = 512
"""Size of a tar block: headers are one block, member data is padded to a multiple of it."""

# Where a header's fields lie (bytes from its start).
NAME = 100        # the name field: bytes 0-99
SIZE = 124        # the size: 11 octal digits, then a NUL (GNU: 12 bytes of base-256)
SIZE_END = 136
CHKSUM = 148      # the checksum: 6 octal digits, a NUL and a space (8 bytes)
CHKSUM_END = 156
TYPEFLAG = 156
PREFIX = 345      # the ustar prefix of the name: bytes 345-499

HEADER = struct.Struct("100s24x12s12x8sc100x6s2x32x32x8x8x155s12x")
"""The general reader's fields: name, size, checksum, typeflag, magic, prefix."""

COMMON = struct.Struct("100s24x11sB12x6sBBB188xB166x")
"""The fast path's fields: the name, the size's 11 octal digits and the byte after them, the
checksum's 6 digits and the 2 bytes after them, the typeflag and the first byte of the prefix."""

ZERO_BLOCK = bytes(BLOCK)
NO_CHECKSUM = bytes(8)
USTAR_MAGIC = b"ustar\x00"
MAX_META_SIZE = 1 << 20
"""Largest GNU long name or pax extended header accepted (a larger one means a corrupt shard)."""

REGULAR_TYPES = frozenset((b"0", b"\x00", b"7"))
NO_DATA_TYPES = frozenset((b"1", b"2", b"3", b"4", b"5", b"6"))
GNU_LONGNAME = b"L"
GNU_LONGLINK = b"K"
PAX_HEADER = b"x"
PAX_GLOBAL = b"g"
GNU_SPARSE = b"S"
META_TYPES = frozenset((GNU_LONGNAME, GNU_LONGLINK, PAX_HEADER, PAX_GLOBAL))

HINT_TRUNCATED = BAD_SHARD_HINT
HINT_CORRUPT = BAD_SHARD_HINT
HINT_NOT_TAR = "check that the object is a tar (WebDataset) shard, plain or gzip/bzip2/xz/zstd"
HINT_SPARSE = "rewrite the shard without sparse files"


def where(url: str | None) -> str:
    """Returns how messages name the shard."""
    return url if url is not None else "<stream>"


def error(
    url: str | None, offset: int, what: str, hint: str, member: str | None = None
) -> ShardFormatError:
    """Returns a ShardFormatError for ``shard <url> <what>; <hint>``."""
    return ShardFormatError(
        f"shard {where(url)} {what}; {hint}", url=url, offset=offset, member=member
    )


def decode_name(raw: bytes) -> str:
    """Returns a name's text (UTF-8, undecodable bytes as surrogate escapes)."""
    return raw.decode("utf-8", "surrogateescape")


def parse_number(field: bytes) -> int:
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


def checksum_ok(header: memoryview, chksum_field: bytes, expected: int) -> bool:
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


def check_header(
    buf: bytes, pos: int, chksum_f: bytes, offset: int, last_name: str | None, url: str | None
) -> None:
    """Raises ShardFormatError unless the header at ``buf[pos]`` has a valid checksum."""
    try:
        expected = parse_number(chksum_f)
    except ValueError:
        expected = -1
    if expected >= 0 and checksum_ok(memoryview(buf)[pos : pos + BLOCK], chksum_f, expected):
        return
    if offset == 0:
        what = known_non_tar(buf[pos : pos + 8])
        raise error(
            url,
            offset,
            f"is not a tar file: {f'it is {what}; ' if what else ''}its first 512 bytes are not "
            "a valid tar header (checksum mismatch)",
            HINT_NOT_TAR,
        )
    after = f" after the header of {last_name!r}" if last_name is not None else ""
    raise error(
        url,
        offset,
        f"has a corrupt tar header at byte {offset}{after} (checksum mismatch)",
        HINT_CORRUPT,
    )


def looks_like_header_start(head: bytes) -> bool:
    """Returns whether ``head`` (under 512 bytes) could be the start of a tar header: a name of
    printable bytes padded with NULs to byte 100, then an octal mode field, as far as present."""
    name, nul, padding = head[:NAME].partition(b"\x00")
    if not name or not nul or any(byte < 0x20 for byte in name) or padding.strip(b"\x00"):
        return False
    mode = head[100:108].partition(b"\x00")[0].strip()
    return all(0x30 <= byte <= 0x37 for byte in mode)


def check_short_object(head: bytes, url: str | None) -> None:
    """Raises "not a tar" for a whole object shorter than one tar header that does not start
    like one (a truncated tar keeps its "truncated" error)."""
    if not head:
        raise error(url, 0, "is empty (0 bytes), not a tar archive", HINT_NOT_TAR)
    if looks_like_header_start(head):
        return
    what = known_non_tar(head)
    kind = f"it is {what}" if what else "its first bytes are not a tar header"
    raise error(
        url,
        0,
        f"is not a tar file: {kind}, and at {len(head)} bytes it is shorter than one "
        f"{BLOCK}-byte tar header",
        HINT_NOT_TAR,
    )


class Pending:
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


def member_size(
    size_f: bytes, typeflag: bytes, pending: Pending, name: str, offset: int, url: str | None
) -> int:
    """Returns the data size of the record whose header is at ``offset``."""
    if pending.pax_size is not None and typeflag not in META_TYPES:
        return pending.pax_size
    try:
        size = parse_number(size_f)
    except ValueError:
        size = -1
    if size < 0:
        raise error(
            url,
            offset,
            f"has an invalid size field {size_f!r} in the tar header of member {name!r} "
            f"at byte {offset}",
            HINT_CORRUPT,
            name,
        )
    return size


def parse_pax(data: bytes, pending: Pending, url: str | None, offset: int) -> None:
    """Stores the ``path`` and ``size`` records of a pax extended header in ``pending``."""
    pos = 0
    while pos < len(data) and data[pos] != 0:
        space = data.find(b" ", pos, pos + 24)
        length = int(data[pos:space]) if space > pos and data[pos:space].isdigit() else 0
        end = pos + length
        if length <= space - pos + 1 or end > len(data) or data[end - 1] != 0x0A:
            raise error(
                url, offset, f"has a malformed pax extended header at byte {offset}", HINT_CORRUPT
            )
        key, equals, value = data[space + 1 : end - 1].partition(b"=")
        if not equals:
            raise error(url, offset, f"has a malformed pax record at byte {offset}", HINT_CORRUPT)
        if key == b"path":
            pending.pax_path = decode_name(value)
        elif key == b"size":
            if not value.isdigit():
                raise error(
                    url, offset, f"has an invalid pax size {value!r} at byte {offset}",
                    HINT_CORRUPT,
                )
            pending.pax_size = int(value)
        elif key.startswith(b"GNU.sparse."):
            raise error(
                url, offset,
                f"has a sparse member at byte {offset}, which aisio does not support",
                HINT_SPARSE,
            )
        pos = end


_PAX_PATH = re.compile(rb"(?:^|\n)\d+ path=([^\n]*)\n")


def pax_path(data: bytes) -> str | None:
    """Returns the ``path`` record of a pax header's first bytes, if it arrived whole."""
    match = _PAX_PATH.search(data)
    return decode_name(match.group(1)) if match else None


# ---- vouching for plain headers, one at a time (the fast path) ----------------------------------

class _Octal(dict[bytes, int]):
    """Octal fields already parsed, by their bytes (checksums repeat: a lookup costs less than
    ``int(field, 8)``); at most 4,096 of them."""

    def __missing__(self, field: bytes) -> int:
        value = int(field, 8)
        if len(self) >= 4096:
            self.clear()
        self[field] = value
        return value


CHECKSUMS = _Octal()
"""The value of a checksum's 6 octal digits, by their bytes (``ValueError`` when not octal)."""


def tail_sum(tail: bytes) -> int:
    """Returns the byte sum of a header's last 356 bytes (``zlib.adler32`` from 0 keeps a byte
    sum below 65,521 exactly in its low 16 bits: ASCII bytes at once, others in two halves).

    A header's checksum counts all its 512 bytes; its last 356 (typeflag, link name, magic,
    owner, device, prefix) are the same in every header a writer makes for a regular file, so
    the fast path keeps their sum and sums only the first 148 bytes of each header."""
    if tail.isascii():
        return zlib.adler32(tail, 0) & 0xFFFF
    return (zlib.adler32(tail[:178], 0) & 0xFFFF) + (zlib.adler32(tail[178:], 0) & 0xFFFF)


_MTIME_RECORD = re.compile(rb"([1-9][0-9]) mtime=[0-9.]+\n")


def after_mtime_header(buf: bytes, pos: int, size_d: bytes, chk_d: bytes, limit: int) -> int:
    """Returns where the header after the pax header at ``buf[pos]`` begins, when that pax
    header is sound (its checksum) and holds one record, an ``mtime`` (as webdataset's
    TarWriter writes before every member), and the header after it lies in the buffer; else
    0."""
    try:
        size = int(size_d, 8)
        chk = CHECKSUMS[chk_d]
    except ValueError:
        return 0
    after = pos + 2 * BLOCK
    if not 12 <= size <= 99 or after > limit:
        return 0
    if (zlib.adler32(buf[pos:pos + CHKSUM], 0) & 0xFFFF) \
            + tail_sum(buf[pos + CHKSUM_END:pos + BLOCK]) + 8 * 0x20 != chk:
        return 0
    record = _MTIME_RECORD.fullmatch(buf, pos + BLOCK, pos + BLOCK + size)
    return after if record is not None and int(record[1]) == size else 0


# ---- vouching for plain headers, many at once (runs) -------------------------------------------

SIZE_WEIGHTS = 8.0 ** np.arange(10, -1, -1)  # float64: exact for 11 octal digits
_CHECKSUM_WEIGHTS = 8.0 ** np.arange(5, -1, -1)
_MTIME = np.frombuffer(b" mtime=", np.uint8)


def octal_sizes(digits: np.ndarray) -> np.ndarray:
    """Returns the values of size fields of 11 octal digits (rows of their 11 bytes)."""
    return ((digits.astype(np.float64) - 48) @ SIZE_WEIGHTS).astype(np.int64)


def sizes_of(heads: np.ndarray) -> np.ndarray:
    """Returns the sizes of headers (rows of 512 bytes) whose size field is 11 octal digits."""
    return octal_sizes(heads[:, SIZE:SIZE + 11])


def sound_headers(heads: np.ndarray) -> np.ndarray:
    """Returns, for each header (a row of 512 bytes), whether it is sound as the fast path
    vouches for one: an 11-digit octal size and a 6-digit octal checksum each followed by a
    NUL, no ustar prefix, and an unsigned checksum that matches."""
    sums = (np.add.reduce(heads, 1, dtype=np.uint32).astype(np.int64)
            - np.add.reduce(heads[:, CHKSUM:CHKSUM_END], 1, dtype=np.uint32) + 8 * 32)
    size = heads[:, SIZE:SIZE + 11]
    chksum = heads[:, CHKSUM:CHKSUM + 6]
    return ((heads[:, SIZE + 11] == 0) & (heads[:, CHKSUM + 6] == 0) & (heads[:, PREFIX] == 0)
            & ((size >= 0x30) & (size <= 0x37)).all(1)
            & ((chksum >= 0x30) & (chksum <= 0x37)).all(1)
            & (sums == (chksum.astype(np.float64) - 48) @ _CHECKSUM_WEIGHTS))


def mtime_only(blocks: np.ndarray, rows: np.ndarray, heads: np.ndarray) -> np.ndarray:
    """Returns, for each pax header at ``rows`` (``heads``), whether its record is one
    ``mtime`` and nothing else (``"28 mtime=1795667187.8313234\\n"``), in the one block after
    it: the pax header :func:`after_mtime_header` vouches for, many at once."""
    size = sizes_of(heads)
    record = blocks[np.minimum(rows + 1, len(blocks) - 1)][:, :100]
    places = np.arange(100)
    told = (record[:, 0].astype(np.int64) - 48) * 10 + record[:, 1].astype(np.int64) - 48
    value = (places >= 9) & (places < size[:, None] - 1)
    digit = ((record >= 0x30) & (record <= 0x39)) | (record == ord("."))
    return ((size >= 12) & (size < 100) & (told == size)
            & ((record[:, :2] >= 0x30) & (record[:, :2] <= 0x39)).all(1)
            & (record[:, 2:9] == _MTIME).all(1)
            & (record[np.arange(len(rows)), np.clip(size - 1, 0, 99)] == 0x0A)
            & (digit | ~value).all(1))
