"""Objects held in memory, as an :class:`~aisio.core.store.protocol.ObjectStore`: a loader
without a cluster, for tests.

Any loader reads from one with ``store=``::

    store = MemoryStore({"ais://train": {f"shard-{i}.tar": tar_bytes(i) for i in range(4)}})
    loader = aisio.webdataset_dataloader("ais://train/shard-{0..3}.tar", store=store,
                                         batch_size=8)

It behaves as an AIStore bucket with versioning does where a loader can tell: objects have
versions (a new one per :meth:`MemoryStore.put`), a stream opened at a byte starts there, a
resumed shard whose object changed is refused, listings come in name order, a missing bucket or
object raises the same typed error, with the same "did you mean". :meth:`MemoryStore.fail`
injects faults (an error, or a stream that ends early, at a byte) to test an error policy.

The store pickles with its objects, so each worker process reads its own copy: what a worker
does to it (``put``, faults used up, :attr:`MemoryStore.opens`) stays in that worker.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

import xxhash

from aisio.core.faults.errors import (
    AISIOError,
    BucketNotFoundError,
    ETLNotFoundError,
    ObjectChangedError,
    ObjectNotFoundError,
)
from aisio.core.store.client import ReadStream, content_id, version_key
from aisio.core.store.sources import ObjectRef
from aisio.core.store.suggest import explained
from aisio.core.store.urls import AISPath, Bucket, parse_ais_url


@dataclass
class _Fault:
    at: int
    error: AISIOError | None
    times: int | None  # opens left that meet it (None: every one)


class MemoryStore:
    """Buckets of objects in memory (see the module doc).

    Args:
        buckets: bucket name (``"ais://train"``, or ``"train"`` for an ``ais://`` bucket) ->
            ``{object name: bytes}``.
        versioned: objects name their version (``False``: as a bucket without versioning and
            checksums, whose streams name only their size; a :class:`~aisio.ShardCache` then
            keeps none of them).

    Attributes:
        opens: ``(object, start)`` of every open in this process, in order.

    Example:
        >>> store = MemoryStore({"ais://b": {"a.txt": b"hello"}})
        >>> store.open(ObjectRef(AISPath(Bucket("b"), "a.txt")), start=1).read()
        b'ello'
        >>> store.opens
        [('ais://b/a.txt', 1)]
    """

    def __init__(self, buckets: Mapping[str, Mapping[str, bytes]] | None = None, *,
                 versioned: bool = True) -> None:
        self.versioned = versioned
        self.opens: list[tuple[str, int]] = []
        self._objects: dict[Bucket, dict[str, tuple[bytes, int]]] = {}
        self._generation = 0
        self._faults: dict[AISPath, _Fault] = {}
        for name, objects in (buckets or {}).items():
            bucket = self._bucket(name)
            self._objects.setdefault(bucket, {})
            for obj, data in objects.items():
                self.put(AISPath(bucket, obj), data)

    @staticmethod
    def _bucket(name: str) -> Bucket:
        return parse_ais_url(name if "://" in name else f"ais://{name}").bucket

    @staticmethod
    def _path(name: str | AISPath) -> AISPath:
        return name if isinstance(name, AISPath) else parse_ais_url(name)

    # ---- writing ---------------------------------------------------------------------------
    def put(self, name: str | AISPath, data: bytes) -> None:
        """Writes one object (``"ais://b/obj"``), a new version of it if it exists; creates
        its bucket if need be."""
        path = self._path(name)
        self._generation += 1
        self._objects.setdefault(path.bucket, {})[path.obj] = (bytes(data), self._generation)

    def delete(self, name: str | AISPath) -> None:
        """Removes one object (nothing if it does not exist)."""
        path = self._path(name)
        self._objects.get(path.bucket, {}).pop(path.obj, None)

    def fail(self, name: str | AISPath, *, at: int = 0, error: AISIOError | None = None,
             times: int | None = None) -> None:
        """Makes reads of an object fail once they reach byte ``at`` (0: the open itself).

        Args:
            name: the object (``"ais://b/obj"``).
            at: the byte where the fault happens.
            error: raised there; None: the stream ends there instead (a truncated read).
            times: how many opens meet the fault (None: every one).
        """
        self._faults[self._path(name)] = _Fault(at, error, times)

    # ---- reading ---------------------------------------------------------------------------
    def _object(self, path: AISPath) -> tuple[bytes, int]:
        objects = self._objects.get(path.bucket)
        if objects is None:
            raise BucketNotFoundError(
                f"bucket {path.bucket.uri()} does not exist in this MemoryStore; put objects "
                "in it first", url=path.uri(), status=404)
        found = objects.get(path.obj)
        if found is None:
            raise ObjectNotFoundError(
                f"object {path.uri()} does not exist; check the name, or list the bucket to "
                "see what is there", url=path.uri(), missing=(path.uri(),))
        return found

    def _version(self, data: bytes, generation: int) -> str | None:
        if not self.versioned:
            return None
        return version_key(str(generation), xxhash.xxh3_64_hexdigest(data), len(data))

    def open(self, ref: ObjectRef, *, start: int = 0, expect: str | None = None) -> IO[bytes]:
        """Returns a stream over the object from byte ``start`` (see the module doc)."""
        if ref.etl is not None:
            raise ETLNotFoundError(
                f"ETL {ref.etl.name!r} does not run on a MemoryStore (reading {ref.uri()}); "
                "read the objects without etl=, or put the transformed objects in the store",
                url=ref.uri())
        self.opens.append((ref.uri(), start))
        data, generation = explained(self, ref.path, lambda: self._object(ref.path))
        fault = self._faults.get(ref.path)
        end, error = len(data), None
        if fault is not None and fault.times != 0:
            if fault.times is not None:
                fault.times -= 1
            end, error = max(start, min(fault.at, len(data))), fault.error
            if error is not None and end == start:
                raise error
        stream = _MemoryStream(data, start, end, error, self._version(data, generation))
        now = content_id(stream)
        if expect is not None and now != expect:
            raise ObjectChangedError(
                f"object {ref.uri()} changed since the checkpoint ({expect} -> {now}): the "
                f"saved position (byte {start}) belongs to the old content; read the shard "
                "again from the start (a new epoch) or restore the old object", url=ref.uri())
        return stream  # type: ignore[return-value]

    def read(self, name: str | AISPath) -> bytes:
        """Returns one object's bytes (no fault, not recorded in :attr:`opens`)."""
        return self._object(self._path(name))[0]

    def version(self, ref: ObjectRef) -> str | None:
        """Returns the object's version key (None when the store is not ``versioned``)."""
        return self._version(*explained(self, ref.path, lambda: self._object(ref.path)))

    def get_batch(self, refs: Sequence[ObjectRef]) -> Iterator[bytes | None]:
        """Yields each object's bytes, None for a missing one (as Get-Batch does)."""
        for ref in refs:
            self.opens.append((ref.uri(), 0))
            objects = self._objects.get(ref.path.bucket)
            if objects is None:
                raise BucketNotFoundError(f"bucket {ref.path.bucket.uri()} does not exist in "
                                          "this MemoryStore", url=ref.uri(), status=404)
            found = objects.get(ref.path.obj)
            yield None if found is None else found[0]

    # ---- listing ---------------------------------------------------------------------------
    def list_pages(self, bucket: Bucket, prefix: str = "", *, props: str = "name",
                   page_size: int | None = None) -> Iterator[list[dict[str, Any]]]:
        """Yields the entries (``name``, ``size``) under ``prefix`` in name order, a page of
        ``page_size`` (default 1000) at a time; one empty page when there are none."""
        objects = self._objects.get(bucket)
        if objects is None:
            raise BucketNotFoundError(
                f"bucket {bucket.uri()} does not exist in this MemoryStore; put objects in it "
                "first", url=bucket.uri(), status=404)
        size = page_size or 1000
        entries = [{"name": name, "size": len(objects[name][0])}
                   for name in sorted(objects) if name.startswith(prefix)]
        for at in range(0, max(len(entries), 1), size):
            yield entries[at:at + size]

    def bucket_names(self) -> list[str]:
        """Returns the names of the store's buckets."""
        return [bucket.name for bucket in self._objects]

    def __repr__(self) -> str:
        count = sum(len(objects) for objects in self._objects.values())
        return f"MemoryStore({len(self._objects)} bucket(s), {count} object(s))"


class _MemoryStream(ReadStream):
    """One object's bytes from ``start``, ending at ``end`` (raising ``error`` there when one
    is set, else ending early when ``end`` is short of the object's size)."""

    def __init__(self, data: bytes, start: int, end: int, error: AISIOError | None,
                 version: str | None) -> None:
        super().__init__()
        self._data = memoryview(data)
        self.pos = start
        self._end = end
        self._error = error
        self.size = len(data)
        self.version = version

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = self._end - self.pos
        if self.pos >= self._end and size and self._error is not None:
            raise self._error
        chunk = bytes(self._data[self.pos:min(self._end, self.pos + size)])
        self.pos += len(chunk)
        return chunk


__all__ = ["MemoryStore"]
