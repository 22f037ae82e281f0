"""torch.distributed, as the loaders need it: rank and world, a shared seed, stopping together."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from aisio.core.epoch import merge_states


def initialized() -> bool:
    """Returns whether torch.distributed is initialised in this process."""
    return dist.is_available() and dist.is_initialized()


def rank_and_world() -> tuple[int, int]:
    """Returns ``(rank, world size)``; ``(0, 1)`` without torch.distributed."""
    return (dist.get_rank(), dist.get_world_size()) if initialized() else (0, 1)


def shared_seed(seed: int | None) -> int:
    """Returns ``seed``, or a random one; rank 0's, so every rank shuffles shards alike."""
    value = random.SystemRandom().getrandbits(62) if seed is None else int(seed)
    if initialized() and dist.get_world_size() > 1:
        box = torch.tensor([value], dtype=torch.int64)
        dist.broadcast(box, src=0, group=_gloo())
        value = int(box.item())
    return value


def drop_sync(uneven: str) -> Callable[[bool], bool] | None:
    """Returns the per-item check that stops every rank when one runs out (``uneven="drop"``),
    or None where it is not needed (one process, or ``uneven="keep"``)."""
    if uneven not in ("drop", "keep"):
        raise ValueError(f"uneven={uneven!r} must be 'drop' or 'keep'")
    if uneven == "keep" or not initialized() or dist.get_world_size() < 2:
        return None
    group = _gloo()

    def sync(have_item: bool) -> bool:
        flag = torch.tensor([1 if have_item else 0], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
        return bool(flag.item())

    return sync


def gather_state(loader: Any) -> dict[str, Any]:
    """Returns the state of every rank's loader merged into one (a collective: every rank
    calls it at the same step). Save it from rank 0; load it on any number of ranks."""
    state = loader.state_dict()
    if not initialized() or dist.get_world_size() < 2:
        return state
    states: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(states, state, group=_gloo())
    return merge_states(states)


_GROUPS: dict[int, Any] = {}


def _gloo() -> Any:
    """Returns a gloo group over every rank (CPU tensors work whatever the main backend)."""
    key = id(dist.group.WORLD)
    if key not in _GROUPS:
        _GROUPS[key] = (dist.group.WORLD if dist.get_backend() == "gloo"
                        else dist.new_group(backend="gloo", timeout=timedelta(minutes=30)))
    return _GROUPS[key]
