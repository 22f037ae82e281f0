"""The IterDataPipes: thin wrappers over the framework-free core (:mod:`aisio.core`).

They build on torch's DataPipe classes (:mod:`aisio.datapipes.base`), never on torchdata. Every
DataPipe here holds only its arguments and an :class:`AISConfig`; the HTTP client is created
lazily in whichever process iterates it, so the DataPipes pickle into worker processes.
"""

from __future__ import annotations

import io
import logging
import warnings
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Literal

from aisio.core.batch import get_batch
from aisio.core.cache import ShardCache
from aisio.core.client import Client, client_for
from aisio.core.config import AISConfig, resolve_config
from aisio.core.errors import AISIOError, InvalidURLError, ObjectNotFoundError
from aisio.core.report import ErrorReport
from aisio.core.samples import group_samples
from aisio.core.sources import (
    as_sources,
    check_template,
    expand,
    list_prefix,
    prefixes_for,
    to_paths,
)
from aisio.core.tar import iter_tar
from aisio.core.urls import ETL, AISPath, count_template, object_url, parse_object_url, to_etl
from aisio.datapipes.base import IterDataPipe, StreamWrapper, functional_datapipe

log = logging.getLogger("aisio")

OnError = Literal["raise", "warn", "skip"]


def _check_on_error(on_error: str) -> None:
    if on_error not in ("raise", "warn", "skip"):
        raise ValueError(f"on_error={on_error!r} must be 'raise', 'warn' or 'skip'")


def _skip(on_error: OnError, report: ErrorReport, error: AISIOError, shard: str) -> None:
    """Records a skipped shard (or the rest of one), warning if asked; re-raises on "raise"."""
    if on_error == "raise":
        raise error
    report.record(error, shard=shard)
    message = f"aisio skipped {'the rest of ' if getattr(error, 'offset', None) else ''}{shard}: "
    if on_error == "warn":
        warnings.warn(message + str(error), stacklevel=3)
    log.info("%s%s", message, error)


class _AISDataPipe(IterDataPipe):
    """Shared plumbing: the effective config, the per-process client, and ``len()``."""

    # torch checks this attribute on every item; found on the class, the lookup stays cheap
    # (a miss falls through IterDataPipe.__getattr__, about 1 us a sample).
    _is_child_datapipe = False

    def __init__(self, url: str | None, config: AISConfig | None, length: int) -> None:
        self.config = resolve_config(url, config)
        self.length = length

    def _client(self) -> Client:
        # A method, not a property: torch's DataPipe hooks inspect attributes when reporting
        # errors, and a property that raises (no endpoint) would hide the real error.
        return client_for(self.config)

    def _client_for_endpoint(self, endpoint: str) -> Client:
        return client_for(self.config.with_endpoint(endpoint))

    def __len__(self) -> int:
        if self.length >= 0:
            return self.length
        raise TypeError(
            f"{type(self).__name__} has no known length: pass length=N, or use templates "
            "(whose size is counted) instead of prefixes"
        )


def _source_items(source: Any) -> Iterable[Any]:
    return source if isinstance(source, IterDataPipe) else as_sources(source)


def _is_exact(source: Any, path: AISPath) -> bool:
    """Strings name prefixes; SDK Objects/ObjectGroups and HTTP URLs name exact objects."""
    if isinstance(source, str):
        return source.startswith(("http://", "https://"))
    return bool(path.obj)


def _count(sources: Any) -> int:
    """Returns how many objects static sources name, or -1 when a listing would be needed."""
    if isinstance(sources, IterDataPipe):
        return -1
    total = 0
    for source in as_sources(sources):
        for path in to_paths(source):
            if path.is_template:
                total += count_template(path.obj)
            elif _is_exact(source, path):
                total += 1
            else:
                return -1
    return total


