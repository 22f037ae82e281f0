"""The deterministic order's torch parts, shared by the loaders that take ``order=``.

The order itself, its readers, the state and the training loop are the core's
(:class:`~aisio.core.order.loader.DeterministicOrder`); here is only what torch adds: the
collate that makes a rank's batch in the training process (torch's ``default_collate`` as
:func:`~aisio.runtime.collate.stack_collate` runs it, and memory pinned where torch pins it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.utils.data

from aisio.core.pipeline.spec import PipelineSpec
from aisio.core.transport.collate import BatchCollate
from aisio.runtime.collate import stack_collate


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


__all__ = ["batch_collate", "can_pin"]
