"""One reader's epoch, framework-free: shard tasks in, deliveries out.

:func:`read_epoch` chains small generators, each of which runs on a plain list in a test::

    fetch (task -> stream) -> parse (-> samples; runs of regular ones as Columns)
      -> shuffle (a buffer) -> stage (decode, tuple, map: (value, position, version))
      -> drop_last -> deliver (batches collated, as Delivery items; an error as a Failure)

A *reader* is what one worker of a loader (or its training process) runs each epoch, for the
epoch the training process published on its :class:`~aisio.core.epochs.plan.EpochPlan`:
:class:`FastReader` (``order="fast"``: the rank's deal of the epoch, every ``N``-th task for
worker ``w`` of ``N``), :class:`ResampledReader` (``resampled=True``), and the deterministic
order's :class:`~aisio.core.order.loader.OrderSetup`. Each has ``read(worker, workers)`` and
pickles (a loader sends it to its worker processes once). The front ends are adapters: they
run a reader in their workers and hand what it yields to
:class:`~aisio.core.pipeline.loop.ResumableLoader`.
"""

from __future__ import annotations

import itertools
import random
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from aisio.core.epochs.plan import EpochPlan
from aisio.core.epochs.progress import ShardTask, epoch_seed
from aisio.core.epochs.resample import reader_share, resampled_tasks
from aisio.core.epochs.split import Deal
from aisio.core.faults.errors import AISIOError
from aisio.core.faults.policy import SKIPPED, is_kept
from aisio.core.format.tar.runs import Columns, RunPlan
from aisio.core.pipeline.parse import parse_streams
from aisio.core.pipeline.shuffle import shuffle_buffer
from aisio.core.pipeline.spec import PipelineSpec
from aisio.core.pipeline.stages import Positioned
from aisio.core.store.sources import ObjectRef
from aisio.core.system.threads import thread_map
from aisio.core.transport.collate import BatchCollate, sample_name
from aisio.core.transport.delivery import (
    Failure,
    Placed,
    batch_delivery,
    deliveries,
    ship_errors,
)

Collate = Callable[[list[Any]], Any]


def shuffle(items: Iterable[Any], size: int, rng: random.Random | None) -> Iterable[Any]:
    """Returns ``items`` shuffled through a buffer of ``size`` (``0`` or no ``rng``: as
    they come)."""
    return shuffle_buffer(items, size, rng) if size and rng is not None else items


def samples_of(spec: PipelineSpec, tasks: Iterable[Any], *,
               rng: random.Random | None = None, runs: RunPlan | None = None) -> Iterable[Any]:
    """Yields the samples of ``tasks``: fetched (the spec's fetcher: a missing shard raised or
    skipped by its ``on_error``), parsed (:func:`parse_streams`, a bad shard likewise; with
    ``runs``, runs of regular samples as :class:`~aisio.core.format.tar.runs.Columns`) and
    shuffled through the spec's buffer with ``rng`` (None: in shard order)."""
    fetcher = spec.fetcher()
    parsed = parse_streams(fetcher.streams(tasks), fetcher.policy, runs=runs)
    return shuffle(parsed, spec.shuffle_buffer, rng)


def stage(spec: PipelineSpec, samples: Iterable[Any]) -> Iterator[Any]:
    """Yields ``(value, position, version)`` for each sample: the spec's per-sample stage
    (decode, tuple, ``map``) applied, in ``decode_threads`` threads if asked; Columns (runs
    already staged) pass as they are."""
    positioned = Positioned(spec.stage())
    if spec.decode_threads:
        return thread_map(positioned, samples, spec.decode_threads)
    return map(positioned, samples)


def dropped(triples: Iterable[Placed]) -> list[Placed]:
    """The samples of a batch that ``drop_last=True`` drops, as skipped ones: their
    positions still travel to the training loop, so the epoch's record stays complete (the
    one rule of :func:`drop_last` and :class:`BatchStage`)."""
    return [(SKIPPED, position, version) for _, position, version in triples]


def drop_last(triples: Iterable[Placed], batch_size: int) -> Iterator[Placed]:
    """Passes ``(value, position, version)`` triples on, except that the samples of this
    reader's last, incomplete batch (fewer than ``batch_size`` kept samples) are
    :func:`dropped`."""
    held: list[Placed] = []
    kept = 0
    for item in triples:
        held.append(item)
        if item[0] is not SKIPPED:
            kept += 1
            if kept == batch_size:
                yield from held
                held, kept = [], 0
    yield from dropped(held)


