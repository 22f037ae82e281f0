"""A local shard cache: a directory with a size limit, keyed by the GET URL (object and ETL).

For slow links and repeated epochs: the first read of a shard streams it from AIStore and writes
it aside as it goes; later reads (in any process) open the local file. Only shards read to the
end are kept; the least recently used are evicted to stay under the limit.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path
from typing import IO, Any

from aisio.core.client import ReadStream
from aisio.core.errors import ConfigError


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
        self.directory.mkdir(parents=True, exist_ok=True)

    def path_for(self, url: str) -> Path:
        """Returns where the shard behind GET ``url`` (ETL included) is cached."""
        return self.directory / (hashlib.sha256(url.encode()).hexdigest()[:40] + ".shard")

    def open(self, url: str) -> IO[bytes] | None:
        """Returns the cached shard opened for reading, or None when it is not cached."""
        path = self.path_for(url)
        try:
            handle = open(path, "rb")  # noqa: SIM115 - handed to the caller
        except FileNotFoundError:
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # recently used
        return handle

    def filling(self, url: str, source: Any) -> _Tee:
        """Returns a stream over ``source`` that also writes the shard into the cache."""
        return _Tee(self, url, source)

    def store(self, url: str, data: bytes) -> None:
        """Caches a shard that was read whole."""
        fd, name = tempfile.mkstemp(dir=self.directory, suffix=".part")
        with os.fdopen(fd, "wb") as sink:
            sink.write(data)
        self._admit(Path(name), url)

    def size(self) -> int:
        """Returns the bytes the cached shards take."""
        return sum(p.stat().st_size for p in self.directory.glob("*.shard"))

    def _admit(self, tmp: Path, url: str) -> None:
        os.replace(tmp, self.path_for(url))
        self._evict()

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

    def __repr__(self) -> str:
        return f"ShardCache({str(self.directory)!r}, max_bytes={self.max_bytes})"


class _Tee(ReadStream):
    """Reads through to ``source`` and copies every byte into a temporary file of the cache."""

    def __init__(self, cache: ShardCache, url: str, source: Any) -> None:
        super().__init__()
        self.cache = cache
        self.url = url
        self.source = source
        fd, name = tempfile.mkstemp(dir=cache.directory, suffix=".part")
        self.tmp = Path(name)
        self.sink: IO[bytes] | None = os.fdopen(fd, "wb")

    def read(self, size: int = -1) -> bytes:
        data: bytes = self.source.read(size)
        if self.sink is not None:
            if data:
                self.sink.write(data)
            elif size != 0:  # the end of the shard: keep it
                self.sink.close()
                self.sink = None
                self.cache._admit(self.tmp, self.url)
        return data

    def close(self) -> None:
        if self.sink is not None:  # not read to the end: never cache a partial shard
            self.sink.close()
            self.sink = None
            self.tmp.unlink(missing_ok=True)
        with contextlib.suppress(Exception):
            self.source.close()
        super().close()
