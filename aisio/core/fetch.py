"""Reading objects: one stream at a time, in threads, or through Get-Batch; the cache; the policy.

:class:`Fetcher` is what :class:`~aisio.AISFileLoader` wraps, usable without any loader
framework::

    fetcher = Fetcher(AISConfig.from_env(), concurrency=1)
    for name, stream in fetcher.streams(["ais://b/shard-{0..9}.tar"]):
        ...

:class:`ErrorPolicy` is the one place that decides what ``on_error`` does with an error:
``"raise"`` raises it; ``"skip"``/``"warn"`` record a missing object or bad data in the
:class:`~aisio.ErrorReport` and go on, but never a usage or cluster error
(:func:`~aisio.core.errors.is_skippable`): an outage must not look like an empty dataset.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import warnings
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import IO, Any, Literal

from aisio.core.batch import get_batch
from aisio.core.cache import ShardCache
from aisio.core.client import Client, client_for
from aisio.core.config import AISConfig
from aisio.core.epoch import ShardTask
from aisio.core.errors import (
    AISIOError,
    EmptyEpochError,
    InvalidURLError,
    ObjectNotFoundError,
    is_skippable,
    skipped_reason,
)
from aisio.core.etl import read_url
from aisio.core.memory import keep_freed_memory
from aisio.core.report import ErrorReport
from aisio.core.sources import ObjectRef, explained, objects, resolve_one
from aisio.core.urls import ETL

log = logging.getLogger("aisio")

OnError = Literal["raise", "warn", "skip"]


def check_on_error(on_error: str) -> None:
    """Raises ValueError unless ``on_error`` is ``"raise"``, ``"warn"`` or ``"skip"``."""
    if on_error not in ("raise", "warn", "skip"):
        raise ValueError(f"on_error={on_error!r} must be 'raise', 'warn' or 'skip'")


@dataclass
class ErrorPolicy:
    """What ``on_error`` does with an error met while reading a shard.

    Args:
        on_error: ``"raise"``; or ``"skip"``/``"warn"`` (also warns) a missing object or bad
            data, recorded in ``report``. Usage and cluster errors always raise.
        report: where skipped shards are recorded.
    """

    on_error: OnError = "raise"
    report: ErrorReport = field(default_factory=ErrorReport)

    def __post_init__(self) -> None:
        check_on_error(self.on_error)

    def handle(self, error: AISIOError, shard: str | None, *, samples: int | None = None,
               sample: str | None = None) -> None:
        """Raises ``error``, or records it as skipped and returns: a shard, the rest of one, or
        (with ``sample``) one sample.

        Args:
            error: what went wrong; its ``offset`` (if any) says where reading stopped.
            shard: the shard's name.
            samples: how many samples of the shard were yielded before the error.
            sample: the key of the one sample skipped.
        """
        if self.on_error == "raise" or not is_skippable(error):
            raise error
        self.report.record(error, shard=shard, samples=samples)
        partly = bool(getattr(error, "offset", None)) or bool(samples)
        what = (f"sample {sample!r} of " if sample is not None
                else "the rest of " if partly else "")
        message = f"aisio skipped {what}{shard}: {skipped_reason(error)}"
        if self.on_error == "warn":
            warn_in_user_code(message)
        log.info("%s", message)


def _library_dirs() -> tuple[str, ...]:
    dirs = []
    for name in ("aisio", "torch", "torchdata"):
        path = getattr(sys.modules.get(name), "__file__", None)
        if path:
            dirs.append(os.path.dirname(path) + os.sep)
    return tuple(dirs)


def warn_in_user_code(message: str, category: type[Warning] = UserWarning) -> None:
    """Warns, attributing the warning to the first frame outside aisio, torch and torchdata
    (the user's ``for batch in loader:``), not to a DataPipe's iterator hook; in a worker
    process or thread, where no such frame exists, to the outermost one."""
    library = _library_dirs()
    frame = sys._getframe(1)
    level = 2  # warnings.warn's stacklevel of our caller's frame
    while frame.f_back is not None and frame.f_code.co_filename.startswith(library):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)


def check_epoch(yielded: int, report: ErrorReport | None, *, skipped_before: int = 0) -> None:
    """Raises :class:`EmptyEpochError` when an epoch yielded nothing because every shard was
    skipped: a dataset that is all bad must not look like an empty one.

    Args:
        yielded: how many items the epoch yielded.
        report: the epoch's skip report.
        skipped_before: how many records the report held when the epoch began.
    """
    if yielded or report is None:
        return
    records = report.records()[skipped_before:]
    if records:
        first = records[0]
        raise EmptyEpochError(
            f"the epoch yielded no sample: all {len(records)} shard(s) were skipped (first: "
            f"{first['shard']}: {skipped_reason(first['reason'])}); fix or remove them (see the "
            "loader's report)",
            url=first["shard"],
        )


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
    """

    config: AISConfig
    etl: ETL | None = None
    concurrency: int = 1
    batch_get: int = 0
    cache: ShardCache | None = None
    policy: ErrorPolicy = field(default_factory=ErrorPolicy)

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency={self.concurrency} must be at least 1")
        if self.batch_get < 0:
            raise ValueError(f"batch_get={self.batch_get} must be >= 0 (0: one GET per object)")

    # ---- what to read ----------------------------------------------------------------------
    def requests(self, items: Iterable[Any]) -> Iterator[tuple[Any, ObjectRef, int]]:
        """Yields ``(key, object, start)`` for every object the items name: a
        :class:`~aisio.core.epoch.ShardTask` keys itself and starts where it says; anything
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

    def client(self, ref: ObjectRef | None = None) -> Client:
        """Returns this process's client for the object's endpoint (the configured one)."""
        if ref is None or ref.endpoint is None or ref.endpoint == self.config.endpoint:
            return client_for(self.config)
        return client_for(self.config.with_endpoint(ref.endpoint))

    def url(self, ref: ObjectRef) -> str:
        """Returns the object's GET URL, with its ETL (else this fetcher's)."""
        return read_url(self.client(ref).endpoint, ref.path, self.etl_of(ref))

    def etl_of(self, ref: ObjectRef) -> ETL | None:
        """Returns the ETL an object is read through: its own, else this fetcher's."""
        return ref.etl if ref.endpoint is not None else (ref.etl or self.etl)

    # ---- reading ---------------------------------------------------------------------------
    def open(self, ref: ObjectRef, *, start: int = 0, expect: str | None = None) -> IO[bytes]:
        """Returns a stream over one object from byte ``start`` (cached, or resumable over HTTP).

        ``expect``: the content the object had when it was read before (a resumed shard).

        Raises:
            AISIOError: the object cannot be read (missing, refused, cluster down after retries),
                or is no longer the ``expect`` ed content (:class:`ObjectChangedError`).
        """
        keep_freed_memory()  # once per process: the next batch reuses what this one frees
        url = self.url(ref)
        etl = self.etl_of(ref)
        version = None
        if start == 0 and expect is None and self.cache is not None:
            cached = self.cache.open(url, self.client(ref))
            if cached is not None:
                return cached  # type: ignore[return-value]
            if etl is not None:
                # An ETL's answer names no version: keep it under the version of the object it
                # transforms, asked before the read (a newer object then never matches it).
                with contextlib.suppress(AISIOError):
                    version = self.client(ref).object_version(ref.path)
        client = self.client(ref)
        reader = explained(client, ref.path, lambda: client.open(
            url, name=ref.path.uri(), etl=etl, start=start, expect=expect))
        if start == 0 and self.cache is not None:
            return self.cache.filling(url, reader, version)
        return reader  # type: ignore[return-value]

    def streams(self, items: Iterable[Any]) -> Iterator[tuple[Any, IO[bytes]]]:
        """Yields ``(key, stream)`` for each object the items name, in order (the key is the
        object's name, or the :class:`~aisio.core.epoch.ShardTask` that asked for it); a
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
        group: list[tuple[Any, ObjectRef, int]] = []
        for request in requests:
            ref = request[1]
            if group and (self.etl_of(ref) is not None or request[2] or self.client(ref) is not
                          self.client(group[0][1]) or ref.path.bucket != group[0][1].path.bucket
                          or len(group) == self.batch_get):
                yield from self._flush(group)
                group = []
            group.append(request)
        yield from self._flush(group)

    def _flush(self, group: list[tuple[Any, ObjectRef, int]]) -> Iterator[tuple[Any, IO[bytes]]]:
        """Yields a group's objects from one Get-Batch; what it could not give, one by one."""
        if not group:
            return
        done = 0
        first = group[0][1]
        if self.etl_of(first) is None and not group[0][2] and len(group) > 1:
            batch = get_batch(self.client(first), first.path.bucket,
                              [ref.path.obj for _, ref, _ in group])
            while True:
                try:
                    _, data = next(batch)
                except StopIteration:
                    break
                except AISIOError as exc:
                    log.debug("aisio: Get-Batch refused (%s); reading %d object(s) one by one",
                              exc, len(group) - done)
                    break
                key, ref, _ = group[done]
                done += 1
                if data is None:
                    self.policy.handle(ObjectNotFoundError(
                        f"object {ref.path.uri()} does not exist; check the name, or list the "
                        "bucket to see what is there", url=ref.path.uri(),
                        missing=(ref.path.uri(),)), ref.uri())
                    continue
                yield key, io.BytesIO(data)
        for key, ref, start in group[done:]:
            try:
                data = self.read(ref, start, _expected(key))
            except AISIOError as exc:
                self.policy.handle(exc, ref.uri())
                continue
            yield key, io.BytesIO(data)


def _expected(key: Any) -> str | None:
    """Returns the content a resumed task's shard must still have (None: not checked)."""
    return key.version if isinstance(key, ShardTask) else None


class _Whole(io.BytesIO):
    """An object read whole, with what names its content (see ``content_id``)."""

    version: str | None = None
    size: int | None = None