def deliver(spec: PipelineSpec, triples: Iterable[Any], *, shards: Sequence[ObjectRef] = (),
            collate: Collate | None = None) -> Iterator[Any]:
    """Yields :class:`~aisio.core.transport.delivery.Delivery` items: the triples batched and,
    with ``collate`` (when the spec collates), collated, each with its samples' positions; an
    aisio error ends them as a last :class:`~aisio.core.transport.delivery.Failure`. A batch
    whose images differ in size raises
    :class:`~aisio.core.transport.collate.MixedShapesError` naming its shards and samples."""
    batch_size = spec.batch_size
    if not (batch_size and spec.collate and collate is not None):
        return ship_errors(deliveries(triples, batch_size=batch_size), warnings=True)
    kept: deque[tuple[int, int, int, bool]] = deque(maxlen=batch_size)

    def watched() -> Iterator[Any]:
        for item in triples:
            if type(item) is Columns:
                kept.extend(item.positions)
            elif is_kept(item[0]):
                kept.append(item[1])  # deliveries() collates the last len(batch) of these
            yield item

    def names(n: int) -> list[str]:
        return [sample_name(shards, p) for p in list(kept)[-n:]]

    return ship_errors(deliveries(watched(), batch_size=batch_size,
                                  collate=BatchCollate(collate, names)), warnings=True)


class BatchStage:
    """Stages a batch that a framework made of a reader's samples (torchdata.nodes'
    ``Batcher``: a list, or one sample without ``batch_size``) and packs it as one
    :class:`~aisio.core.transport.delivery.Delivery`: :func:`stage` on each sample, the
    spec's ``drop_last`` (a batch shorter than ``batch_size`` delivers only its positions),
    collated with ``collate`` when the spec collates. A
    :class:`~aisio.core.transport.delivery.Failure` in the batch, or an aisio error the stage
    raises, is what it returns instead (the samples before it were not delivered, so a resume
    reads them again). Picklable when ``collate`` is.

    Args:
        spec: the pipeline's options.
        shards: the loader's shard list (names the samples of a batch that fails to collate).
        collate: makes a batch of a list of values.
    """

    def __init__(self, spec: PipelineSpec, shards: Sequence[ObjectRef] = (),
                 collate: Collate | None = None) -> None:
        self.stage = Positioned(spec.stage())
        self.shards = shards
        self.collate = collate if spec.batch_size and spec.collate else None
        self.short = (spec.batch_size or 0) if spec.drop_last else 0

    def __call__(self, batch: Any) -> Any:
        items = batch if isinstance(batch, list) else [batch]
        placed = []
        try:
            for item in items:
                if type(item) is Failure:
                    return item
                placed.append(self.stage(item))
        except AISIOError as exc:
            return Failure.of(exc)
        if self.short and len(placed) < self.short:  # the framework's last batch (only it
            placed = dropped(placed)                 # is cut short by the batcher)
        collate: Any = None
        if self.collate is not None:
            names = [sample_name(self.shards, item[1]) for item in placed if is_kept(item[0])]
            collate = BatchCollate(self.collate, lambda n: names[-n:])
        delivery = batch_delivery(placed, collate=collate)
        if not isinstance(batch, list) and not delivery.empty:
            delivery.value = delivery.value[0]  # no batch_size: the item itself, as elsewhere
        return delivery


def read_epoch(spec: PipelineSpec, tasks: Iterable[ShardTask], *,
               shards: Sequence[ObjectRef] = (), rng: random.Random | None = None,
               collate: Collate | None = None) -> Iterator[Any]:
    """Yields one reader's deliveries of ``tasks`` (see the module doc): fetched, parsed
    (runs of regular samples kept whole where the spec allows, :meth:`PipelineSpec.runs`),
    shuffled with ``rng``, staged, batched and collated with ``collate``.

    Args:
        spec: the pipeline's options.
        tasks: the shard tasks this reader reads, in order.
        shards: the loader's shard list (names the samples of a batch that fails to collate).
        rng: the sample shuffle's generator (None: no shuffle).
        collate: makes a batch of a list of values (torch's ``default_collate``, say).
    """
    triples: Iterable[Any] = stage(spec, samples_of(spec, tasks, rng=rng, runs=spec.runs()))
    if spec.drop_last and spec.batch_size:
        triples = drop_last(triples, spec.batch_size)
    return deliver(spec, triples, shards=shards, collate=collate)


