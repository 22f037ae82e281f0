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

import itertools
import random
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from aisio.core.epochs.plan import EpochPlan
from aisio.core.epochs.progress import ShardTask, epoch_seed, shuffle_buffer
from aisio.core.epochs.resample import (
    RESAMPLED,
    reader_share,
    resampled_tasks,
)
from aisio.core.epochs.split import Deal
from aisio.core.faults.policy import SKIPPED, is_kept
from aisio.core.format.collate import BatchCollate, sample_name
from aisio.core.format.decode import to_tuple
from aisio.core.format.decode import tuple_fields as _tuple_fields
from aisio.core.format.tar.runs import Columns, RunPlan
from aisio.core.pipeline.spec import PipelineSpec, check_options, documents_options
from aisio.core.store.sources import ObjectRef, objects, resolve_one
from aisio.core.system.threads import thread_map
from aisio.core.transport.delivery import (
    Delivery,
    Placed,
    Positioned,
    deliveries,
    ship_errors,
)
from aisio.datapipes.base import IterableWrapper, IterDataPipe, Unhooked
from aisio.datapipes.pipes import AISFileLoader, WebDatasetParser
from aisio.runtime.collate import stack_collate
from aisio.runtime.setup import list_shards
from aisio.runtime.workers import worker_id


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
    return shards_pipe(list_shards(shards, spec.config), spec, resampled=resampled)


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
                                       report=spec.report, cache=spec.cache)
    pipe = WebDatasetParser(pipe, on_error=spec.on_error, report=spec.report, runs=runs)
    if spec.shuffle_buffer and shuffle:
        pipe = pipe.shuffle(buffer_size=spec.shuffle_buffer)
    return pipe


class ShardTasks(IterDataPipe):
    """Yields this rank's :class:`~aisio.core.epochs.progress.ShardTask` s of an epoch (its deal
    of :class:`~aisio.core.epochs.split.Deal`, the same in every process of the rank),
    which :class:`WorkerShare` hands to its workers in turn: every shard in the order of
    ``(seed, epoch)``, or, when the epoch resumes a saved state, what that state left, each
    shard in progress back to the rank that had it.

    The epoch and the state come from ``plan``, read when the epoch starts (in the worker
    process that reads it, which lives across epochs); the loader publishes them before each
    ``iter()``.
    """

    def __init__(self, shards: Sequence[ObjectRef], *, seed: int, shuffle: bool,
                 plan: EpochPlan | None = None, rank: int = 0, world: int = 1) -> None:
        self.shards = list(shards)
        self.seed = seed
        self.shuffled = shuffle
        self.plan = plan if plan is not None else EpochPlan()
        self.rank, self.world = rank, world

    def __iter__(self) -> Iterator[ShardTask]:
        epoch, resume = self.plan.read()
        yield from Deal(self.shards, self.seed, epoch, shuffle=self.shuffled,
                        world=self.world, resume=resume).tasks(self.rank)

    def __len__(self) -> int:
        return len(self.shards)


class WorkerShare(IterDataPipe):
    """Yields every ``N``-th of a rank's tasks, for worker ``w`` of its ``N``: the rank's share
    is dealt by :class:`ShardTasks`, so of the sharding a loader applies only the workers'
    part counts (torch's DataLoader gives ``(N * R, w * R + rank)``, DataLoader2 a
    multiprocessing group ``(N, w)`` beside a distributed one)."""

    def __init__(self, source: IterDataPipe, world: int) -> None:
        self.source = source
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

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(self.source, self.worker, None, self.workers)


class EpochShuffle(Unhooked, IterDataPipe):
    """Yields ``source`` shuffled through a buffer of ``size`` samples, seeded from ``(seed,
    epoch, rank, worker)``: every epoch reshuffled, every reader its own shuffle, the same in a
    rerun with the same seed, whichever loader runs it and however long its workers live."""

    def __init__(self, source: IterDataPipe, size: int, *, plan: EpochPlan, seed: int,
                 rank: int) -> None:
        self.source = source
        self.size = size
        self.plan = plan
        self.seed = seed
        self.rank = rank

    def _unhooked_iter(self, check: Callable[[], None]) -> Iterator[Any]:
        # Per item, no torch hook: its source (the parser) checks that its iterator is the
        # valid one once per shard, and a new iter() of this pipe makes a new one of it.
        epoch, _ = self.plan.read()
        rng = random.Random(f"{epoch_seed(self.seed, epoch)}:{self.rank}:{worker_id()}")
        return shuffle_buffer(self.source, self.size, rng)


def drop_last(triples: Iterable[Placed], batch_size: int) -> Iterator[Placed]:
    """Passes ``(value, position, version)`` triples on, except that the samples of this
    reader's last, incomplete batch (fewer than ``batch_size`` kept samples) become skipped
    ones: their positions still travel to the training loop, so the epoch's record stays
    complete."""
    held: list[Placed] = []
    kept = 0
    for item in triples:
        held.append(item)
        if item[0] is not SKIPPED:
            kept += 1
            if kept == batch_size:
                yield from held
                held, kept = [], 0
    yield from ((SKIPPED, position, version) for _, position, version in held)