@functional_datapipe("ais_list_files")
class AISFileLister(_AISDataPipe):
    """Yields ``provider://bucket/object`` for every object the sources name.

    A source is an AIS name (``ais://bucket``, ``ais://bucket/prefix``), a brace template
    (``ais://bucket/shard-{000..099}.tar``), or an aistore SDK Bucket/ObjectGroup/Object. Prefixes
    are listed page by page to the end; templates yield their expansion (checked against the
    bucket with ``check_templates=True``, all missing names reported in one error).

    Args:
        source_datapipe: sources, alone, in a list, or from an upstream IterDataPipe.
        url: the AIStore endpoint (else ``config``, else ``AIS_ENDPOINT``).
        length: the number of objects, if known (``len()`` raises TypeError otherwise).
        config: an :class:`AISConfig` (token, TLS, timeouts, retries, page size).
        props: comma-separated properties to list (``"size,version"``); then items are
            ``(name, {prop: value})`` pairs instead of names.
        check_templates: verify that every name of a template exists.

    Example:
        >>> from torchdata.datapipes.iter import IterableWrapper
        >>> names = AISFileLister(["ais://bucket/train/"], url=endpoint)      # doctest: +SKIP
        >>> names = IterableWrapper(["ais://bucket"]).ais_list_files(url=endpoint)  # doctest: +SKIP
    """

    def __init__(
        self,
        source_datapipe: Any,
        url: str | None = None,
        length: int = -1,
        *,
        config: AISConfig | None = None,
        props: str | None = None,
        check_templates: bool = False,
        page_size: int | None = None,
    ) -> None:
        super().__init__(url, config, length if length >= 0 else _count(source_datapipe))
        self.source_datapipe = source_datapipe
        self.props = props
        self.check_templates = check_templates
        self.page_size = page_size

    def __iter__(self) -> Iterator[Any]:
        props = f"name,{self.props}" if self.props else "name"
        for source in _source_items(self.source_datapipe):
            for path in to_paths(source):
                if path.is_template:
                    if self.check_templates:
                        paths: Iterable[AISPath] = check_template(self._client(), path)
                    else:
                        paths = expand(path)
                    for each in paths:
                        yield (each.uri(), {}) if self.props else each.uri()
                elif _is_exact(source, path):
                    yield (path.uri(), {}) if self.props else path.uri()
                else:
                    for found, entry in list_prefix(self._client(), path, props=props,
                                                    page_size=self.page_size):
                        yield (found.uri(), entry) if self.props else found.uri()


@functional_datapipe("ais_list_sources")
class AISSourceLister(_AISDataPipe):
    """Yields the HTTP GET URL of every object the sources name, with the ETL in the query.

    The URLs work with any HTTP client, with ``webdataset.WebDataset`` and with
    :class:`AISFileLoader`.

    Args:
        ais_sources: sources as for :class:`AISFileLister` (alone, a list or an IterDataPipe).
        prefix_map: ``{source: prefix or [prefixes]}`` to list only part of a bucket source.
        etl: an ETL name, :class:`aisio.ETL` (name and args) or the SDK's ``ETLConfig``.
        url: the AIStore endpoint (else ``config``, else ``AIS_ENDPOINT``).
        config: an :class:`AISConfig`.
        length: the number of URLs, if known.

    Example:
        >>> urls = AISSourceLister(["ais://bucket/shard-{0..9}.tar"], etl=ETL("resize", {"w": 64}),
        ...                        url=endpoint)                             # doctest: +SKIP
    """

    def __init__(
        self,
        ais_sources: Any,
        prefix_map: Mapping[Any, str | Sequence[str]] | None = None,
        etl: ETL | str | Any | None = None,
        *,
        url: str | None = None,
        config: AISConfig | None = None,
        length: int = -1,
        page_size: int | None = None,
    ) -> None:
        super().__init__(url, config, length if length >= 0 or prefix_map else _count(ais_sources))
        self.ais_sources = ais_sources
        self.prefix_map = prefix_map
        self.etl = to_etl(etl)
        self.page_size = page_size

    def __iter__(self) -> Iterator[str]:
        endpoint = self._client().endpoint
        for source in _source_items(self.ais_sources):
            for path in to_paths(source):
                if path.is_template or _is_exact(source, path):
                    for each in expand(path):
                        yield object_url(endpoint, each, self.etl)
                    continue
                for prefix in prefixes_for(source, self.prefix_map):
                    scoped = AISPath(path.bucket, path.obj + prefix)
                    for found, _ in list_prefix(self._client(), scoped, page_size=self.page_size):
                        yield object_url(endpoint, found, self.etl)


