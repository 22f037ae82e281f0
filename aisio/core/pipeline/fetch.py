"""Reading objects: one stream at a time, in threads, or through Get-Batch; the cache.

:class:`Fetcher` is what :class:`~aisio.AISFileLoader` wraps, usable without any loader
framework::

    fetcher = Fetcher(AISConfig.from_env(), concurrency=1)
    for name, stream in fetcher.streams(["ais://b/shard-{0..9}.tar"]):
        ...

The bytes come from its ``store`` (:mod:`aisio.core.store.protocol`): the AIStore cluster of
its config unless another is given, read through its ``cache`` if it has one.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import logging
import math
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import IO, Any

from aisio.core.epochs.progress import ShardTask
from aisio.core.faults.errors import (
    AISIOError,
    InvalidURLError,
    ObjectChangedError,
    ObjectNotFoundError,
)
from aisio.core.faults.policy import (
    ErrorPolicy,
)
from aisio.core.store.ais import AISStore
from aisio.core.store.cache import ShardCache
from aisio.core.store.config import AISConfig
from aisio.core.store.protocol import ObjectStore
from aisio.core.store.sources import ObjectRef, objects, resolve_one
from aisio.core.store.urls import ETL
from aisio.core.system.memory import keep_freed_memory

log = logging.getLogger("aisio")

@dataclass(frozen=True)
class Fetcher:
    """Opens objects for reading, in the mode asked for, with the cache and the error policy.

    Args:
        config: endpoint, token, TLS, timeouts, retries.
        etl: an ETL to apply to objects named without one.
        concurrency: with more than 1, small objects are fetched whole by that many threads,
            still yielded in order.
        batch_get: fetch up to this many consecutive objects of a bucket in one Get-Batch
            request (``/v1/ml/moss``), in order (0: one GET each).
        cache: a :class:`ShardCache` that keeps objects read to the end on local disk.
        policy: what to do with a missing object (see :class:`ErrorPolicy`).
        store: where the objects are read from (default: the AIStore cluster of ``config``).
    """

    config: AISConfig
    etl: ETL | None = None
    concurrency: int = 1
    batch_get: int = 0
    cache: ShardCache | None = None
    policy: ErrorPolicy = field(default_factory=ErrorPolicy)
    store: ObjectStore | None = None

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency={self.concurrency} must be at least 1")
        if self.batch_get < 0:
            raise ValueError(f"batch_get={self.batch_get} must be >= 0 (0: one GET per object)")

    # ---- what to read ----------------------------------------------------------------------
    def requests(self, items: Iterable[Any]) -> Iterator[tuple[Any, ObjectRef, int]]:
        """Yields ``(key, object, start)`` for every object the items name: a
        :class:`~aisio.core.epochs.progress.ShardTask` keys itself and starts where it says;
        anything
        else is keyed by the object's name and read from byte 0."""
        for item in items:
            if isinstance(item, ShardTask):
                yield item, item.ref, item.start
            else:
                for ref in self.refs([item]):
                    yield ref.uri(), ref, 0

    def refs(self, items: Iterable[Any]) -> Iterator[ObjectRef]:
        """Yields the objects that items name: refs as they are; names, templates and URLs
        resolved (a bucket or prefix is refused: list it first)."""
        for item in items:
            if isinstance(item, ObjectRef):
                yield item
                continue
            for source in resolve_one(item):
                if source.kind == "prefix":
                    raise InvalidURLError(
                        f"{source.uri()} names a bucket or prefix, not an object; list it "
                        "first: AISFileLister(...).ais_load_files(...)",
                        url=source.uri(),
                    )
                yield from objects(source)

    @functools.cached_property
    def reader(self) -> ObjectStore:
        """Returns the store objects are read from: ``store`` (else the cluster of ``config``),
        through ``cache`` if there is one."""
        store = self.store if self.store is not None else AISStore(self.config)
        return self.cache.over(store) if self.cache is not None else store

    def etl_of(self, ref: ObjectRef) -> ETL | None:
        """Returns the ETL an object is read through: its own, else this fetcher's."""
        return ref.etl if ref.endpoint is not None else (ref.etl or self.etl)

    # ---- reading ---------------------------------------------------------------------------
    def open(self, ref: ObjectRef, *, start: int = 0, expect: str | None = None) -> IO[bytes]:
        """Returns a stream over one object from byte ``start``, from the store (through the
        cache).

        ``expect``: the content the object had when it was read before (a resumed shard).

        Raises:
            AISIOError: the object cannot be read (missing, refused, cluster down after retries),
                or is no longer the ``expect`` ed content (:class:`ObjectChangedError`).
        """
        keep_freed_memory()  # once per process: the next batch reuses what this one frees
        etl = self.etl_of(ref)
        if etl is not ref.etl:
            ref = dataclasses.replace(ref, etl=etl)
        if etl is not None and expect is not None and not expect.startswith("size="):
            # An ETL's answer read into the cache was named by the version of the object it
            # transforms (see CachedStore); its resume asks that version again, not the
            # answer's size.
            now = self.reader.version(ref)
            if now != expect:
                raise ObjectChangedError(
                    f"object {ref.uri()} changed since the checkpoint ({expect} -> {now}): its "
                    f"transformed samples read before belong to the old content; read the "
                    "shard again from the start (a new epoch) or restore the old object",
                    url=ref.uri())
            expect = None
        return self.reader.open(ref, start=start, expect=expect)

    def streams(self, items: Iterable[Any]) -> Iterator[tuple[Any, IO[bytes]]]:
        """Yields ``(key, stream)`` for each object the items name, in order (the key is the
        object's name, or the :class:`~aisio.core.epochs.progress.ShardTask` that asked for it); a
        missing object is skipped or raised by the policy."""
        requests = self.requests(items)
        if self.batch_get:
            yield from self._batched(requests)
        elif self.concurrency > 1:
            yield from self._threaded(requests)
        else:
            for key, ref, start in requests:
                try:
                    stream = self.open(ref, start=start, expect=_expected(key))
                except AISIOError as exc:
                    self.policy.handle(exc, ref.uri())
                    continue
                yield key, stream

    def read(self, ref: ObjectRef, start: int = 0, expect: str | None = None) -> bytes:
        """Returns one object's bytes from ``start``, read whole (through the cache)."""
        with self.open(ref, start=start, expect=expect) as stream:
            return stream.read()

    def _threaded(self, requests: Iterable[tuple[Any, ObjectRef, int]]
                  ) -> Iterator[tuple[Any, IO[bytes]]]:
        window: deque[tuple[Any, ObjectRef, Future[IO[bytes]]]] = deque()
        pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="aisio-get")
        try:
            for key, ref, start in requests:
                window.append((key, ref, pool.submit(self._read_whole, ref, start,
                                                     _expected(key))))
                if len(window) >= 2 * self.concurrency:
                    yield from self._settle(*window.popleft())
            while window:
                yield from self._settle(*window.popleft())
        finally:
            # Stopping early must not wait for reads in flight: a stalled one would hold the
            # caller for up to (max_retries + 1) x read_timeout. They end by their timeouts.
            pool.shutdown(wait=False, cancel_futures=True)

    def _read_whole(self, ref: ObjectRef, start: int, expect: str | None) -> IO[bytes]:
        """Returns one object's bytes from ``start`` as a stream that names its content."""
        with self.open(ref, start=start, expect=expect) as stream:
            whole = _Whole(stream.read())
            whole.version, whole.size = (getattr(stream, "version", None),
                                         getattr(stream, "size", None))
            return whole

    def _settle(self, key: Any, ref: ObjectRef, future: Future[IO[bytes]]
                ) -> Iterator[tuple[Any, IO[bytes]]]:
        try:
            stream = future.result()
        except AISIOError as exc:
            self.policy.handle(exc, ref.uri())
            return
        yield key, stream

    def _batched(self, requests: Iterable[tuple[Any, ObjectRef, int]]
                 ) -> Iterator[tuple[Any, IO[bytes]]]:
        """Yields the objects of Get-Batch groups in order, the next groups' requests in
        flight while this one is used (how many: :class:`AheadDepth`, from what it measures)."""
        depth = AheadDepth()
        window: deque[tuple[list[tuple[Any, ObjectRef, int]], Future[_Group]]] = deque()
        pool = ThreadPoolExecutor(AheadDepth.MOST, thread_name_prefix="aisio-batch")
        groups = self._groups(requests)
        ended, error = False, None
        try:
            while True:
                while not ended and len(window) <= depth.now:
                    try:
                        group = next(groups)
                    except StopIteration:
                        ended = True
                        break
                    except Exception as exc:  # a bad name: raised after the groups before it
                        ended, error = True, exc
                        break
                    window.append((group, pool.submit(self._fetch_group, group)))
                if not window:
                    if error is not None:
                        raise error
                    return
                group, future = window.popleft()
                fetched = future.result()
                began = time.monotonic()
                yield from self._deliver(group, fetched)
                depth.learn(fetched.seconds, time.monotonic() - began, fetched.nbytes)
        finally:
            # As in _threaded: stopping early does not wait for the requests in flight.
            pool.shutdown(wait=False, cancel_futures=True)

    def _groups(self, requests: Iterable[tuple[Any, ObjectRef, int]]
                ) -> Iterator[list[tuple[Any, ObjectRef, int]]]:
        """Yields the requests in groups of consecutive objects one Get-Batch can read."""
        group: list[tuple[Any, ObjectRef, int]] = []
        try:
            for request in requests:
                ref = request[1]
                if group and (self.etl_of(ref) is not None or request[2]
                              or ref.endpoint != group[0][1].endpoint
                              or ref.path.bucket != group[0][1].path.bucket
                              or len(group) == self.batch_get):
                    yield group
                    group = []
                group.append(request)
        except Exception:  # a bad name further on: the objects named before it are still read
            if group:
                yield group
            raise
        if group:
            yield group

    def _fetch_group(self, group: list[tuple[Any, ObjectRef, int]]) -> _Group:
        """Reads a group's objects with one Get-Batch (in a thread of :meth:`_batched`); stops
        at the first refusal, which :meth:`_deliver` then reads one by one."""
        began = time.monotonic()
        fetched = _Group()
        first = group[0][1]
        if self.etl_of(first) is None and not group[0][2] and len(group) > 1:
            try:
                for data in self.reader.get_batch([ref for _, ref, _ in group]):
                    fetched.data.append(data)
                    fetched.nbytes += len(data or b"")
            except AISIOError as exc:
                log.debug("aisio: Get-Batch refused (%s); reading %d object(s) one by one",
                          exc, len(group) - len(fetched.data))
        fetched.seconds = time.monotonic() - began
        return fetched

    def _deliver(self, group: list[tuple[Any, ObjectRef, int]], fetched: _Group
                 ) -> Iterator[tuple[Any, IO[bytes]]]:
        """Yields a group's objects: those its Get-Batch gave, then the rest one by one."""
        for (key, ref, _), data in zip(group, fetched.data, strict=False):
            if data is None:
                self.policy.handle(ObjectNotFoundError(
                    f"object {ref.path.uri()} does not exist; check the name, or list the "
                    "bucket to see what is there", url=ref.path.uri(),
                    missing=(ref.path.uri(),)), ref.uri())
                continue
            yield key, io.BytesIO(data)
        for key, ref, start in group[len(fetched.data):]:
            try:
                data = self.read(ref, start, _expected(key))
            except AISIOError as exc:
                self.policy.handle(exc, ref.uri())
                continue
            yield key, io.BytesIO(data)


