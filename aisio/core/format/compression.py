"""Compressed shards: recognise gzip, bzip2, xz and zstd by their magic bytes and stream them.

:func:`open_shard` peeks at the first bytes of a stream (not at its name: ``.tar`` objects that are
really gzip, and ``.tgz`` objects that are plain tar, both work) and returns a binary stream of the
tar inside. Decompression is streamed: memory stays bounded by a read buffer and the
decompressor's window, whatever the shard's size. zstd needs the optional ``zstandard`` package.

Problems in the compressed layer raise :class:`~aisio.core.faults.errors.ShardFormatError` with the
offset
in the decompressed stream (the same offsets the tar parser reports): corrupt data at once, an
early end of the compressed stream as an end of file, which the tar parser reports as truncation
(or :meth:`DecompressedStream.check_complete` does, when it fell on a member boundary).
"""

from __future__ import annotations

import bz2
import gzip
import importlib
import io
import lzma
from collections.abc import Callable
from typing import Any

from aisio.core.faults.errors import (
    BAD_SHARD_HINT,
    AISIOError,
    LoaderUnavailableError,
    ShardFormatError,
)

_PEEK = 6
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
)
_NOT_TAR: tuple[tuple[bytes, str], ...] = (
    (b"PK\x03\x04", "a zip archive"),
    (b"\x89PNG", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"7z\xbc\xaf", "a 7-zip archive"),
)
_HINT = BAD_SHARD_HINT
_READ_SIZE = 1 << 20


def compression_of(head: bytes) -> str | None:
    """Returns ``"gzip"``, ``"bzip2"``, ``"xz"`` or ``"zstd"`` for a stream starting with ``head``
    (None: not compressed, or not in a format aisio reads)."""
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            if kind == "bzip2" and not head[3:4].isdigit():
                continue
            return kind
    return None


def known_non_tar(head: bytes) -> str | None:
    """Returns what a stream starting with ``head`` is when that is a common non-tar format."""
    for magic, what in _NOT_TAR:
        if head.startswith(magic):
            return what
    return None


class _Prefixed(io.RawIOBase):
    """A raw stream that returns ``head`` first, then the rest of ``stream``."""

    def __init__(self, head: bytes, stream: Any) -> None:
        self._head = head
        self._stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if self._head:
            n = min(len(view), len(self._head))
            view[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._stream.read(len(view))
        if not data:
            return 0
        view[: len(data)] = data
        return len(data)

    def read(self, size: int = -1, /) -> bytes:
        if self._head:
            if size is None or size < 0:
                rest = self._stream.read()
                data, self._head = self._head + (rest or b""), b""
                return data
            data, self._head = self._head[:size], self._head[size:]
            return data
        return self._stream.read(size) or b""


class DecompressedStream:
    """The decompressed bytes of a compressed shard, with errors translated to ShardFormatError.

    Attributes:
        compression: ``"gzip"``, ``"bzip2"``, ``"xz"`` or ``"zstd"``.
        position: decompressed bytes returned so far.
        ended_early: the compressed stream stopped before its end-of-stream marker.
    """

    def __init__(self, reader: Any, compression: str, url: str | None) -> None:
        self._reader = reader
        # read1: the decompressed data at hand, not a loop that fills ``size`` and loses it all
        # when the compressed stream then ends early.
        self._read = getattr(reader, "read1", reader.read)
        self.compression = compression
        self.url = url
        self.position = 0
        self.ended_early = False

    def read(self, size: int = -1, /) -> bytes:
        """Returns up to ``size`` decompressed bytes (``b""`` at the end, or where the compressed
        stream ended early)."""
        if self.ended_early:
            return b""
        try:
            data = self._read(size)
        except AISIOError:
            raise
        except EOFError:
            self.ended_early = True
            return b""
        except Exception as exc:
            raise ShardFormatError(
                f"shard {self._where()} has corrupt {self.compression} data after byte "
                f"{self.position} of the decompressed tar ({type(exc).__name__}: {exc}); {_HINT}",
                url=self.url,
                offset=self.position,
            ) from exc
        self.position += len(data)
        return data

    def check_complete(self) -> None:
        """Raises ShardFormatError if the compressed stream ended before its end marker."""
        if self.ended_early:
            raise ShardFormatError(
                f"shard {self._where()} is truncated: its {self.compression} stream ends early, "
                f"at byte {self.position} of the decompressed tar; {_HINT}",
                url=self.url,
                offset=self.position,
            )

    def close(self) -> None:
        self._reader.close()

    def _where(self) -> str:
        return self.url if self.url is not None else "<stream>"


def _zstd_reader(raw: io.BufferedReader) -> Any:
    try:
        zstandard = importlib.import_module("zstandard")  # optional: only for zstd shards
    except ImportError as exc:
        raise LoaderUnavailableError(
            "this shard is zstd-compressed, which needs the 'zstandard' package: "
            "pip install zstandard (or recompress the shard with gzip, bzip2 or xz)"
        ) from exc
    return zstandard.ZstdDecompressor().stream_reader(raw, read_size=_READ_SIZE,
                                                      read_across_frames=True)


_OPENERS: dict[str, Callable[[io.BufferedReader], Any]] = {
    "gzip": lambda raw: gzip.GzipFile(fileobj=raw, mode="rb"),
    "bzip2": lambda raw: bz2.BZ2File(raw, mode="rb"),
    "xz": lambda raw: lzma.LZMAFile(raw, mode="rb"),  # noqa: SIM115 (closed by its owner)
    "zstd": _zstd_reader,
}


def peek(stream: Any, size: int = _PEEK) -> bytes:
    """Returns up to ``size`` first bytes of ``stream`` (fewer only at its end), short reads
    allowed."""
    head = b""
    while len(head) < size:
        chunk = stream.read(size - len(head))
        if not chunk:
            break
        head += chunk
    return head


def open_shard(stream: Any, *, url: str | None = None) -> tuple[Any, DecompressedStream | None]:
    """Returns ``(tar stream, decompressed or None)`` for a shard stream, compressed or not.

    The first bytes are read to recognise the format; the returned stream starts with them again.
    When the shard is compressed, both items are the same :class:`DecompressedStream`.

    Raises:
        LoaderUnavailableError: the shard is zstd and ``zstandard`` is not installed.
    """
    head = peek(stream)
    kind = compression_of(head)
    raw = _Prefixed(head, stream)
    if kind is None:
        return raw, None
    decompressed = DecompressedStream(_OPENERS[kind](io.BufferedReader(raw, _READ_SIZE)), kind,
                                      url)
    return decompressed, decompressed


__all__ = ["DecompressedStream", "compression_of", "known_non_tar", "open_shard", "peek"]