class DeliveryPipe(IterDataPipe):
    """Yields :class:`~aisio.core.transport.delivery.Delivery` items: ``(value, position,
    version)`` batched
    and collated as the spec says, each delivery with the positions of its samples. A batch
    that cannot be collated because its images differ in size raises
    :class:`~aisio.core.format.collate.MixedShapesError` naming the shards and samples."""

    def __init__(self, source: IterDataPipe, spec: PipelineSpec,
                 shards: Sequence[ObjectRef] = (), *, stage: Positioned | None = None) -> None:
        self.source = source
        self.spec = spec
        self.shards = shards
        self.stage = stage

    def __iter__(self) -> Iterator[Delivery]:
        spec = self.spec
        # The per-sample stage runs here, through the builtin map, not as a DataPipe of its
        # own: a DataPipe's per-item hooks cost more than a 2 KiB sample's parse.
        # Columns (runs of regular samples, already staged) pass the stage by.
        triples: Iterable[Placed] = (self.source if self.stage is None
                                     else map(self.stage, self.source))
        if spec.drop_last and spec.batch_size:
            triples = drop_last(triples, spec.batch_size)
        if not (spec.batch_size and spec.collate):
            return ship_errors(deliveries(triples, batch_size=spec.batch_size), warnings=True)
        kept: deque[tuple[int, int, int, bool]] = deque(maxlen=spec.batch_size)

        def watched() -> Iterator[Any]:
            for item in triples:
                if type(item) is Columns:
                    kept.extend(item.positions)
                elif is_kept(item[0]):
                    kept.append(item[1])  # deliveries() collates the last len(batch) of these
                yield item

        def names(n: int) -> list[str]:
            return [sample_name(self.shards, p) for p in list(kept)[-n:]]

        return ship_errors(deliveries(watched(), batch_size=spec.batch_size,
                                      collate=BatchCollate(stack_collate, names)),
                           warnings=True)


class ResampledBatches(IterDataPipe):
    """Yields one reader's batches of a resampled epoch (``resampled=True``) on any loader:
    shards drawn with replacement from ``(seed, epoch, rank, worker)``
    (:func:`~aisio.core.epochs.resample.resampled_tasks`), the epoch read from ``plan``; read,
    parsed, shuffled through the spec's buffer, decoded and batched; the rank's
    ``samples_per_epoch`` split across its workers (None: forever). Items are batches, not
    deliveries: nothing says which samples the loop received (the loader cannot checkpoint
    mid-epoch). An aisio error ends them as a :class:`~aisio.core.transport.delivery.Failure`.
    """

    def __init__(self, shards: Sequence[ObjectRef], spec: PipelineSpec, *, seed: int,
                 plan: EpochPlan, rank: int, samples_per_epoch: int | None) -> None:
        self.shards = list(shards)
        self.spec = spec
        self.seed = seed
        self.plan = plan
        self.rank = rank
        self.samples_per_epoch = samples_per_epoch

    def __iter__(self) -> Iterator[Any]:
        from torch.utils.data import get_worker_info

        epoch, _ = self.plan.read()
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        share = reader_share(self.samples_per_epoch, worker, workers)
        if share == 0:
            return iter(())
        tasks = IterableWrapper(resampled_tasks(self.shards, self.seed, epoch, rank=self.rank,
                                                worker=worker), deepcopy=False)
        samples: IterDataPipe = samples_pipe(tasks, self.spec, shuffle=False)
        if self.spec.shuffle_buffer:
            samples = EpochShuffle(samples, self.spec.shuffle_buffer, plan=self.plan,
                                   seed=self.seed, rank=self.rank)
        return ship_errors(self._batches(samples, share))

    def _batches(self, samples: Iterable[Any], share: int | None) -> Iterator[Any]:
        spec = self.spec
        stage = Positioned(spec.stage())
        values: Iterator[Any] = (value for value, _, _ in map(stage, samples)
                                 if is_kept(value))
        if share is not None:
            values = itertools.islice(values, share)
        if not spec.batch_size:
            yield from values
            return
        collate = BatchCollate(stack_collate) if spec.collate else None
        batch: list[Any] = []
        for value in values:
            batch.append(value)
            if len(batch) == spec.batch_size:
                yield collate(batch) if collate is not None else batch
                batch = []
        if batch and not spec.drop_last:
            yield collate(batch) if collate is not None else batch


def epoch_pipe(shards: Sequence[ObjectRef], spec: PipelineSpec, *, seed: int,
               plan: EpochPlan | None = None, rank: int = 0, world: int = 1) -> IterDataPipe:
    """Returns the resumable pipeline: :class:`ShardTasks` -> :class:`WorkerShare` -> load -> parse
    -> shuffle samples (:class:`EpochShuffle`) -> decode -> :class:`DeliveryPipe`. Its items are
    deliveries that a loader unpacks in the training process (see :mod:`aisio.core.pipeline.loop`);
    the
    loader publishes each epoch (and the state it resumes) in ``plan`` before its ``iter()``.
    ``rank`` of ``world`` (this process's) picks the rank's shards and makes its sample
    shuffle its own."""
    plan = plan if plan is not None else EpochPlan()
    tasks = ShardTasks(shards, seed=seed, shuffle=spec.shuffle_shards, plan=plan, rank=rank,
                       world=world)
    stage = Positioned(spec.stage())
    samples = samples_pipe(WorkerShare(tasks, world), spec, shuffle=False, runs=spec.runs())
    if spec.shuffle_buffer:
        samples = EpochShuffle(samples, spec.shuffle_buffer, plan=plan, seed=seed, rank=rank)
    if spec.decode_threads:
        return DeliveryPipe(ThreadMapper(samples, stage, spec.decode_threads), spec, tasks.shards)
    return DeliveryPipe(samples, spec, tasks.shards, stage=stage)
