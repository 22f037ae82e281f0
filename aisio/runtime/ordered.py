"""The deterministic order's torch parts, shared by the loaders that take ``order=``.

The order itself, the state and the training loop are the core's
(:class:`~aisio.core.order.loader.DeterministicOrder`); here are only what torch adds: the dataset each
DataLoader worker iterates (its streams of the published epoch, a pack of chunks per group of
rounds) and the collate that makes a rank's batch in the training process (torch's
``default_collate`` as :func:`~aisio.runtime.collate.stack_collate` runs it, and memory pinned
where torch pins it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.utils.data
from torch.utils.data import IterableDataset

from aisio.core.format.collate import BatchCollate
from aisio.core.order.loader import OrderSetup
from aisio.core.pipeline.spec import PipelineSpec
from aisio.runtime.collate import stack_collate


class OrderedStreams(IterableDataset):
    """One rank's streams, split across the DataLoader's workers: yields, per group of rounds,
    the pack of chunks of this worker's streams (:meth:`OrderSetup.rounds`). The epoch is read when
    the worker starts it, so persistent workers serve every epoch."""

    def __init__(self, setup: OrderSetup) -> None:
        self.setup = setup

    def __iter__(self) -> Iterator[Any]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        return self.setup.rounds(worker, workers)


def batch_collate(spec: PipelineSpec, *, pin: bool = False, device: str | None = None
                  ) -> Callable[[list[Any]], Any] | None:
    """Returns what makes a rank's batch from its samples in the training process: torch's
    ``default_collate`` as :func:`~aisio.runtime.collate.stack_collate` runs it
    (``collate=True``; MixedShapesError names the samples that differ), then pinned (``pin``);
    None keeps lists."""
    if not spec.collate and not pin:
        return None
    collate: Callable[[Any], Any] = (BatchCollate(stack_collate) if spec.collate
                                     else _as_list)
    if not pin:
        return collate
    return _PinnedCollate(collate, device)


def _as_list(values: list[Any]) -> list[Any]:
    return values


class _PinnedCollate:
    def __init__(self, collate: Callable[[Any], Any], device: str | None) -> None:
        self.collate, self.device = collate, device

    def __call__(self, values: list[Any]) -> Any:
        from torch.utils.data._utils.pin_memory import pin_memory

        return pin_memory(self.collate(values), self.device)


def can_pin(pin_memory: Any) -> bool:
    """Returns whether to pin: asked for, and an accelerator to pin for (as torch decides)."""
    return bool(pin_memory) and torch.accelerator.is_available()


__all__ = ["OrderedStreams", "batch_collate", "can_pin"]
