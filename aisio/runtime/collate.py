"""torch's ``default_collate``, with the tensors of a batch stacked by one thread in the training
process.

``default_collate`` stacks a batch's tensors with ``torch.stack``, which runs on torch's
intra-op threads (one per core). In a DataLoader worker torch keeps one; in the training process
(``num_workers=0``) the copy is split over every core, and each of those threads then spins
waiting for the next parallel region, taking the cores the decoding and AIStore need: on a
loaded machine a batch of images took many times the single-threaded copy (see
``benchmarks/README.md``). A batch's stack is a plain memory copy, which one thread does at
memory speed, so :func:`stack_collate` stacks CPU tensors with numpy (one thread, no torch
parallel region) and leaves everything else, and every tensor in a worker, to torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.utils.data import get_worker_info
from torch.utils.data._utils.collate import (
    collate,
    collate_tensor_fn,
    default_collate_fn_map,
)

_Map = dict[type | tuple[type, ...], Callable[..., Any]]

_NUMPY_DTYPES = frozenset((torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32,
                           torch.int64, torch.float16, torch.float32, torch.float64))
"""The dtypes a tensor shares with numpy (``Tensor.numpy()`` refuses bfloat16, ...)."""


def _plain(tensor: Any, like: Any) -> bool:
    return (type(tensor) is torch.Tensor and tensor.shape == like.shape
            and tensor.dtype == like.dtype and tensor.device.type == "cpu"
            and tensor.layout is torch.strided and not tensor.requires_grad
            and not tensor.is_conj() and not tensor.is_neg())


def stack_tensors(batch: Any, *, collate_fn_map: _Map | None = None
                  ) -> Any:
    """Returns the tensors of ``batch`` stacked on a new first axis, as ``torch.stack`` does:
    by one numpy copy in the training process; by torch where it would do otherwise (in a
    DataLoader worker, where it allocates in shared memory; tensors of another device, dtype,
    layout or shape, subclasses, tensors that need grad)."""
    elem = batch[0]
    if (get_worker_info() is not None or elem.dtype not in _NUMPY_DTYPES
            or not all(_plain(tensor, elem) for tensor in batch)):
        return collate_tensor_fn(batch, collate_fn_map=collate_fn_map)
    out = torch.empty((len(batch), *elem.shape), dtype=elem.dtype)
    np.stack([tensor.numpy() for tensor in batch], out=out.numpy())
    return out


STACK_COLLATE_MAP: _Map = {
    **default_collate_fn_map, torch.Tensor: stack_tensors}
"""torch's ``default_collate_fn_map`` with :func:`stack_tensors` for tensors."""


def stack_collate(batch: Any) -> Any:
    """Returns ``batch`` collated as torch's ``default_collate`` does (the same types, values
    and shapes), its tensors stacked by :func:`stack_tensors`."""
    return collate(batch, collate_fn_map=STACK_COLLATE_MAP)


__all__ = ["STACK_COLLATE_MAP", "stack_collate", "stack_tensors"]
