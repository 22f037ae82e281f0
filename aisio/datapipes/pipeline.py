"""From ``"ais://bucket/shard-{000..099}.tar"`` to samples, tuples or batches, as one DataPipe.

The pipeline is the one the AIStore + WebDataset articles build, in DataPipes::

    shard names -> shuffle shards -> sharding_filter -> AISFileLoader -> WebDatasetParser
      -> shuffle samples (buffer) -> decode -> to_tuple -> batch -> collate

``sharding_filter`` sits at shard level, so each shard is read by exactly one worker of one rank.
It uses only torch's DataPipes, so it runs under DataLoader2 (torchdata <= 0.9, see
:mod:`aisio.datapipes.dataloader2`) and under ``torch.utils.data.DataLoader``, which applies the
sharding filter per worker and per rank itself.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import Any, Literal

from aisio.core.cache import ShardCache
from aisio.core.config import AISConfig, resolve_config
from aisio.core.decode import Decoder, field_names, to_tuple
from aisio.core.decode import tuple_fields as _tuple_fields
from aisio.core.errors import ObjectNotFoundError
from aisio.core.report import ErrorReport
from aisio.core.sources import as_sources, expand, to_paths
from aisio.core.stages import SampleStage, is_kept
from aisio.core.threads import thread_map
from aisio.core.timing import StageTimes
from aisio.core.urls import ETL
from aisio.datapipes.base import IterableWrapper, IterDataPipe
from aisio.datapipes.pipes import AISFileLister, AISFileLoader, OnError, WebDatasetParser

Uneven = Literal["drop", "keep"]


class ToTuple:
    """Returns ``to_tuple(sample, *fields)``: a picklable map function for DataPipes.

    Fields are given as arguments, as one string (``"png;jpg cls"``, as in webdataset) or as
    one list.

    Example:
        >>> ToTuple("png;jpg", "cls")({"png": 1, "cls": 2, "__key__": "k"})
        (1, 2)
        >>> ToTuple("png;jpg cls").fields
        ('png;jpg', 'cls')
    """

    def __init__(self, *fields: str) -> None:
        self.fields = _tuple_fields(fields)

    def __call__(self, sample: dict[str, Any]) -> tuple[Any, ...]:
        return to_tuple(sample, *self.fields)

    def __repr__(self) -> str:
        return f"ToTuple{self.fields!r}"


def shard_names(sources: Any, config: AISConfig | None = None) -> list[str]:
    """Returns the ``ais://`` names of the shards that sources stand for.

    Templates are expanded and SDK objects converted without I/O; a bucket or prefix
    (``ais://b/train/``) is listed once, here, rather than in every worker and every epoch.
    """
    names: list[str] = []
    for source in as_sources(sources):
        for path in to_paths(source):
            if path.is_template or (path.obj and not path.obj.endswith("/") and
                                    not isinstance(source, str)):
                names.extend(each.uri() for each in expand(path))
            elif isinstance(source, str) and path.obj and not path.obj.endswith("/"):
                names.append(path.uri())
            else:
                listed = list(AISFileLister([path.uri()], config=config))
                if not listed:
                    raise ObjectNotFoundError(
                        f"there are no objects under {path.uri()}; upload shards there or "
                        "fix the bucket/prefix", url=path.uri())
                names.extend(listed)
    return names


def _expand_string(source: str) -> list[str]:
    """Returns the names one string stands for: a template's expansion, or the name itself."""
    if source.startswith(("http://", "https://")):
        return [source]
    return [each.uri() for path in to_paths(source) for each in expand(path)]


class ThreadMapper(IterDataPipe):
    """Yields ``fn(item)`` for each item of ``source``, in order, computed by ``threads``
    threads."""

    def __init__(self, source: IterDataPipe, fn: Any, threads: int) -> None:
        self.source = source
        self.fn = fn
        self.threads = threads

    def __iter__(self) -> Iterator[Any]:
        return thread_map(self.fn, self.source, self.threads)


class ResampledShards(IterDataPipe):
    """Yields shard names drawn with replacement, forever: for multi-node epochs of fixed length.

    Seeded by DataLoader2 (a different stream in every worker of every rank).

    Args:
        names: shard names; a single string is one name or template, expanded
            (``"ais://b/s-{00..09}.tar"``), never split into characters.
        seed: the initial seed.

    Example:
        >>> ResampledShards("ais://b/s-{00..09}.tar").names[:2]
        ['ais://b/s-00.tar', 'ais://b/s-01.tar']
    """

    def __init__(self, names: str | Sequence[str], seed: int = 0) -> None:
        if isinstance(names, str):
            names = _expand_string(names)
        elif isinstance(names, (bytes, bytearray)):
            raise TypeError(f"ResampledShards takes shard names as str, got {names!r}")
        if not names:
            raise ValueError("ResampledShards needs at least one shard name")
        self.names = list(names)
        self.seed = seed
        self._rng = random.Random(seed)

    def set_seed(self, seed: int) -> ResampledShards:
        self._rng = random.Random(seed)
        return self

    def __iter__(self) -> Iterator[str]:
        while True:
            yield self._rng.choice(self.names)


def webdataset_pipe(
    shards: Any,
    *,
    url: str | None = None,
    config: AISConfig | None = None,
    etl: ETL | str | None = None,
    shuffle_shards: bool = True,
    shuffle_buffer: int = 0,
    decode: str | Decoder | None = None,
    decode_threads: int = 0,
    tuple_fields: str | Sequence[str] | None = None,
    batch_size: int | None = None,
    collate: bool = True,
    on_error: OnError = "raise",
    report: ErrorReport | None = None,
    resampled: bool = False,
    concurrency: int = 1,
    cache: ShardCache | None = None,
    timings: bool = False,
) -> IterDataPipe:
    """Returns the DataPipe from shard names to samples, tuples or batches (see module doc).

    Args:
        shards: shard names or templates (``"ais://b/train-{0000..0099}.tar"``), a list of them,
            or SDK objects.
        url: AIStore endpoint (else ``config``, else ``AIS_ENDPOINT``).
        config: an :class:`AISConfig`.
        etl: an ETL to apply to every shard on the server.
        shuffle_shards: shuffle the shard order each epoch (before the shard split).
        shuffle_buffer: shuffle samples through a buffer of this many (0: off). Memory grows
            with it: it holds that many undecoded samples.
        decode: an image spec for :class:`Decoder` (``"torchrgb"``, ``"pil"``, ...) or a Decoder.
        decode_threads: decode with this many threads per process, in order (image decoders
            release the GIL, so this helps where cores are idle; on the 2-core benchmark
            machine, shared with the AIStore node, it did not); 0 decodes inline.
        tuple_fields: fields to turn each sample into a tuple, e.g. ``("png;jpg", "cls")`` or
            ``"png;jpg cls"`` (webdataset's spelling).
        batch_size: batch in the worker (before samples cross to the main process).
        collate: collate batches into tensors with torch's default collate.
        on_error: what to do with a bad or missing shard, and with a bad sample (a field that
            does not decode, or lacks a field of ``tuple_fields``): ``raise``, or
            ``warn``/``skip`` to go on with the next shard or sample, recorded in ``report``
            (shard, offset or ``<key>.<field>``, reason).
        report: where skipped shards and samples are recorded; by default a temporary file
            that worker processes share, available as ``pipe.report``.
        resampled: draw shards with replacement forever (cap the epoch with ``.header(n)`` or
            :func:`webdataset_loader`'s ``samples_per_epoch``).
        concurrency: parallel GETs (for many small shards).
        cache: a :class:`ShardCache` keeping read shards on local disk for later epochs.
        timings: measure where the time goes (network reads, tar parsing, decoding) in every
            process, as ``pipe.timings`` (a :class:`~aisio.core.timing.StageTimes`).
    """
    cfg = resolve_config(url, config)
    names = shard_names(shards, cfg)
    if report is None:
        report = ErrorReport.temporary() if on_error != "raise" else ErrorReport()
    pipe: IterDataPipe
    if resampled:
        pipe = ResampledShards(names)
    else:
        pipe = IterableWrapper(names, deepcopy=False)
        if shuffle_shards:
            pipe = pipe.shuffle(buffer_size=len(names))
        pipe = pipe.sharding_filter()
    pipe = AISFileLoader(pipe, config=cfg, etl=etl, concurrency=concurrency, on_error=on_error,
                         report=report, cache=cache)
    pipe = WebDatasetParser(pipe, on_error=on_error, report=report)
    if shuffle_buffer:
        pipe = pipe.shuffle(buffer_size=shuffle_buffer)
    decoder = None
    if decode is not None:
        decoder = decode if isinstance(decode, Decoder) else Decoder(decode)
    fields = None if tuple_fields is None else field_names(tuple_fields, what="tuple_fields")
    times = StageTimes.temporary() if timings else None
    if decoder is not None or fields is not None or times is not None:
        stage = SampleStage(decoder, fields, on_error=on_error, report=report, times=times)
        pipe = ThreadMapper(pipe, stage, decode_threads) if decode_threads else pipe.map(stage)
        if on_error != "raise":
            pipe = pipe.filter(is_kept)
    if batch_size:
        pipe = pipe.batch(batch_size)
        if collate:
            pipe = pipe.collate()
    pipe.report = report  # type: ignore[attr-defined]
    pipe.timings = times  # type: ignore[attr-defined]
    return pipe


