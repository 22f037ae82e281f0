"""aisio's pipeline as ``torchdata.nodes`` (torchdata >= 0.10).

:class:`ShardSamples` is aisio's listing, loading and parsing as one node: it reads a list of
shard tasks through the core (streamed, resumable reads; tar parsing; the error policy) and
yields samples, shuffled through a buffer if asked. It composes with nodes' ``Batcher``,
:class:`~aisio.loaders.nodes_pool.PoolMapper` (decode in threads or processes that live
across epochs, a batch at a time), ``Prefetcher`` and ``Loader``; :func:`webdataset_node_loader`
builds that chain and wraps it in the resumable loop.
"""

from __future__ import annotations

import itertools
import random
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from aisio.core.epochs.progress import ShardTask, epoch_seed
from aisio.core.epochs.resample import RESAMPLED, SAMPLES_PER_EPOCH, resampled_tasks
from aisio.core.epochs.split import Deal
from aisio.core.faults.errors import LoaderUnavailableError
from aisio.core.order.loader import OrderSetup
from aisio.core.pipeline.epoch import BatchStage, samples_of
from aisio.core.pipeline.loader_options import NODES
from aisio.core.pipeline.loop import ResumableLoader
from aisio.core.pipeline.spec import PipelineSpec, documents_options
from aisio.core.transport.delivery import Delivery, ship_errors
from aisio.loaders.nodes_pool import PoolMapper
from aisio.runtime.collate import stack_collate
from aisio.runtime.ordered import batch_collate, can_pin
from aisio.runtime.setup import LoaderSetup, loader_setup

try:
    import torchdata.nodes as _nodes
    from torchdata.nodes import Batcher, Loader, Mapper, PinMemory, Prefetcher
except ImportError:  # torchdata < 0.10: the node loader says so when asked for
    _nodes = None

_Node: Any = _nodes.BaseNode if _nodes is not None else None


class ShardSamples(_Node or object):  # type: ignore[misc]
    """A node yielding the WebDataset samples of shard tasks, read from AIStore.

    Args:
        tasks: the shards to read (e.g. one rank's share of
            :class:`aisio.core.epochs.split.Deal`).
        spec: the pipeline's options (endpoint, ETL, shuffle buffer, error policy, ...).
        seed: seeds the sample shuffle buffer.

    Its state is how many samples it yielded; ``reset(state)`` reads the tasks again and skips
    them (nodes' same-topology resume). aisio's loaders resume elastically instead, from what
    the training loop received (:class:`~aisio.core.pipeline.loop.ResumableLoader`).
    """

    def __init__(self, tasks: Sequence[ShardTask], spec: PipelineSpec, *, seed: int = 0) -> None:
        super().__init__()
        #: the shards to read: a list, or an endless draw (``resampled=True``)
        self.tasks: Iterable[ShardTask] = list(tasks)
        self.spec = spec
        self.seed = seed
        #: how many samples to yield at most (None: every sample of the tasks)
        self.limit: int | None = None
        self._yielded = 0
        self._items: Iterator[dict[str, Any]] | None = None

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._items = self._samples()
        self._yielded = 0
        for _ in range(int(initial_state["yielded"]) if initial_state else 0):
            self.next()

    def _samples(self) -> Iterator[Any]:
        # fetch -> parse -> shuffle, the core's (aisio.core.pipeline.epoch), in this process
        samples: Iterable[Any] = samples_of(self.spec, self.tasks, rng=random.Random(self.seed))
        if self.limit is not None:
            samples = itertools.islice(samples, self.limit)
        # An error ends the samples as a Failure item: nodes' threads would rebuild it from
        # its message, without its fields.
        return ship_errors(samples)

    def next(self) -> dict[str, Any]:
        assert self._items is not None, "reset() first"
        item = next(self._items)
        self._yielded += 1
        return item

    def get_state(self) -> dict[str, Any]:
        return {"yielded": self._yielded}


class RoundPacks(_Node or object):  # type: ignore[misc]
    """A node yielding one rank's packs of the deterministic order, chunks per group of
    rounds, undecoded (:meth:`~aisio.core.order.loader.OrderSetup.rounds`): every stream of the
    rank, read in this process; each ``reset()`` reads the epoch last published."""

    def __init__(self, setup: OrderSetup) -> None:
        super().__init__()
        self.setup = setup
        self._items: Iterator[Any] | None = None

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._items = self.setup.rounds(stage=False)

    def next(self) -> Any:
        assert self._items is not None, "reset() first"
        return next(self._items)

    def get_state(self) -> dict[str, Any]:
        return {}  # the order's state is the training loop's (ResumableLoader.state_dict)


