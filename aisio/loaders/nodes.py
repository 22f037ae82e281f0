"""aisio's pipeline as ``torchdata.nodes`` (torchdata >= 0.10).

:class:`ShardSamples` is aisio's listing, loading and parsing as one node: it reads a list of
shard tasks through the core (streamed, resumable reads; tar parsing; the error policy) and
yields samples, shuffled through a buffer if asked. It composes with nodes' ``ParallelMapper``
(decode in threads or processes), ``Batcher``, ``Mapper``, ``Prefetcher`` and ``Loader``;
:func:`webdataset_node_loader` builds that chain and wraps it in the resumable loop.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from functools import partial
from typing import Any

from aisio.core.delivery import Positioned, pack_batch
from aisio.core.epoch import ShardTask, epoch_seed, epoch_tasks, shuffle_buffer
from aisio.core.errors import LoaderUnavailableError
from aisio.core.loop import ResumableLoader
from aisio.core.parse import parse_streams
from aisio.core.spec import PipelineSpec
from aisio.datapipes.pipeline import shard_names
from aisio.loaders.dist import drop_sync, rank_and_world, shared_seed

try:
    import torchdata.nodes as _nodes
    from torchdata.nodes import Batcher, Loader, Mapper, ParallelMapper, Prefetcher
except ImportError:  # torchdata < 0.10: the node loader says so when asked for
    _nodes = None

_Node: Any = _nodes.BaseNode if _nodes is not None else None


class ShardSamples(_Node or object):  # type: ignore[misc]
    """A node yielding the WebDataset samples of shard tasks, read from AIStore.

    Args:
        tasks: the shards to read (e.g. one rank's share of
            :func:`aisio.core.epoch.epoch_tasks`).
        spec: the pipeline's options (endpoint, ETL, shuffle buffer, error policy, ...).
        seed: seeds the sample shuffle buffer.

    Its state is how many samples it yielded; ``reset(state)`` reads the tasks again and skips
    them (nodes' same-topology resume). aisio's loaders resume elastically instead, from what
    the training loop received (:class:`~aisio.core.loop.ResumableLoader`).
    """

    def __init__(self, tasks: Sequence[ShardTask], spec: PipelineSpec, *, seed: int = 0) -> None:
        super().__init__()
        self.tasks = list(tasks)
        self.spec = spec
        self.seed = seed
        self._yielded = 0
        self._items: Iterator[dict[str, Any]] | None = None

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._items = self._samples()
        self._yielded = 0
        for _ in range(int(initial_state["yielded"]) if initial_state else 0):
            self.next()

    def _samples(self) -> Iterator[dict[str, Any]]:
        fetcher = self.spec.fetcher()
        samples = parse_streams(fetcher.streams(self.tasks), fetcher.policy)  # in this process
        if self.spec.shuffle_buffer:
            samples = shuffle_buffer(samples, self.spec.shuffle_buffer, random.Random(self.seed))
        return samples

    def next(self) -> dict[str, Any]:
        assert self._items is not None, "reset() first"
        item = next(self._items)
        self._yielded += 1
        return item

    def get_state(self) -> dict[str, Any]:
        return {"yielded": self._yielded}


def _deliver(collate: Any, batch: Any) -> Any:
    """Packs a batch (or one) of ``(value, position)`` pairs into a delivery."""
    return pack_batch(batch if isinstance(batch, list) else [batch], collate=collate)


def webdataset_node_loader(shards: Any, *, num_workers: int = 0, method: str = "thread",
                           seed: int | None = None, uneven: str = "drop",
                           prefetch_factor: int = 2, **pipe_options: Any) -> ResumableLoader:
    """Returns aisio's pipeline on ``torchdata.nodes``: :class:`ShardSamples` (this rank's
    shards) -> ``ParallelMapper`` (decode) -> ``Batcher`` -> ``Mapper`` (tuples, collate) ->
    ``Prefetcher`` -> ``Loader``, resumable mid-epoch on any number of workers and ranks.

    Args:
        shards: as for :func:`aisio.webdataset_pipe`.
        num_workers: decode in this many threads or processes (``method``); 0: inline.
        method: ``"thread"`` or ``"process"`` (nodes' ``ParallelMapper``).
        seed, uneven: as for :func:`aisio.webdataset_dataloader`.
        prefetch_factor: batches kept ready.
        **pipe_options: as for :func:`aisio.webdataset_pipe`.
    """
    if _Node is None:
        raise LoaderUnavailableError(
            "torchdata.nodes needs torchdata >= 0.10: install 'torchdata>=0.10', or use the same "
            "pipeline on DataLoader2 (aisio.webdataset_loader) or torch's DataLoader "
            "(aisio.webdataset_dataloader)")
    spec = PipelineSpec.build(**pipe_options)
    refs = shard_names(shards, spec.config)
    run_seed = shared_seed(seed)
    rank, world = rank_and_world()
    if spec.batch_size and spec.collate:
        from torch.utils.data import default_collate

        collate: Any = default_collate
    else:
        collate = None

    def open_epoch(epoch: int, resume: dict[str, Any] | None) -> Any:
        tasks = epoch_tasks(refs, run_seed, epoch, shuffle=spec.shuffle_shards,
                            resume=resume)[rank::world]
        node: Any = ShardSamples(tasks, spec, seed=epoch_seed(run_seed, epoch) + rank)
        stage = Positioned(spec.stage())  # decode and tuple, keeping each sample's position
        node = (ParallelMapper(node, stage, num_workers=num_workers, method=method)
                if num_workers else Mapper(node, stage))
        if spec.batch_size:
            node = Batcher(node, spec.batch_size, drop_last=False)
        node = Mapper(node, partial(_deliver, collate if spec.batch_size else None))
        current[:] = [Prefetcher(node, prefetch_factor)]
        return Loader(current[0])

    def close() -> None:
        while current:
            _stop_threads(current.pop())

    current: list[Any] = []
    return ResumableLoader(refs, seed=run_seed, open_epoch=open_epoch, close=close,
                           report=spec.report, timings=spec.times, sync=drop_sync(uneven))


def _stop_threads(root: Any) -> None:
    """Stops the threads of a node graph from this (the training) thread. Left to garbage
    collection, torchdata 0.11's prefetch and map threads may be joined from themselves."""
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        shutdown = getattr(getattr(node, "_it", None), "_shutdown", None)
        if shutdown is not None:
            shutdown()
        stack.extend(getattr(node, attr, None) for attr in ("source", "_it", "root"))
