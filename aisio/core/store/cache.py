"""A local shard cache: a directory with a size limit, keyed by object, ETL and object version.

For slow links and repeated epochs: the first read of a shard streams it from AIStore and writes
it aside as it goes; later reads (in any process) open the local file. Only shards read to the
end are kept; the least recently used are evicted to stay under the limit.

What it promises:

* An entry is keyed by ``provider://bucket/object``, the ETL (name and arguments) and the
  object's version (``Ais-Version``, checksum and size): not by host and port, so a cluster that
  moves keeps its cache; and an overwritten object is a miss, never served stale. The version
  is asked with one HEAD per open; objects whose answers name no version nor checksum (a bucket
  without versioning and checksums) are not cached, since nothing would tell a stale entry.
* Each entry ends with an xxhash of its bytes, checked on open: a damaged entry (flipped bits,
  truncation) is dropped and the shard read from the cluster again.
* A cache that cannot write (full filesystem, read-only directory) warns once per process and
  the reads go on uncached.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import xxhash

from aisio.core.faults.errors import AISIOError, ConfigError
from aisio.core.store.client import ReadStream, client_for
from aisio.core.store.config import AISConfig
from aisio.core.store.etl import parse_read_url
from aisio.core.store.sources import ObjectRef
from aisio.core.store.urls import ETL, AISPath, Bucket

if TYPE_CHECKING:
    from aisio.core.store.client import Client
    from aisio.core.store.protocol import ObjectStore

log = logging.getLogger("aisio")

_MAGIC = b"AISIOxh1"  # the trailer: magic, then the xxh3_64 digest of the bytes before it
_TRAILER = len(_MAGIC) + 8


class ShardCache:
    """Keeps whole shards on local disk, at most ``max_bytes`` of them.

    Args:
        directory: where the cached shards live (created if missing; shared by processes).
        max_bytes: the size limit; the least recently used shards are evicted beyond it.

    Example:
        >>> cache = ShardCache(tmp_dir, max_bytes=10 * 2**30)              # doctest: +SKIP
        >>> pipe = AISFileLoader(shards, cache=cache)                        # doctest: +SKIP
    """

    def __init__(self, directory: str | os.PathLike[str], max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ConfigError(f"ShardCache max_bytes={max_bytes} must be positive")
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self._failed = False  # writing failed once in this process: read uncached from now on
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self._write_failed(exc)

    # ---- keys ------------------------------------------------------------------------------
    @staticmethod
    def key(url: str) -> str:
        """Returns the object-and-ETL part of the key of GET ``url`` (no host, no port)."""
        _, path, etl = parse_read_url(url)
        return _key(path, etl)

    def path_for(self, url: str, version: str) -> Path:
        """Returns where version ``version`` of the shard behind GET ``url`` is cached."""
        return self._entry(self.key(url), version)

    def _entry(self, key: str, version: str) -> Path:
        digest = hashlib.sha256(f"{key}\n{version}".encode()).hexdigest()
        return self.directory / (digest[:40] + ".shard")

    def over(self, store: ObjectStore) -> CachedStore:
        """Returns ``store`` read through this cache (see :class:`CachedStore`)."""
        return CachedStore(store, self)

    # ---- reading ---------------------------------------------------------------------------
    def open(self, url: str, client: Client | None = None) -> ReadStream | None:
        """Returns the cached current version of the shard, verified, or None (read it).

        Args:
            url: the GET URL (object and ETL).
            client: the client to ask the object's version with (default: one for the URL's
                endpoint with default settings; pass the loader's for tokens and TLS).
        """
        try:
            endpoint, path, _ = parse_read_url(url)
            client = client or client_for(AISConfig(endpoint=endpoint))
            version = client.object_version(path)
        except AISIOError as exc:  # the GET that follows reports it properly
            log.debug("aisio: cache: no version for %s (%s); reading it", url, exc)
            return None
        return self._cached(self.key(url), version, url)

    def _cached(self, key: str, version: str | None, name: str) -> ReadStream | None:
        """Returns the entry of ``version`` of the object ``key`` names, verified, or None."""
        if version is None:
            return None
        entry = self._entry(key, version)
        try:
            handle = open(entry, "rb")  # noqa: SIM115 - handed to the caller
        except OSError:
            return None
        try:
            size = _verified_size(handle)
        except OSError as exc:
            size, reason = None, str(exc)
        else:
            reason = "its checksum does not match its bytes"
        if size is None:
            handle.close()
            log.warning("aisio: cache entry %s of %s is damaged (%s); dropped, reading the "
                        "shard from the cluster", entry, name, reason)
            with contextlib.suppress(OSError):
                entry.unlink()
            return None
        with contextlib.suppress(OSError):
            os.utime(entry)  # recently used
        return _Bounded(handle, size, version, str(entry))

    # ---- writing ---------------------------------------------------------------------------
    def filling(self, url: str, source: Any, version: str | None = None) -> Any:
        """Returns a stream over ``source`` that also writes the shard into the cache.

        The entry is kept, once the shard was read to the end, under ``version``, else the
        ``version`` of ``source`` (an :class:`~aisio.core.store.client.ObjectReader` has one).
        """
        return self._filling(self.key(url), source, version)

    def _filling(self, key: str, source: Any, version: str | None) -> Any:
        if self._failed:
            return source
        return _Tee(self, key, source, version)

    def store(self, url: str, data: bytes, version: str | None) -> None:
        """Caches a shard that was read whole, as version ``version`` (None: not cached)."""
        if version is None or self._failed:
            return
        try:
            fd, name = tempfile.mkstemp(dir=self.directory, suffix=".part")
        except OSError as exc:
            self._write_failed(exc)
            return
        try:
            with os.fdopen(fd, "wb") as sink:
                sink.write(data)
                sink.write(_MAGIC + xxhash.xxh3_64_digest(data))
            self._admit(Path(name), self.key(url), version)
        except OSError as exc:
            Path(name).unlink(missing_ok=True)
            self._write_failed(exc)

    def size(self) -> int:
        """Returns the bytes the cached shards take."""
        return sum(p.stat().st_size for p in self.directory.glob("*.shard"))

    def _admit(self, tmp: Path, key: str, version: str) -> None:
        os.replace(tmp, self._entry(key, version))
        self._evict()

    def _write_failed(self, exc: OSError) -> None:
        if not self._failed:
            self._failed = True
            warnings.warn(
                f"aisio: the shard cache in {self.directory} cannot write ({exc}); reading "
                "uncached from now on in this process (free space or choose another directory)",
                RuntimeWarning, stacklevel=3)

    def _evict(self) -> None:
        entries = []
        for path in self.directory.glob("*.shard"):
            with contextlib.suppress(FileNotFoundError):
                stat = path.stat()
                entries.append((stat.st_mtime, stat.st_size, path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.max_bytes:
                break
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            total -= size

    def __getstate__(self) -> dict[str, Any]:
        return {"directory": self.directory, "max_bytes": self.max_bytes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.directory = state["directory"]
        self.max_bytes = state["max_bytes"]
        self._failed = False

    def __repr__(self) -> str:
        return f"ShardCache({str(self.directory)!r}, max_bytes={self.max_bytes})"


def _key(path: AISPath, etl: ETL | None) -> str:
    """Returns the object-and-ETL part of an entry's key (no endpoint: a cluster that moves
    keeps its cache)."""
    transform = json.dumps(etl.query(), sort_keys=True) if etl is not None else ""
    return f"{path.uri()}\n{transform}"


class CachedStore:
    """A store read through a :class:`ShardCache`: a shard read from byte 0 is served from the
    cache when its current version is there, else read from ``store`` and kept once read to
    the end (:meth:`ShardCache.over` makes one; a loader's ``cache=`` wraps its store so).

    The object's version is asked of ``store`` once per open (one HEAD on AIStore); an object
    whose store names no version is read uncached. An object read through an ETL is kept under
    the version of the object it transforms (its answer names none). A read from another byte
    than 0 goes to ``store`` alone, a read that expects a version (a resumed shard) is not
    served from the cache, and Get-Batch is not cached.

    Args:
        store: where the shards come from.
        cache: where they are kept.
    """

    def __init__(self, store: ObjectStore, cache: ShardCache) -> None:
        self.store = store
        self.cache = cache

    def open(self, ref: ObjectRef, *, start: int = 0, expect: str | None = None) -> IO[bytes]:
        """Returns a stream over the object from ``start``: the cached entry, or the store's
        stream copied into the cache as it is read (from byte 0)."""
        version = None
        if start == 0 and expect is None:
            key = _key(ref.path, ref.etl)
            try:
                version = self.store.version(ref)
            except AISIOError as exc:  # the read that follows reports it properly
                log.debug("aisio: cache: no version for %s (%s); reading it", ref.uri(), exc)
            cached = self.cache._cached(key, version, ref.uri())
            if cached is not None:
                return cached  # type: ignore[return-value]
        stream = self.store.open(ref, start=start, expect=expect)
        if start:
            return stream
        return self.cache._filling(_key(ref.path, ref.etl), stream,
                                   version if ref.etl is not None else None)

    def version(self, ref: ObjectRef) -> str | None:
        """Returns the store's version of the object."""
        return self.store.version(ref)

    def get_batch(self, refs: Sequence[ObjectRef]) -> Iterator[bytes | None]:
        """Yields the store's Get-Batch (uncached)."""
        return self.store.get_batch(refs)

    def list_pages(self, bucket: Bucket, prefix: str = "", *, props: str = "name",
                   page_size: int | None = None) -> Iterator[list[dict[str, Any]]]:
        """Yields the store's listing."""
        return self.store.list_pages(bucket, prefix, props=props, page_size=page_size)

    def bucket_names(self) -> list[str]:
        """Returns the store's buckets."""
        return self.store.bucket_names()

    def __repr__(self) -> str:
        return f"{self.cache!r}.over({self.store!r})"


def _verified_size(handle: IO[bytes]) -> int | None:
    """Returns the size of the shard in an entry if its trailer matches its bytes, else None."""
    total = os.fstat(handle.fileno()).st_size
    if total < _TRAILER:
        return None
    handle.seek(total - _TRAILER)
    trailer = handle.read(_TRAILER)
    if trailer[: len(_MAGIC)] != _MAGIC:
        return None
    handle.seek(0)
    digest = xxhash.xxh3_64()
    left = total - _TRAILER
    while left:
        chunk = handle.read(min(left, 1 << 22))
        if not chunk:
            return None
        digest.update(chunk)
        left -= len(chunk)
    handle.seek(0)
    return total - _TRAILER if digest.digest() == trailer[len(_MAGIC):] else None


class _Bounded(ReadStream):
    """Reads a cache entry's shard bytes, not its trailer."""

    def __init__(self, handle: IO[bytes], size: int, version: str | None = None,
                 local_path: str = "") -> None:
        super().__init__()
        self.handle = handle
        self.left = size
        self.size = size
        #: the cached object's version (what :func:`~aisio.core.store.client.content_id` names)
        self.version = version
        #: the cache entry (a tar, then aisio's checksum trailer): the ``__local_path__`` of
        #: the shard's samples, as webdataset names it
        self.local_path = local_path

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0 or size > self.left:
            size = self.left
        data = self.handle.read(size)
        self.left -= len(data)
        return data

    def close(self) -> None:
        self.handle.close()
        super().close()


class _Tee(ReadStream):
    """Reads through to ``source`` and copies every byte into a temporary file of the cache.

    Writing stops (with one warning) if the cache cannot write; the reads go on.
    """

    #: Tells a reader that the rest of the stream is wanted to the end (to cache it whole).
    caching = True

    def __init__(self, cache: ShardCache, key: str, source: Any,
                 version: str | None = None) -> None:
        super().__init__()
        self.cache = cache
        self.key = key
        self.source = source
        #: the version the entry is kept under when the answer names none (an ETL's answer:
        #: the version of the object it transforms, asked before the read)
        self.given_version = version
        self.sink: IO[bytes] | None = None
        self.digest = xxhash.xxh3_64()
        self.tmp: Path | None = None
        try:
            fd, name = tempfile.mkstemp(dir=cache.directory, suffix=".part")
        except OSError as exc:
            cache._write_failed(exc)
            return
        self.tmp = Path(name)
        self.sink = os.fdopen(fd, "wb")

    @property
    def version(self) -> str | None:
        return self.given_version or getattr(self.source, "version", None)

    @property
    def size(self) -> int | None:
        return getattr(self.source, "size", None)

    def read(self, size: int = -1) -> bytes:
        data: bytes = self.source.read(size)
        if self.sink is None:
            return data
        try:
            if data:
                self.sink.write(data)
                self.digest.update(data)
            elif size != 0:  # the end of the shard: keep it
                version = self.version
                if version is None:
                    self._discard()
                    return data
                self.sink.write(_MAGIC + self.digest.digest())
                self.sink.close()
                self.sink = None
                assert self.tmp is not None
                self.cache._admit(self.tmp, self.key, version)
        except OSError as exc:
            self._discard()
            self.cache._write_failed(exc)
        return data

    @property
    def local_path(self) -> str:
        """Where the shard is cached once read to the end ("" when it will not be: no
        version to key it by, or the cache cannot write)."""
        version = getattr(self.source, "version", None)
        if version is None or self.tmp is None:
            return ""
        return str(self.cache._entry(self.key, version))

    def _discard(self) -> None:
        if self.sink is not None:
            with contextlib.suppress(OSError):
                self.sink.close()
            self.sink = None
        if self.tmp is not None:
            with contextlib.suppress(OSError):
                self.tmp.unlink(missing_ok=True)

    def close(self) -> None:
        if self.sink is not None:  # not read to the end: never cache a partial shard
            self._discard()
        with contextlib.suppress(Exception):
            self.source.close()
        super().close()