class _Pinning:
    """What nodes' mapper applies with ``pin_memory``: the core's stage, its delivery then
    pinned by nodes' ``PinMemory`` (:class:`~aisio.loaders.torch._Pinned`)."""

    def __init__(self, stage: BatchStage) -> None:
        self.stage = stage

    def __call__(self, batch: Any) -> Any:
        from aisio.loaders.torch import _Pinned

        out = self.stage(batch)
        return _Pinned(out) if isinstance(out, Delivery) else out


@documents_options(extra=[("resampled", RESAMPLED), ("samples_per_epoch", SAMPLES_PER_EPOCH)],
                   where=NODES)
def webdataset_node_loader(shards: Any, *, num_workers: int = 0, method: str = "thread",
                           seed: int | None = None, uneven: str = "drop",
                           prefetch_factor: int = 2, order: str = "fast",
                           streams: int | None = None, **pipe_options: Any
                           ) -> ResumableLoader:
    """Returns aisio's pipeline on ``torchdata.nodes``: :class:`ShardSamples` (this rank's
    shards) -> ``Batcher`` -> :class:`~aisio.loaders.nodes_pool.PoolMapper` (decode, tuples
    and collate, a batch at a time) -> ``Prefetcher`` -> ``Loader``, resumable mid-epoch on any
    number of workers and ranks (torchdata >= 0.10). Shards and samples are shuffled by
    default (``shuffle_buffer=1000`` per rank: see below; ``shuffle_buffer=0`` keeps each
    shard's order).

    The graph is built once; each epoch resets it with that epoch's shards, and its mapper's
    threads (or processes) live across epochs until :meth:`~aisio.ResumableLoader.shutdown`.

    Args:
        shards: a template (``"ais://b/train-{0000..0099}.tar"``), an object, a bucket or
            prefix (``"ais://b/train/"``, listed once, by rank 0 for every rank), a list of
            them, or SDK objects.
        num_workers: decode in this many threads or processes (``method``); 0: inline.
        method: ``"thread"`` or ``"process"`` (the mapper's workers).
        seed: makes the shuffles reproducible (each epoch still reshuffles).
        uneven: with torch.distributed, ``"drop"`` (every rank stops when the first runs out,
            so DDP never hangs) or ``"keep"`` (every sample once; ranks may stop apart).
        prefetch_factor: batches kept ready.
        order: ``"fast"`` or ``"deterministic"``, as for :func:`aisio.webdataset_dataloader`
            (``batch_size`` then the global batch; ``drop_last`` and ``decode_threads``
            refused). Here the rank's streams are read by one thread of the training process
            and ``num_workers`` decode them (``method``), in order.
        streams: with ``order="deterministic"``, the canonical streams (see
            :func:`aisio.webdataset_dataloader`).
        **pipe_options: the pipeline options below (with ``drop_last``: the rank's last,
            short batch) and the loader options below (``pin_memory`` through nodes'
            ``PinMemory``; without an accelerator, a warning and nothing pinned, as torch's
            DataLoader does).

    Example:
        >>> loader = webdataset_node_loader("ais://b/train-{000..099}.tar", decode="torchrgb",
        ...     tuple_fields="png cls", batch_size=64, num_workers=2)   # doctest: +SKIP
    """
    if _Node is None:
        raise LoaderUnavailableError(
            "torchdata.nodes needs torchdata >= 0.10: install 'torchdata>=0.10', or use the same "
            "pipeline on DataLoader2 (aisio.webdataset_loader) or torch's DataLoader "
            "(aisio.webdataset_dataloader)")
    setup = loader_setup("webdataset_node_loader", shards, pipe_options, seed=seed,
                         uneven=uneven, order=order, streams=streams)
    node_options = setup.loader_options
    if setup.ordered is not None:
        return _ordered_node_loader(setup, num_workers=num_workers, method=method,
                                    prefetch_factor=prefetch_factor, node_options=node_options)
    spec, refs, rank, world = setup.spec, setup.shards, setup.rank, setup.world
    pin = _pin(node_options)
    samples = ShardSamples([], spec)
    node: Any = Batcher(samples, spec.batch_size, drop_last=False) if spec.batch_size else samples
    # the mapper stages and delivers a batch at a time (the core's BatchStage): one hand-over
    # per batch through its queues and threads (or processes), not per sample
    stage: Any = BatchStage(spec, refs, stack_collate)
    if pin:
        stage = _Pinning(stage)
    node = Prefetcher(_mapper(node, stage, num_workers, method, node_options),
                      prefetch_factor or 2)
    if pin:
        node = PinMemory(node, node_options.get("pin_memory_device") or "")
    loader = Loader(node)

    def open_epoch(epoch: int, resume: dict[str, Any] | None) -> Any:
        # Read in this process: the next reset (the loader's iter()) starts from these.
        samples.seed = epoch_seed(setup.seed, epoch) + rank
        if setup.resampled:  # this rank's own draw, its samples_per_epoch; no positions kept
            samples.tasks = resampled_tasks(refs, setup.seed, epoch, rank=rank)
            samples.limit = setup.samples_per_epoch
            return _values(loader)
        samples.tasks = Deal(refs, setup.seed, epoch, shuffle=spec.shuffle_shards,
                             world=world, resume=resume).tasks(rank)
        return loader

    return setup.loader(open_epoch=open_epoch, close=lambda: _stop_threads(loader))


