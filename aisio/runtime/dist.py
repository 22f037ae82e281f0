"""torch.distributed, as the loaders need it: rank and world, a shared seed, what rank 0 says,
stopping together, the ranks' states merged."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any, Literal

import torch
import torch.distributed as dist

from aisio.core.epochs.progress import merge_states, shard_list_id
from aisio.core.faults.policy import warn_in_user_code
from aisio.core.order.streams import merge_order_states
from aisio.runtime.exchange import Position, StateExchange

Uneven = Literal["drop", "keep"]
"""What a loader does when its ranks get unequal shares: every rank stops when the first runs out
(``"drop"``), or each reads all of its share (``"keep"``)."""


def check_uneven(uneven: str) -> None:
    """Raises ValueError unless ``uneven`` is ``"drop"`` or ``"keep"``."""
    if uneven not in ("drop", "keep"):
        raise ValueError(f"uneven={uneven!r} must be 'drop' or 'keep'")


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


def drop_sync(uneven: str) -> DropSync | None:
    """Returns the per-item check that stops every rank when one runs out (``uneven="drop"``),
    or None where it is not needed (one process, or ``uneven="keep"``)."""
    check_uneven(uneven)
    if uneven == "keep" or not initialized() or dist.get_world_size() < 2:
        return None
    return DropSync(_gloo())


class DropSync:
    """``uneven="drop"`` across ranks: ``sync(have_item)`` is whether every rank has an item
    (a collective, each item), and :meth:`dropped` says what the ranks dropped when not."""

    def __init__(self, group: Any) -> None:
        self.group = group
        self.rank, self.world = rank_and_world()

    def __call__(self, have_item: bool) -> bool:
        flag = torch.tensor([1 if have_item else 0], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=self.group)
        return bool(flag.item())

    def dropped(self, epoch: int, left: int) -> list[int]:
        """Returns the samples each rank held past the stop (``left``: this rank's), by rank,
        a collective when the ranks stop together; rank 0 warns once when any were dropped."""
        mine = torch.tensor([left], dtype=torch.int64)
        every = [torch.zeros(1, dtype=torch.int64) for _ in range(self.world)]
        dist.all_gather(every, mine, group=self.group)
        counts = [int(count.item()) for count in every]
        if self.rank == 0 and any(counts):
            warn_in_user_code(
                f"uneven=\"drop\": epoch {epoch} ended when the first of the {self.world} ranks "
                f"ran out of its share, and the ranks dropped {counts} samples (by rank; "
                f"{sum(counts)} in all) that they held beyond it; uneven=\"keep\" trains on "
                "every sample (the ranks then stop apart: wrap DDP in "
                "torch.distributed.algorithms.Join)")
        return counts


class JobRanks:
    """Every rank of the job, over aisio's gloo group: what the ranks of a loader's set-up say to
    each other (see :func:`aisio.runtime.setup.agree_on_shards`)."""

    def __init__(self) -> None:
        self.rank, self.world = rank_and_world()
        self.group = _gloo()

    def broadcast(self, value: Any) -> Any:
        """Returns rank 0's ``value`` on every rank (a collective; picklable values)."""
        box = [value]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def flags(self, flag: bool) -> list[bool]:
        """Returns every rank's ``flag``, by rank (a collective)."""
        mine = torch.tensor([1 if flag else 0], dtype=torch.int32)
        every = [torch.zeros(1, dtype=torch.int32) for _ in range(self.world)]
        dist.all_gather(every, mine, group=self.group)
        return [bool(each.item()) for each in every]


def job_ranks() -> JobRanks | None:
    """Returns the job's ranks under torch.distributed with more than one rank, else None."""
    return JobRanks() if initialized() and dist.get_world_size() > 1 else None


def gather_state(loader: Any) -> dict[str, Any]:
    """Returns the state of every rank's loader merged into one, at this rank's step. Save it
    from rank 0; load it on any number of ranks. Under several ranks every rank calls it at
    the same step (or the loader's ``state_dict()``, the same); a rank that went past that step
    without asking is a :class:`~aisio.UsageError`, at once, and one that waits at a barrier
    still answers (:mod:`aisio.runtime.exchange`). With ``uneven="keep"`` a rank that has
    received all of its share of the epoch (and left its loop) need not call it: its final
    state of the epoch stands in for it.
    """
    if getattr(loader, "position_and_state", None) is None:  # (not an aisio loader)
        return merged_over_ranks(loader, None, loader.state_dict())
    position, state = loader.position_and_state()
    return merged_over_ranks(loader, position, state)


def merged_over_ranks(loader: Any, position: Position | None,
                      state: dict[str, Any]) -> dict[str, Any]:
    """Returns ``state`` (this rank's, of ``loader``, at ``position``) merged with every other
    rank's at the same position: through the loader's :class:`StateExchange`, or a collective
    where there is none. In one process: ``state``."""
    if not initialized() or dist.get_world_size() < 2:
        return state
    exchange = getattr(loader, "exchange", None)
    if isinstance(exchange, StateExchange) and position is not None:
        return _merge(exchange.gather(position, state))
    states: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(states, state, group=_gloo())
    return _merge(states)


def _merge(states: list[Any]) -> dict[str, Any]:
    """Merges the ranks' states, of either order (``order="deterministic"``'s name it)."""
    if states and isinstance(states[0], dict) and states[0].get("order") == "deterministic":
        return merge_order_states(states)
    return merge_states(states)


_EXCHANGES: dict[str, int] = {}


def with_exchange(loader: Any) -> Any:
    """Returns ``loader`` (a :class:`~aisio.ResumableLoader` or an ordered one) with a
    :class:`~aisio.runtime.exchange.StateExchange` over several ranks, so that its state at a
    step is every rank's, whether a rank asks, waits or has finished the epoch."""
    if not initialized() or dist.get_world_size() < 2 or _default_store() is None:
        return loader  # (a torch without the store: a plain collective)
    base = f"{shard_list_id(loader.shards)}-{loader.seed}"
    _EXCHANGES[base] = _EXCHANGES.get(base, 0) + 1  # loaders are built in one order everywhere
    rank, world = rank_and_world()
    store = dist.PrefixStore(f"aisio/state/{base}-{_EXCHANGES[base]}/", _default_store())
    exchange = StateExchange(store, rank, world, loader)
    loader.exchange = exchange
    loader.on_finish = exchange.finished
    exchange.start()  # (a rank that never asks answers the others)
    return loader


def _default_store() -> Any:
    """Returns the key-value store of the default process group, or None."""
    get = getattr(dist.distributed_c10d, "_get_default_store", None)
    try:
        return get() if get is not None else None
    except (RuntimeError, ValueError):
        return None


_GROUPS: dict[int, Any] = {}


def _gloo() -> Any:
    """Returns a gloo group over every rank (CPU tensors work whatever the main backend)."""
    key = id(dist.group.WORLD)
    if key not in _GROUPS:
        _GROUPS[key] = (dist.group.WORLD if dist.get_backend() == "gloo"
                        else dist.new_group(backend="gloo", timeout=timedelta(minutes=30)))
    return _GROUPS[key]
