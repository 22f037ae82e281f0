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

from torch.utils.data import default_collate

from aisio.core.cache import ShardCache
from aisio.core.client import client_for
from aisio.core.config import AISConfig, resolve_config
from aisio.core.decode import Decoder, to_tuple
from aisio.core.decode import tuple_fields as _tuple_fields
from aisio.core.delivery import Delivery, Positioned, pack, ship_errors
from aisio.core.epoch import ShardTask, epoch_tasks
from aisio.core.report import ErrorReport
from aisio.core.sources import ObjectRef, objects, resolve, resolve_one, shard_list
from aisio.core.spec import PipelineSpec
from aisio.core.stages import is_kept
from aisio.core.threads import thread_map
from aisio.core.urls import ETL
from aisio.datapipes.base import IterableWrapper, IterDataPipe
from aisio.datapipes.pipes import AISFileLoader, OnError, WebDatasetParser

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


def shard_names(sources: Any, config: AISConfig | None = None) -> list[ObjectRef]:
    """Returns the shards that sources stand for, parsed once (see :mod:`aisio.core.sources`).

    Templates are expanded and SDK objects converted without I/O; a bucket or prefix
    (``ais://b/train/``) is listed once, here, rather than in every worker and every epoch.
    """
    resolved = resolve(sources)
    needs_listing = any(source.kind == "prefix" for source in resolved)
    return shard_list(resolved, client_for(resolve_config(None, config)) if needs_listing
                      else None)


def _expand_string(source: str) -> list[str]:
    """Returns the names one string stands for: a template's expansion, or the name itself."""
    if source.startswith(("http://", "https://")):
        return [source]
    return [ref.uri() for each in resolve_one(source) for ref in objects(each)]


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

    def __init__(self, names: str | Sequence[Any], seed: int = 0) -> None:
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
    endpoint: str | None = None,
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
        endpoint: AIStore endpoint (else ``config``, else ``AIS_ENDPOINT``); ``url=`` is
            accepted too, as the removed AIStore/torchdata DataPipes spelled it.
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
    spec = PipelineSpec.build(
        endpoint=endpoint, url=url, config=config, etl=etl, shuffle_shards=shuffle_shards,
        shuffle_buffer=shuffle_buffer, decode=decode, decode_threads=decode_threads,
        tuple_fields=tuple_fields, batch_size=batch_size, collate=collate, on_error=on_error,
        report=report, concurrency=concurrency, cache=cache, timings=timings)
    names = shard_names(shards, spec.config)
    pipe: IterDataPipe
    if resampled:
        pipe = ResampledShards(names)
    else:
        pipe = IterableWrapper(names, deepcopy=False)
        if spec.shuffle_shards:
            pipe = pipe.shuffle(buffer_size=len(names))
        pipe = pipe.sharding_filter()
    pipe = samples_pipe(pipe, spec)
    stage = spec.stage()
    if stage is not None:
        pipe = ThreadMapper(pipe, stage, spec.decode_threads) if spec.decode_threads else (
            pipe.map(stage))
        if spec.on_error != "raise":
            pipe = pipe.filter(is_kept)
    if spec.batch_size:
        pipe = pipe.batch(spec.batch_size)
        if spec.collate:
            pipe = pipe.collate()
    pipe.report = spec.report  # type: ignore[attr-defined]
    pipe.timings = spec.times  # type: ignore[attr-defined]
    return pipe


def samples_pipe(source: IterDataPipe, spec: PipelineSpec) -> IterDataPipe:
    """Returns ``source`` (shard names or tasks, already split) -> load -> parse -> shuffle
    samples: the middle of every aisio pipeline (decoding and tuples follow, per sample)."""
    pipe: IterDataPipe = AISFileLoader(source, config=spec.config, etl=spec.etl,
                                       concurrency=spec.concurrency, on_error=spec.on_error,
                                       report=spec.report, cache=spec.cache)
    pipe = WebDatasetParser(pipe, on_error=spec.on_error, report=spec.report)
    if spec.shuffle_buffer:
        pipe = pipe.shuffle(buffer_size=spec.shuffle_buffer)
    return pipe


class ShardTasks(IterDataPipe):
    """Yields an epoch's :class:`~aisio.core.epoch.ShardTask` s, the same list in every process
    (so that ``sharding_filter`` hands each to exactly one reader): every shard in the order of
    ``(seed, epoch)``, or, when ``resume`` is a saved state of this epoch, what it left.

    The loader sets :attr:`epoch` and :attr:`resume` before each epoch.
    """

    def __init__(self, shards: Sequence[ObjectRef], *, seed: int, shuffle: bool) -> None:
        self.shards = list(shards)
        self.seed = seed
        self.shuffled = shuffle
        self.epoch = 0
        self.resume: dict[str, Any] | None = None

    def __iter__(self) -> Iterator[ShardTask]:
        yield from epoch_tasks(self.shards, self.seed, self.epoch, shuffle=self.shuffled,
                               resume=self.resume)

    def __len__(self) -> int:
        return len(self.shards)


class Pack(IterDataPipe):
    """Yields :class:`~aisio.core.delivery.Delivery` items: ``(value, position)`` pairs batched
    and collated as the spec says, each delivery with the positions of its samples."""

    def __init__(self, source: IterDataPipe, spec: PipelineSpec) -> None:
        self.source = source
        self.spec = spec

    def __iter__(self) -> Iterator[Delivery]:
        spec = self.spec
        return ship_errors(pack(
            self.source, batch_size=spec.batch_size,
            collate=default_collate if spec.batch_size and spec.collate else None))


def epoch_pipe(shards: Sequence[ObjectRef], spec: PipelineSpec, *, seed: int
               ) -> tuple[IterDataPipe, ShardTasks]:
    """Returns the resumable pipeline and its source: :class:`ShardTasks` -> sharding_filter
    -> load -> parse -> shuffle samples -> decode -> :class:`Pack`. Its items are deliveries
    that a loader unpacks in the training process (see :mod:`aisio.core.loop`); the loader
    sets the source's epoch and resume state before each epoch."""
    tasks = ShardTasks(shards, seed=seed, shuffle=spec.shuffle_shards)
    stage = Positioned(spec.stage())
    samples = samples_pipe(tasks.sharding_filter(), spec)
    samples = ThreadMapper(samples, stage, spec.decode_threads) if spec.decode_threads else (
        samples.map(stage))
    return Pack(samples, spec), tasks
