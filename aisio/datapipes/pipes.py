"""The IterDataPipes: thin wrappers over the framework-free core (:mod:`aisio.core`).

They build on torch's DataPipe classes (:mod:`aisio.datapipes.base`), never on torchdata. Every
DataPipe here holds only its arguments and an :class:`AISConfig`; the HTTP client is created
lazily in whichever process iterates it, so the DataPipes pickle into worker processes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from aisio.core.epochs.progress import ShardTask
from aisio.core.faults.policy import ErrorPolicy, OnError
from aisio.core.faults.report import ErrorReport
from aisio.core.format.tar.runs import RunPlan
from aisio.core.pipeline.fetch import Fetcher
from aisio.core.pipeline.parse import parse_streams
from aisio.core.store.cache import ShardCache
from aisio.core.store.client import Client, client_for
from aisio.core.store.config import AISConfig, resolve_config
from aisio.core.store.etl import read_url
from aisio.core.store.protocol import ObjectStore
from aisio.core.store.sources import (
    as_sources,
    count,
    list_prefix,
    objects,
    prefixes_for,
    resolve,
    resolve_one,
)
from aisio.core.store.suggest import Lister
from aisio.core.store.urls import ETL, AISPath, to_etl
from aisio.core.system.imports import after_import, quietly
from aisio.datapipes.base import (
    IterDataPipe,
    StreamWrapper,
    Unhooked,
    functional_datapipe,
)

__all__ = ["AISFileLister", "AISFileLoader", "AISSourceLister", "OnError", "WebDatasetParser"]


class _AISDataPipe(IterDataPipe):
    """Shared plumbing: the effective config, the per-process client, and ``len()``."""

    # torch checks this attribute on every item; found on the class, the lookup stays cheap
    # (a miss falls through IterDataPipe.__getattr__, a cost per sample measured in
    # benchmarks/README.md, Figures behind the code's comments).
    _is_child_datapipe = False

    def __init__(self, url: str | None, config: AISConfig | None, length: int,
                 endpoint: str | None = None) -> None:
        _fix_dataloader2()
        self.config = resolve_config(url, config, endpoint=endpoint)
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


@functools.cache
def _fix_dataloader2() -> None:
    """Installs aisio's fix of DataLoader2's multiprocessing round robin (torchdata 0.9), so
    that any DataLoader2 over aisio DataPipes, hand-made ones too, survives workers that yield
    different numbers of items: now if torchdata's DataLoader2 is imported, else as soon as it
    is (a loader that never uses it never imports it: torchdata's DataLoader2 brings its
    DataPipes, the aistore SDK and pydantic along). Nothing to do where torchdata has no
    DataLoader2."""
    after_import("torchdata.dataloader2", quietly(_install_mpfix))


def _install_mpfix() -> None:
    try:
        from aisio.datapipes import mpfix
    except ImportError:
        return
    mpfix.install()


def _source_items(source: Any) -> Iterable[Any]:
    return source if isinstance(source, IterDataPipe) else as_sources(source)


def _count(sources: Any, *, listing: bool) -> int:
    """Returns how many objects static sources name, or -1 when a listing would be needed."""
    return -1 if isinstance(sources, IterDataPipe) else count(resolve(sources, listing=listing))


def _etl(etl: Any, etl_name: str | None) -> ETL | None:
    """Returns the ETL of ``etl=``, or of ``etl_name=`` (the removed AIStore DataPipes' name)."""
    if etl is not None and etl_name is not None:
        raise ValueError("pass etl= or etl_name=, not both (etl_name= is the older spelling)")
    return to_etl(etl if etl is not None else etl_name)


@functional_datapipe("ais_list_files")
class AISFileLister(_AISDataPipe):
    """Yields ``provider://bucket/object`` for every object the sources name.

    A source is an AIS name (``ais://bucket``, ``ais://bucket/prefix``), a brace template
    (``ais://bucket/shard-{000..099}.tar``), or an aistore SDK Bucket/ObjectGroup/Object. Prefixes
    are listed page by page to the end; templates yield their expansion, checked against the
    bucket first with one listing: names that do not exist raise ObjectNotFoundError, all of
    them in ``.missing`` and the nearest template that exists in the message
    (``check_templates=False`` yields the expansion unchecked, without I/O).

    Args:
        source_datapipe: sources, alone, in a list, or from an upstream IterDataPipe.
        url: the AIStore endpoint: ``endpoint=``, as the removed DataPipes spelled it.
        length: the number of objects, if known (``len()`` raises TypeError otherwise).
        config: an :class:`AISConfig` (token, TLS, timeouts, retries, page size).
        endpoint: the AIStore endpoint (else ``config``, else ``AIS_ENDPOINT``).
        props: comma-separated properties to list (``"size,version"``); then items are
            ``(name, {prop: value})`` pairs instead of names.
        check_templates: verify that every name of a template exists (the default).
        store: where the objects are listed from (default: the AIStore cluster of the
            endpoint), e.g. a :class:`~aisio.MemoryStore`.

    Example:
        >>> from torch.utils.data.datapipes.iter import IterableWrapper
        >>> names = AISFileLister(["ais://bucket/train/"], endpoint=ep)       # doctest: +SKIP
        >>> names = IterableWrapper(["ais://bucket"]).ais_list_files(endpoint=ep)  # doctest: +SKIP
    """

    def __init__(
        self,
        source_datapipe: Any,
        url: str | None = None,
        length: int = -1,
        *,
        config: AISConfig | None = None,
        props: str | None = None,
        check_templates: bool = True,
        page_size: int | None = None,
        endpoint: str | None = None,
        store: ObjectStore | None = None,
    ) -> None:
        super().__init__(url, config,
                         length if length >= 0 else _count(source_datapipe, listing=True),
                         endpoint)
        self.source_datapipe = source_datapipe
        self.props = props
        self.check_templates = check_templates
        self.page_size = page_size
        self.store = store

    def _lister(self) -> Lister:
        return self.store if self.store is not None else self._client()

    def __iter__(self) -> Iterator[Any]:
        props = f"name,{self.props}" if self.props else "name"
        for item in _source_items(self.source_datapipe):
            for source in resolve_one(item, listing=True):
                if source.kind == "prefix":
                    for found, entry in list_prefix(self._lister(), source.path, props=props,
                                                    page_size=self.page_size):
                        yield (found.uri(), entry) if self.props else found.uri()
                    continue
                client = self._lister() if self.check_templates else None
                for ref in objects(source, client, check=self.check_templates):
                    yield (ref.path.uri(), {}) if self.props else ref.path.uri()


@functional_datapipe("ais_list_sources")
class AISSourceLister(_AISDataPipe):
    """Yields the HTTP GET URL of every object the sources name, with the ETL in the query.

    The URLs work with any HTTP client, with ``webdataset.WebDataset`` and with
    :class:`AISFileLoader`. An ETL that runs as a local process beside the cluster
    (:mod:`aisio.localetl`) gets URLs of its own server (see :func:`aisio.core.store.etl.read_url`).

    Args:
        ais_sources: sources as for :class:`AISFileLister` (alone, a list or an IterDataPipe).
        prefix_map: ``{source: prefix or [prefixes]}`` to list only part of a bucket source.
        etl: an ETL name, :class:`aisio.ETL` (name and args) or the SDK's ``ETLConfig``
            (``etl_name=`` is accepted too, as the removed AIStore DataPipes spelled it).
        url: the AIStore endpoint: ``endpoint=``, as the removed DataPipes spelled it.
        config: an :class:`AISConfig`.
        endpoint: the AIStore endpoint (else ``config``, else ``AIS_ENDPOINT``).
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
        etl_name: str | None = None,
        endpoint: str | None = None,
    ) -> None:
        super().__init__(url, config, length if length >= 0 or prefix_map
                         else _count(ais_sources, listing=True), endpoint)
        self.ais_sources = ais_sources
        self.prefix_map = prefix_map
        self.etl = _etl(etl, etl_name)
        self.page_size = page_size

    def __iter__(self) -> Iterator[str]:
        endpoint = self._client().endpoint
        for item in _source_items(self.ais_sources):
            for source in resolve_one(item, listing=True):
                if source.kind != "prefix":
                    for ref in objects(source):
                        yield read_url(ref.endpoint or endpoint, ref.path, ref.etl or self.etl)
                    continue
                for prefix in prefixes_for(item, self.prefix_map):
                    scoped = AISPath(source.path.bucket, source.path.obj + prefix)
                    for found, _ in list_prefix(self._client(), scoped, page_size=self.page_size):
                        yield read_url(endpoint, found, self.etl)


@functional_datapipe("ais_load_files")
class AISFileLoader(_AISDataPipe):
    """Yields ``(url, stream)`` for each object: a StreamWrapper over the streamed body.

    Sources are object names (``ais://bucket/object``, templates) or the HTTP URLs of
    :class:`AISSourceLister` (their ETL is kept). Bodies are streamed, never read whole, over pooled
    connections; a broken connection resumes at the exact byte. With ``concurrency > 1`` small
    objects are fetched whole by that many threads and still yielded in order.

    Args:
        source_datapipe: object names or URLs, alone, in a list, or from an upstream IterDataPipe.
        url: the AIStore endpoint: ``endpoint=``, as the removed DataPipes spelled it.
        length: the number of objects, if known.
        etl: an ETL to apply to ``ais://`` names (``etl_name=`` is accepted too, as the removed
            AIStore/torchdata DataPipes spelled it).
        config: an :class:`AISConfig`.
        endpoint: the AIStore endpoint (else ``config``, else ``AIS_ENDPOINT``).
        concurrency: parallel GETs for many small objects (1: stream one at a time).
        on_error: ``"raise"`` typed errors; ``"skip"`` or ``"warn"`` to record a missing object
            in ``report`` and go on with the next (cluster errors always raise).
        report: where skipped objects are recorded (default: a new in-memory report).
        cache: a :class:`ShardCache`: objects read to the end are kept on local disk and read
            from there next time (keyed by URL, so by object and ETL).
        batch_get: for many small objects, fetch up to this many consecutive objects of a bucket
            in one Get-Batch request (``/v1/ml/moss``), in order (0: one GET each). Objects with
            an ETL, and groups the cluster refuses, are read one by one.
        store: where the objects are read from (default: the AIStore cluster of the
            endpoint), e.g. a :class:`~aisio.MemoryStore`.

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
        etl_name: str | None = None,
        endpoint: str | None = None,
        store: ObjectStore | None = None,
    ) -> None:
        super().__init__(url, config, length, endpoint)
        self.source_datapipe = source_datapipe
        self.report = report if report is not None else ErrorReport()
        self.fetcher = Fetcher(self.config, _etl(etl, etl_name), concurrency, batch_get, cache,
                               ErrorPolicy(on_error, self.report), store)

    def __iter__(self) -> Iterator[tuple[Any, StreamWrapper]]:
        for key, stream in self.fetcher.streams(_source_items(self.source_datapipe)):
            yield key, StreamWrapper(stream, name=key.uri() if isinstance(key, ShardTask) else key)