def _values(loader: Any) -> Iterator[Any]:
    """Yields what ``loader`` delivers without positions (a resampled epoch's: a shard may be
    read twice); failures pass on."""
    for item in loader:
        if isinstance(item, Delivery):
            if not item.empty:
                yield item.unpack()
        else:
            yield item


def _mapper(node: Any, stage: Any, num_workers: int, method: str,
            node_options: dict[str, Any]) -> Any:
    """Returns ``stage`` mapped over ``node``: by a :class:`PoolMapper` of ``num_workers``
    threads or processes (``method``) that live across epochs, or inline without workers."""
    if not num_workers:
        return Mapper(node, stage)
    return PoolMapper(node, stage, num_workers, method=method,
                      in_order=node_options.get("in_order", True),
                      multiprocessing_context=node_options.get("multiprocessing_context"))


def _pin(node_options: dict[str, Any], stacklevel: int = 3) -> bool:
    """Returns whether to pin; asked for without an accelerator, warns as torch's DataLoader
    does and pins nothing."""
    pin = bool(node_options.get("pin_memory"))
    if pin and not can_pin(pin):
        warnings.warn("'pin_memory' argument is set as true but no accelerator is found, then "
                      "device pinned memory won't be used.", UserWarning, stacklevel=stacklevel)
        return False
    return pin


def _ordered_node_loader(setup: LoaderSetup, *, num_workers: int, method: str,
                         prefetch_factor: int, node_options: dict[str, Any]
                         ) -> ResumableLoader:
    """``webdataset_node_loader(order="deterministic")``: :class:`RoundPacks` ->
    :class:`~aisio.loaders.nodes_pool.PoolMapper` (decode, in order) -> ``Prefetcher`` ->
    ``Loader``; batches made (and pinned) in the training loop."""
    plan, order = setup.plan, setup.ordered  # (the packs are read in this process)
    assert order is not None
    pin = _pin(node_options, stacklevel=4)
    loader = Loader(Prefetcher(_mapper(RoundPacks(order), order.stage_pack, num_workers,
                                       method, node_options), prefetch_factor or 2))

    def open_rounds(epoch: int, resume: dict[str, Any] | None) -> Any:
        plan.publish(epoch, resume)  # the next reset (the loader's iter()) reads it
        return loader

    collate = batch_collate(setup.spec, pin=pin,
                            device=node_options.get("pin_memory_device") or None)
    return setup.loader(open_epoch=open_rounds, collate=collate,
                        close=lambda: _stop_threads(loader))


def _stop_threads(root: Any) -> None:
    """Stops the threads of a node graph from this (the training) thread. Left to garbage
    collection, torchdata 0.11's prefetch and map threads may be joined from themselves."""
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, PoolMapper):
            node.shutdown()
        shutdown = getattr(getattr(node, "_it", None), "_shutdown", None)
        if shutdown is not None:
            shutdown()
        stack.extend(getattr(node, attr, None) for attr in ("source", "_it", "root"))
