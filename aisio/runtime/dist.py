"""torch.distributed, as the loaders need it: rank and world, a shared seed, what rank 0 says,
stopping together, the ranks' states merged."""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Literal

import torch
import torch.distributed as dist

from aisio.core.epochs import received
from aisio.core.epochs.progress import merge_states, shard_list_id
from aisio.core.faults.errors import ClusterError
from aisio.core.order.streams import merge_order_states

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


def drop_sync(uneven: str) -> Callable[[bool], bool] | None:
    """Returns the per-item check that stops every rank when one runs out (``uneven="drop"``),
    or None where it is not needed (one process, or ``uneven="keep"``)."""
    check_uneven(uneven)
    if uneven == "keep" or not initialized() or dist.get_world_size() < 2:
        return None
    group = _gloo()

    def sync(have_item: bool) -> bool:
        flag = torch.tensor([1 if have_item else 0], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
        return bool(flag.item())

    return sync


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
    """Returns the state of every rank's loader merged into one (a collective: every rank
    calls it at the same step). Save it from rank 0; load it on any number of ranks.

    With ``uneven="keep"`` a rank that has received all of its share of the epoch (and left
    its loop) need not call it: its final state of the epoch stands in for it.
    """
    local = getattr(loader, "local_state_dict", None)
    return merged_over_ranks(loader, local() if local is not None else loader.state_dict())


def merged_over_ranks(loader: Any, state: dict[str, Any]) -> dict[str, Any]:
    """Returns ``state`` (this rank's, of ``loader``) merged with every other rank's at the
    same step: a collective, or through the loader's :class:`StateExchange` where ranks may
    have finished apart. In one process: ``state``."""
    if not initialized() or dist.get_world_size() < 2:
        return state
    exchange = getattr(loader, "exchange", None)
    if isinstance(exchange, StateExchange):
        return _merge(exchange.gather(loader.epoch, state))
    states: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(states, state, group=_gloo())
    return _merge(states)


def _merge(states: list[Any]) -> dict[str, Any]:
    """Merges the ranks' states, of either order (``order="deterministic"``'s name it)."""
    if states and isinstance(states[0], dict) and states[0].get("order") == "deterministic":
        return merge_order_states(states)
    return merge_states(states)


class StateExchange:
    """How :func:`gather_state` collects the ranks' states under ``uneven="keep"``, where a
    rank may have run out while the others go on: through torch.distributed's key-value store
    rather than a collective. Each call publishes this rank's state as that epoch's ``n``-th;
    a rank that finished the epoch publishes its final state once. A call waits, for each
    rank, for its ``n``-th state of the epoch, or its final one.

    Args:
        name: the loader's key space, the same on every rank.
        timeout: seconds a call waits for the other ranks.
    """

    def __init__(self, name: str, timeout: float = 1800.0) -> None:
        self.store = dist.PrefixStore(f"aisio/state/{name}/", _default_store())
        self.rank, self.world = rank_and_world()
        self.timeout = timeout
        self.calls: dict[int, int] = {}

    def finished(self, epoch: int, state: dict[str, Any]) -> None:
        """Publishes this rank's final state of ``epoch`` (it received all of its share)."""
        self.store.set(f"e{epoch}/final/{self.rank}", json.dumps(state))

    def gather(self, epoch: int, state: dict[str, Any]) -> list[dict[str, Any]]:
        """Returns every rank's state at this call (its final one if it has finished)."""
        call = self.calls[epoch] = self.calls.get(epoch, 0) + 1
        self.store.set(f"e{epoch}/c{call}/{self.rank}", json.dumps(state))
        deadline = time.monotonic() + self.timeout
        states = [self._wait(f"e{epoch}/c{call}/{rank}", f"e{epoch}/final/{rank}", deadline)
                  for rank in range(self.world)]
        if call > 2:  # every rank has read it: each has passed call - 1
            with contextlib.suppress(Exception):
                self.store.delete_key(f"e{epoch}/c{call - 2}/{self.rank}")
        return states

    def _wait(self, key: str, final: str, deadline: float) -> dict[str, Any]:
        pause = 0.001
        while True:
            for name in (key, final):
                if self.store.check([name]):
                    return dict(json.loads(self.store.get(name)))
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"gather_state waited {self.timeout:.0f} s for rank {key.rsplit('/', 1)[1]}, "
                    "which neither reached this step nor finished the epoch; call gather_state "
                    "at the same step on every rank (a rank that ran out need not)")
            time.sleep(pause)
            pause = min(2 * pause, 0.05)


_EXCHANGES: dict[str, int] = {}


def keep_exchange(loader: Any, uneven: str) -> Any:
    """Returns ``loader`` (a :class:`~aisio.ResumableLoader`), with a :class:`StateExchange`
    when ranks may end apart (``uneven="keep"`` over several ranks), so that
    :func:`gather_state` works at any step, whether or not a rank has finished."""
    if uneven != "keep" or not initialized() or dist.get_world_size() < 2:
        return loader
    if _default_store() is None:
        return loader  # (a torch without the store: gather_state stays a plain collective)
    base = f"{shard_list_id(loader.shards)}-{loader.seed}"
    _EXCHANGES[base] = _EXCHANGES.get(base, 0) + 1  # loaders are built in one order everywhere
    exchange = StateExchange(f"{base}-{_EXCHANGES[base]}")
    loader.exchange = exchange
    loader.on_finish = exchange.finished
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


# A trainer that checkpoints on every rank at once gets every rank's progress (core/epochs).
received.gather_over_ranks = merged_over_ranks