def _checked(pairs: Iterable[tuple[Any, Any]], check: Callable[[], None]
             ) -> Iterator[tuple[Any, Any]]:
    """Yields ``pairs``, checking before each that the iterator is still the valid one."""
    for pair in pairs:
        check()
        yield pair


@functional_datapipe("ais_parse_webdataset")
class WebDatasetParser(Unhooked, IterDataPipe):
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
        runs: for the resumable loaders' own pipeline (its deliveries take them): samples of
            a shard task in runs of regular ones come as
            :class:`~aisio.core.format.tar.runs.Columns` of the fields the plan picks.

    Example:
        >>> samples = AISFileLoader(["ais://b/shard-{0..9}.tar"], url=endpoint
        ...                         ).ais_parse_webdataset()                    # doctest: +SKIP
    """

    _is_child_datapipe = False  # see _AISDataPipe

    def __init__(self, source_datapipe: Iterable[tuple[str, Any]], *,
                 on_error: OnError = "raise", report: ErrorReport | None = None,
                 runs: RunPlan | None = None) -> None:
        _fix_dataloader2()
        self.source_datapipe = source_datapipe
        self.report = report if report is not None else ErrorReport()
        self.policy = ErrorPolicy(on_error, self.report)
        self.runs = runs

    def _unhooked_iter(self, check: Callable[[], None]) -> Iterator[dict[str, Any]]:
        return parse_streams(_checked(self.source_datapipe, check), self.policy, runs=self.runs)