@functional_datapipe("ais_load_files")
class AISFileLoader(_AISDataPipe):
    """Yields ``(url, stream)`` for each object: a StreamWrapper over the streamed body.

    Sources are object names (``ais://bucket/object``, templates) or the HTTP URLs of
    :class:`AISSourceLister` (their ETL is kept). Bodies are streamed, never read whole, over pooled
    connections; a broken connection resumes at the exact byte. With ``concurrency > 1`` small
    objects are fetched whole by that many threads and still yielded in order.

    Args:
        source_datapipe: object names or URLs, alone, in a list, or from an upstream IterDataPipe.
        url: the AIStore endpoint for ``ais://`` names (else ``config``, else ``AIS_ENDPOINT``).
        length: the number of objects, if known.
        etl: an ETL to apply to ``ais://`` names.
        config: an :class:`AISConfig`.
        concurrency: parallel GETs for many small objects (1: stream one at a time).
        on_error: ``"raise"`` typed errors (missing object, ETL, retries exhausted); ``"skip"`` or
            ``"warn"`` to record the object in ``report`` and go on with the next.
        report: where skipped objects are recorded (default: a new in-memory report).
        cache: a :class:`ShardCache`: objects read to the end are kept on local disk and read
            from there next time (keyed by URL, so by object and ETL).
        batch_get: for many small objects, fetch up to this many consecutive objects of a bucket
            in one Get-Batch request (``/v1/ml/moss``), in order (0: one GET each). Objects with
            an ETL, and groups the cluster refuses, are read one by one.

    Example:
        >>> streams = AISFileLister("ais://bucket/imgs/", url=endpoint).ais_load_files(
        ...     url=endpoint)                                                     # doctest: +SKIP
    """

    def __init__(
        self,
        source_datapipe: Any,
        url: str | None = None,
        length: int = -1,
        etl: ETL | str | Any | None = None,
        *,
        config: AISConfig | None = None,
        concurrency: int = 1,
        on_error: OnError = "raise",
        report: ErrorReport | None = None,
        cache: ShardCache | None = None,
        batch_get: int = 0,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency={concurrency} must be at least 1")
        _check_on_error(on_error)
        super().__init__(url, config, length)
        self.source_datapipe = source_datapipe
        self.etl = to_etl(etl)
        self.concurrency = concurrency
        self.on_error = on_error
        self.report = report if report is not None else ErrorReport()
        self.cache = cache
        if batch_get < 0:
            raise ValueError(f"batch_get={batch_get} must be >= 0 (0: one GET per object)")
        self.batch_get = batch_get

    def _requests(self) -> Iterator[tuple[str, Client, str, AISPath, ETL | None]]:
        """Yields (name, client, GET url, path, etl) for every object the sources name."""
        for source in _source_items(self.source_datapipe):
            if isinstance(source, str) and source.startswith(("http://", "https://")):
                endpoint, path, etl = parse_object_url(source)
                yield source, self._client_for_endpoint(endpoint), source, path, etl
                continue
            for path in to_paths(source):
                for each in expand(path):
                    if not each.obj or each.obj.endswith("/"):
                        raise InvalidURLError(
                            f"{each.uri()} names a bucket or prefix, not an object; list it "
                            "first: AISFileLister(...).ais_load_files(...)",
                            url=each.uri(),
                        )
                    url = object_url(self._client().endpoint, each, self.etl)
                    name = source if isinstance(source, str) and not path.is_template else (
                        each.uri()
                    )
                    yield name, self._client(), url, each, self.etl

    def __iter__(self) -> Iterator[tuple[str, StreamWrapper]]:
        if self.batch_get:
            yield from self._iter_batched()
            return
        if self.concurrency == 1:
            for name, client, url, path, etl in self._requests():
                cached = self.cache.open(url, client) if self.cache else None
                if cached is not None:
                    yield name, StreamWrapper(cached, name=name)
                    continue
                try:
                    reader = client.open(url, name=path.uri(), etl=etl)
                except AISIOError as exc:
                    _skip(self.on_error, self.report, exc, name)
                    continue
                stream = self.cache.filling(url, reader) if self.cache else reader
                yield name, StreamWrapper(stream, name=name)
            return
        yield from self._iter_concurrent()

    def _iter_concurrent(self) -> Iterator[tuple[str, StreamWrapper]]:
        window: deque[tuple[str, Future[bytes]]] = deque()
        pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="aisio-get")
        try:
            for name, client, url, path, etl in self._requests():
                window.append((name, pool.submit(_fetch, client, url, path, etl, self.cache)))
                if len(window) >= 2 * self.concurrency:
                    yield from self._settle(*window.popleft())
            while window:
                yield from self._settle(*window.popleft())
        finally:
            # Stopping early must not wait for reads in flight: a stalled one would hold the
            # caller for up to (max_retries + 1) x read_timeout. They end by their timeouts.
            pool.shutdown(wait=False, cancel_futures=True)


    def _iter_batched(self) -> Iterator[tuple[str, StreamWrapper]]:
        group: list[tuple[str, Client, str, AISPath, ETL | None]] = []
        for request in self._requests():
            _, client, _, path, etl = request
            if group and (etl is not None or client is not group[0][1]
                          or path.bucket != group[0][3].bucket or len(group) == self.batch_get):
                yield from self._flush(group)
                group = []
            group.append(request)
        yield from self._flush(group)

    def _flush(self, group: list[tuple[str, Client, str, AISPath, ETL | None]]
               ) -> Iterator[tuple[str, StreamWrapper]]:
        """Yields a group's objects from one Get-Batch; what it could not give, one by one."""
        if not group:
            return
        done = 0
        if group[0][4] is None and len(group) > 1:
            batch = get_batch(group[0][1], group[0][3].bucket, [req[3].obj for req in group])
            while True:
                try:
                    _, data = next(batch)
                except StopIteration:
                    break
                except AISIOError as exc:
                    log.debug("aisio: Get-Batch refused (%s); reading %d object(s) one by one",
                              exc, len(group) - done)
                    break
                name, path = group[done][0], group[done][3]
                done += 1
                if data is None:
                    _skip(self.on_error, self.report, ObjectNotFoundError(
                        f"object {path.uri()} does not exist; check the name, or list the "
                        "bucket to see what is there", url=path.uri(), missing=(path.uri(),)),
                        name)
                    continue
                yield name, StreamWrapper(io.BytesIO(data), name=name)
        for name, client, url, path, etl in group[done:]:
            try:
                data = _fetch(client, url, path, etl, self.cache)
            except AISIOError as exc:
                _skip(self.on_error, self.report, exc, name)
                continue
            yield name, StreamWrapper(io.BytesIO(data), name=name)

    def _settle(self, name: str, future: Future[bytes]) -> Iterator[tuple[str, StreamWrapper]]:
        try:
            data = future.result()
        except AISIOError as exc:
            _skip(self.on_error, self.report, exc, name)
            return
        yield name, StreamWrapper(io.BytesIO(data), name=name)


