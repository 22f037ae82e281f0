"""From ``"ais://bucket/shard-{000..099}.tar"`` to samples, tuples or batches, as one DataPipe.

:func:`webdataset_pipe` is the pipeline the AIStore + WebDataset articles build, in DataPipes::

    shard names -> shuffle shards -> sharding_filter -> AISFileLoader -> WebDatasetParser
      -> shuffle samples (buffer) -> decode -> to_tuple -> batch -> collate

``sharding_filter`` sits at shard level, so each shard is read by exactly one worker of one rank.
It uses only torch's DataPipes, so it runs under DataLoader2 (torchdata <= 0.9, see
:mod:`aisio.datapipes.dataloader2`) and under ``torch.utils.data.DataLoader``, which applies the
sharding filter per worker and per rank itself. The one-call loader's resumable pipeline
(:func:`epoch_pipe`) is the core's epoch reader (:mod:`aisio.core.pipeline.epoch`) as one
DataPipe, :class:`ReaderPipe`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from aisio.core.decode.decoders import to_tuple
from aisio.core.decode.decoders import tuple_fields as _tuple_fields
from aisio.core.epochs.plan import EpochPlan
from aisio.core.epochs.resample import RESAMPLED
from aisio.core.faults.policy import is_kept
from aisio.core.format.tar.runs import RunPlan
from aisio.core.pipeline.epoch import FastReader
from aisio.core.pipeline.spec import PipelineSpec, check_options, documents_options
from aisio.core.store.sources import ObjectRef, objects, resolve_one
from aisio.core.system.threads import thread_map
from aisio.core.transport.collate import BatchCollate
from aisio.datapipes.base import IterableWrapper, IterDataPipe, Unhooked
from aisio.datapipes.pipes import AISFileLoader, WebDatasetParser
from aisio.runtime.collate import stack_collate
from aisio.runtime.setup import Reader, list_shards


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


@documents_options(extra=[("resampled", RESAMPLED)], signature=True, loader=False)
def webdataset_pipe(shards: Any, *, resampled: bool = False, **options: Any) -> IterDataPipe:
    """Returns the DataPipe from shard names to samples, tuples or batches (see module doc).

    Args:
        shards: shard names or templates (``"ais://b/train-{0000..0099}.tar"``), a list of them,
            a bucket or prefix (``"ais://b/train/"``, listed here, once per process that builds
            the pipe; the loaders list it once per job), or SDK objects.
        resampled: see below.
        **options: the pipeline options below.
    """
    check_options(options, where="webdataset_pipe", known=("resampled",))
    spec = PipelineSpec.build(**options)
    return shards_pipe(list_shards(shards, spec.config, store=spec.store), spec,
                       resampled=resampled)


def shards_pipe(names: Sequence[ObjectRef], spec: PipelineSpec, *, resampled: bool = False,
                batched: bool = True) -> IterDataPipe:
    """Returns :func:`webdataset_pipe`'s pipe over a shard list (batched as ``spec`` says
    unless ``batched=False``), with the spec's ``report`` and ``timings`` on it."""
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
    if batched:
        pipe = batch_pipe(pipe, spec.batch_size, collate=spec.collate, drop_last=spec.drop_last)
    pipe.report = spec.report  # type: ignore[attr-defined]
    pipe.timings = spec.times  # type: ignore[attr-defined]
    return pipe


def batch_pipe(pipe: IterDataPipe, batch_size: int | None, *, collate: bool,
               drop_last: bool = False) -> IterDataPipe:
    """Returns ``pipe`` batched (and collated) as :func:`webdataset_pipe` does."""
    if batch_size:
        pipe = pipe.batch(batch_size, drop_last=drop_last)
        if collate:
            pipe = pipe.collate(collate_fn=BatchCollate(stack_collate))
    return pipe