def reader_rng(seed: int, epoch: int, rank: int, worker: int) -> random.Random:
    """Returns the sample shuffle's generator of one reader: every epoch reshuffled, every
    reader its own shuffle, the same in a rerun with the same seed, whichever loader runs it."""
    return random.Random(f"{epoch_seed(seed, epoch)}:{rank}:{worker}")


@dataclass(frozen=True, eq=False)
class FastReader:
    """What each reader of ``order="fast"`` runs: its share of the rank's deal of the
    published epoch (every ``workers``-th task from ``worker``: whole shards, or what a
    resumed state left of them), read by :func:`read_epoch`.

    Args:
        shards: the loader's shard list.
        spec: the pipeline's options.
        seed: the run's seed (the same on every rank).
        plan: where the training process publishes each epoch (and the state it resumes).
        rank: this rank.
        world: the number of ranks.
        collate: makes a batch (when the spec collates).
    """

    shards: Sequence[ObjectRef]
    spec: PipelineSpec
    seed: int
    plan: EpochPlan
    rank: int = 0
    world: int = 1
    collate: Collate | None = None

    def tasks(self, epoch: int, resume: dict[str, Any] | None, worker: int = 0,
              workers: int = 1) -> Iterator[ShardTask]:
        """Yields reader ``worker`` of ``workers``' tasks of epoch ``epoch`` (continuing
        ``resume``, a state of it, if given)."""
        deal = Deal(self.shards, self.seed, epoch, shuffle=self.spec.shuffle_shards,
                    world=self.world, resume=resume)
        return itertools.islice(deal.tasks(self.rank), worker, None, workers)

    def read(self, worker: int = 0, workers: int = 1) -> Iterator[Any]:
        """Yields reader ``worker`` of ``workers``' deliveries of the published epoch."""
        epoch, resume = self.plan.read()
        rng = reader_rng(self.seed, epoch, self.rank, worker) if self.spec.shuffle_buffer else None
        return read_epoch(self.spec, self.tasks(epoch, resume, worker, workers),
                          shards=self.shards, rng=rng, collate=self.collate)


@dataclass(frozen=True, eq=False)
class ResampledReader:
    """What each reader of a resampled epoch (``resampled=True``) runs: shards drawn with
    replacement from ``(seed, epoch, rank, worker)``
    (:func:`~aisio.core.epochs.resample.resampled_tasks`); read, parsed, shuffled, staged and
    batched; the rank's ``samples_per_epoch`` split across its readers (None: forever). Items
    are batches, not deliveries: nothing says which samples the loop received (the loader
    cannot checkpoint mid-epoch). An aisio error ends them as a
    :class:`~aisio.core.transport.delivery.Failure`.
    """

    shards: Sequence[ObjectRef]
    spec: PipelineSpec
    seed: int
    plan: EpochPlan
    rank: int = 0
    samples_per_epoch: int | None = None
    collate: Collate | None = None

    def read(self, worker: int = 0, workers: int = 1) -> Iterator[Any]:
        """Yields reader ``worker`` of ``workers``' batches of the published epoch."""
        epoch, _ = self.plan.read()
        share = reader_share(self.samples_per_epoch, worker, workers)
        if share == 0:
            return iter(())
        tasks = resampled_tasks(self.shards, self.seed, epoch, rank=self.rank, worker=worker)
        spec = self.spec
        rng = reader_rng(self.seed, epoch, self.rank, worker) if spec.shuffle_buffer else None
        staged = map(Positioned(spec.stage()), samples_of(spec, tasks, rng=rng))
        values: Iterator[Any] = (value for value, _, _ in staged if is_kept(value))
        if share is not None:
            values = itertools.islice(values, share)
        return ship_errors(self._batches(values))

    def _batches(self, values: Iterator[Any]) -> Iterator[Any]:
        spec = self.spec
        if not spec.batch_size:
            yield from values
            return
        collate = (BatchCollate(self.collate) if spec.collate and self.collate is not None
                   else None)
        batch: list[Any] = []
        for value in values:
            batch.append(value)
            if len(batch) == spec.batch_size:
                yield collate(batch) if collate is not None else batch
                batch = []
        if batch and not spec.drop_last:
            yield collate(batch) if collate is not None else batch


__all__ = ["BatchStage", "Collate", "FastReader", "ResampledReader", "deliver", "drop_last",
           "dropped", "read_epoch", "reader_rng", "samples_of", "shuffle", "stage"]