def _drain(stream: Any, limit: int = 1 << 20) -> None:
    """Reads the end-of-archive padding after the last member (a cache keeps only whole shards)."""
    if getattr(stream, "caching", False):  # filling a cache: to the end, however far
        limit = 1 << 62
    while limit > 0:
        chunk = stream.read(min(limit, 1 << 16))
        if not chunk:
            return
        limit -= len(chunk)


def _fetch(client: Client, url: str, path: AISPath, etl: ETL | None,
           cache: ShardCache | None) -> bytes:
    cached = cache.open(url, client) if cache else None
    if cached is not None:
        with cached:
            return cached.read()
    with client.open(url, name=path.uri(), etl=etl) as reader:
        data = reader.read()
    if cache is not None:
        cache.store(url, data, reader.version)
    return data


@functional_datapipe("ais_parse_webdataset")
class WebDatasetParser(IterDataPipe):
    """Yields WebDataset samples (dicts with ``__key__``, ``__url__`` and one entry per suffix).

    Takes ``(url, stream)`` pairs, e.g. from :class:`AISFileLoader`, parses each tar stream as it
    arrives (memory stays bounded by one sample), and groups consecutive files that share a key.

    Args:
        source_datapipe: ``(url, binary stream)`` pairs.
        on_error: ``"raise"`` a :class:`ShardFormatError` naming shard, offset and member;
            ``"warn"`` or ``"skip"`` to stop reading that shard and go on with the next, recorded
            in ``report`` (``"warn"`` also warns). Samples yielded before the fault stay yielded,
            none is repeated.
        report: where skipped shards are recorded; pass a file-backed
            ``ErrorReport.temporary()`` to read records made in DataLoader2 workers.

    Example:
        >>> samples = AISFileLoader(["ais://b/shard-{0..9}.tar"], url=endpoint
        ...                         ).ais_parse_webdataset()                    # doctest: +SKIP
    """

    _is_child_datapipe = False  # see _AISDataPipe

    def __init__(self, source_datapipe: Iterable[tuple[str, Any]], *,
                 on_error: OnError = "raise", report: ErrorReport | None = None) -> None:
        _check_on_error(on_error)
        self.source_datapipe = source_datapipe
        self.on_error = on_error
        self.report = report if report is not None else ErrorReport()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for url, stream in self.source_datapipe:
            try:
                yield from group_samples(iter_tar(stream, url=url), url=url)
                _drain(stream)
            except AISIOError as exc:
                _skip(self.on_error, self.report, exc, url)
            finally:
                stream.close()
