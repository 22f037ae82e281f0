"""A first front end of the deterministic order on ``torch.utils.data.DataLoader`` (staging).

Not yet reachable as ``webdataset_dataloader(..., order="deterministic")``: the one-call
loaders' worker plumbing is being reworked, so this lives apart until it can join them. Each
DataLoader worker reads its streams (:func:`~aisio.core.order_reader.reader_rounds`: one item
per round); torch's DataLoader hands out its workers' items in turn; the training process puts
each round back in stream order (:class:`~aisio.core.order_loop.Reorderer`), records it, and
collates the rank's batch. The sequence of batches is a function of the seed, the epoch, the
shard list, ``streams``, ``batch_size`` and ``shuffle_buffer``: the same with any
``num_workers`` and after a resume on any other.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch.utils.data
from torch.utils.data import DataLoader, IterableDataset, default_collate

from aisio.core.order import OrderPlan, check_order_state, merge_order_states
from aisio.core.order_loop import Reorderer
from aisio.core.order_reader import reader_rounds
from aisio.core.spec import PipelineSpec
from aisio.core.stages import SKIPPED
from aisio.datapipes.pipeline import shard_names
from aisio.runtime.dist import rank_and_world, shared_seed


def _as_is(item: Any) -> Any:
    return item


class _Streams(IterableDataset):
    """One rank's streams, split across the DataLoader's workers; yields lists of chunks."""

    def __init__(self, plan: OrderPlan, spec: PipelineSpec, rank: int, world: int,
                 state: dict[str, Any] | None) -> None:
        self.plan, self.spec, self.rank, self.world, self.state = plan, spec, rank, world, state

    def __iter__(self) -> Iterator[Any]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        streams = self.plan.reader_streams(self.rank, self.world, worker, workers)
        fetcher = self.spec.fetcher()
        return reader_rounds(self.plan, streams, fetcher.open, state=self.state,
                             policy=fetcher.policy, stage=self.spec.stage())


class OrderedLoader:
    """Batches in the deterministic order, on torch's DataLoader (see the module doc).

    Args:
        shards: as for :func:`aisio.webdataset_pipe`.
        streams: ``K``, the canonical streams; it must divide ``batch_size``, and the number
            of ranks must divide it.
        batch_size: the global batch size (each rank yields its ``batch_size / ranks`` part).
        shuffle_buffer: each stream's buffer.
        num_workers: DataLoader worker processes (0: read in the training process).
        seed: the run's seed (shared by the ranks).
        **pipe_options: as for :func:`aisio.webdataset_pipe` (endpoint, decode, tuple_fields,
            collate, on_error, ...).
    """

    def __init__(self, shards: Any, *, streams: int, batch_size: int, shuffle_buffer: int = 0,
                 num_workers: int = 0, seed: int | None = None, **pipe_options: Any) -> None:
        self.spec = PipelineSpec.build(shuffle_buffer=shuffle_buffer, **pipe_options)
        self.shards = shard_names(shards, self.spec.config)
        self.seed = shared_seed(seed)
        self.streams, self.batch_size, self.num_workers = streams, batch_size, num_workers
        self.epoch = 0
        self._resume: dict[str, Any] | None = None
        self._reorderer: Reorderer | None = None
        self.plan(0)  # checks streams, batch size and world size now

    def plan(self, epoch: int) -> OrderPlan:
        """Returns epoch ``epoch``'s plan."""
        plan = OrderPlan(self.shards, seed=self.seed, epoch=epoch, streams=self.streams,
                         batch=self.batch_size, buffer=self.spec.shuffle_buffer,
                         shuffle_shards=self.spec.shuffle_shards)
        plan.rank_streams(*rank_and_world())
        return plan

    def set_epoch(self, epoch: int) -> None:
        """Makes the next iteration epoch ``epoch`` (from its start)."""
        self.epoch, self._resume, self._reorderer = epoch, None, None

    def __iter__(self) -> Iterator[Any]:
        rank, world = rank_and_world()
        plan = self.plan(self.epoch)
        state, self._resume = self._resume, None
        self._reorderer = reorderer = Reorderer(plan, rank, world, state=state)
        dataset = _Streams(plan, self.spec, rank, world, state)
        loader = DataLoader(dataset, batch_size=None, num_workers=self.num_workers,
                            collate_fn=_as_is)
        collate = self.spec.collate
        for batch in reorderer.batches(loader):
            values = [value for value in batch if value is not SKIPPED]
            if values:
                yield default_collate(values) if collate else values
        self.epoch += 1
        self._reorderer = None

    def state_dict(self) -> dict[str, Any]:
        """Returns what this rank's training loop received (its streams: merge every rank's
        with :func:`~aisio.core.order.merge_order_states`)."""
        if self._reorderer is not None:
            return self._reorderer.state_dict()
        if self._resume is not None:
            return self._resume
        rank, world = rank_and_world()
        return Reorderer(self.plan(self.epoch), rank, world).state_dict()

    def load_state_dict(self, state: dict[str, Any] | list[dict[str, Any]]) -> None:
        """Makes the next iteration continue the saved epoch, in the same order.

        Raises:
            StateMismatchError: the state is of another run or plan, or lacks a rank's part.
        """
        if not isinstance(state, dict):
            state = merge_order_states(list(state))
        epoch = state.get("epoch") if isinstance(state, dict) else None
        check_order_state(state, self.plan(epoch if isinstance(epoch, int) else self.epoch))
        self.epoch, self._resume, self._reorderer = int(state["epoch"]), state, None


__all__ = ["OrderedLoader"]