class SampleQuota(IterDataPipe):
    """Yields the first items of ``source``: this reader's share of ``total`` per epoch.

    Split across the worker processes of a rank (not across ranks: ``total`` is per rank),
    exactly: with ``W`` workers, worker ``w`` yields ``total // W`` items, plus one when
    ``w < total % W``, so a rank yields ``total`` in all.
    """

    def __init__(self, source: IterDataPipe, total: int) -> None:
        if total < 1:
            raise ValueError(f"samples_per_epoch={total} must be at least 1")
        self.source = source
        self.total = total
        self.share = total

    def apply_sharding(self, num_of_instances: int, instance_id: int,
                       sharding_group: Any = None) -> None:
        from torch.utils.data.datapipes.iter.sharding import SHARDING_PRIORITIES

        if sharding_group == SHARDING_PRIORITIES.DISTRIBUTED:
            return  # per rank
        count, extra = divmod(self.total, num_of_instances)
        self.share = count + (instance_id < extra)

    def __iter__(self) -> Iterator[Any]:
        if not self.share:
            return
        for taken, item in enumerate(self.source, 1):
            yield item
            if taken >= self.share:
                return


def samples_pipe(source: IterDataPipe, spec: PipelineSpec, *, shuffle: bool = True,
                 runs: RunPlan | None = None) -> IterDataPipe:
    """Returns ``source`` (shard names or tasks, already split) -> load -> parse -> shuffle
    samples (unless ``shuffle=False``): the middle of every aisio pipeline (decoding and tuples
    follow, per sample; ``runs``: see :class:`~aisio.WebDatasetParser`)."""
    pipe: IterDataPipe = AISFileLoader(source, config=spec.config, etl=spec.etl,
                                       concurrency=spec.concurrency, on_error=spec.on_error,
                                       report=spec.report, cache=spec.cache,
                                       store=spec.store)
    pipe = WebDatasetParser(pipe, on_error=spec.on_error, report=spec.report, runs=runs)
    if spec.shuffle_buffer and shuffle:
        pipe = pipe.shuffle(buffer_size=spec.shuffle_buffer)
    return pipe


class ReaderPipe(Unhooked, IterDataPipe):
    """Yields one reader's items of the published epoch: an adapter over a core reader
    (:meth:`~aisio.runtime.setup.LoaderSetup.reader`: ``order="fast"``'s deliveries, the
    deterministic order's packs). The reader deals the rank's share itself, so of the
    sharding a loader applies only the workers' part counts (torch's DataLoader gives
    ``(N * R, w * R + rank)``, DataLoader2 a multiprocessing group ``(N, w)`` beside a
    distributed one)."""

    def __init__(self, reader: Reader, world: int = 1) -> None:
        self.reader = reader
        self.world = world
        self.worker, self.workers = 0, 1

    def apply_sharding(self, num_of_instances: int, instance_id: int,
                       sharding_group: Any = None) -> None:
        from torch.utils.data.datapipes.iter.sharding import SHARDING_PRIORITIES

        if sharding_group in (None, SHARDING_PRIORITIES.DEFAULT):
            if num_of_instances % self.world:
                raise ValueError(f"{num_of_instances} readers cannot be {self.world} ranks' "
                                 "workers: build the loader after torch.distributed")
            self.worker, self.workers = instance_id // self.world, num_of_instances // self.world
        elif sharding_group == SHARDING_PRIORITIES.MULTIPROCESSING:
            self.worker, self.workers = instance_id, num_of_instances

    def _unhooked_iter(self, check: Callable[[], None]) -> Iterator[Any]:
        # torch's one rule, one valid iterator per DataPipe, checked per item (a delivery or
        # a pack: a batch, not a sample)
        for item in self.reader.read(self.worker, self.workers):
            check()
            yield item


def epoch_pipe(shards: Sequence[ObjectRef], spec: PipelineSpec, *, seed: int,
               plan: EpochPlan | None = None, rank: int = 0, world: int = 1) -> IterDataPipe:
    """Returns the resumable pipeline as one DataPipe: :class:`ReaderPipe` over the core's
    :class:`~aisio.core.pipeline.epoch.FastReader` (this rank's deal of the epoch, load,
    parse, shuffle samples, decode, batch). Its items are deliveries that a loader unpacks in
    the training process (see :mod:`aisio.core.pipeline.loop`); the loader publishes each
    epoch (and the state it resumes) in ``plan`` before its ``iter()``. ``rank`` of ``world``
    (this process's) picks the rank's shards and makes its sample shuffle its own."""
    reader = FastReader(tuple(shards), spec, seed, plan if plan is not None else EpochPlan(),
                        rank, world, stack_collate)
    return ReaderPipe(reader, world)