@dataclass
class _Group:
    """What one Get-Batch gave: the objects' bytes in order (None: missing), until the end
    or the first refusal, their size, and the request's wall time."""

    data: list[bytes | None] = field(default_factory=list)
    nbytes: int = 0
    seconds: float = 0.0


class AheadDepth:
    """How many Get-Batch requests to keep in flight beyond the one being used.

    Enough that the next group has arrived when this one is used up: the ratio of a request's
    time to the time the caller takes over a group, both measured on the last group (a round
    trip of milliseconds makes a request slow beside the caller, a loopback one does not);
    never more groups ahead than fit in :attr:`BYTES` as the last one was, at least 1, at most
    :attr:`MOST`.
    """

    MOST = 4
    BYTES = 64 << 20

    def __init__(self) -> None:
        self.now = 2

    def learn(self, fetch_s: float, use_s: float, nbytes: int) -> None:
        """Sizes the depth from the last group: its request's time, the time it was used,
        its bytes."""
        want = math.ceil(fetch_s / max(use_s, 1e-4))
        fit = self.BYTES // max(nbytes, 1)
        self.now = max(1, min(self.MOST, want, fit))


def _expected(key: Any) -> str | None:
    """Returns the content a resumed task's shard must still have (None: not checked)."""
    return key.version if isinstance(key, ShardTask) else None


class _Whole(io.BytesIO):
    """An object read whole, with what names its content (see ``content_id``)."""

    version: str | None = None
    size: int | None = None
