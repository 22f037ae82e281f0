"""Which rank reads which shard of an epoch, the same on every rank and after a resume.

A fresh epoch deals its shards to the ranks in turn, in the epoch's order: rank ``r`` of ``R``
reads the shards at positions ``r, r + R, ...`` (its workers then take its shards in turn).
A resumed epoch keeps that deal: each shard in progress goes back to the rank that had it
(the state names it, see :attr:`EpochProgress.owners`) and each untouched shard to the rank
its position gives it. On the same number of ranks every rank is then left with what it
would have read next in the uninterrupted epoch, no more, no less; with ``uneven="drop"``,
where every rank stops when the first runs out, dealing the rest anew would leave the ranks
unequal shares and drop the surplus, samples the uninterrupted epoch trains on. On another
number of ranks the shards in progress are dealt in turn (their owners are of other ranks).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aisio.core.epochs.progress import EpochProgress, ShardTask, shard_order
from aisio.core.store.sources import ObjectRef


def epoch_split(shards: Sequence[ObjectRef], seed: int | None, epoch: int, *, shuffle: bool,
                world: int, resume: EpochProgress | dict[str, Any] | None = None
                ) -> list[list[ShardTask]]:
    """Returns each rank's tasks of the epoch (``[rank]``, in the order it reads them): every
    shard from its start, or what ``resume`` (a progress, or a saved state) left of this
    epoch, its shards in progress first."""
    if isinstance(resume, dict):
        resume = EpochProgress.from_state(resume, shards) if resume["epoch"] == epoch else None
    if resume is not None and resume.epoch == epoch:
        seed = resume.seed
    order = shard_order(len(shards), seed, epoch, shuffle=shuffle)
    shares: list[list[ShardTask]] = [[] for _ in range(world)]
    if resume is None or resume.epoch != epoch:
        for position, index in enumerate(order):
            shares[position % world].append(ShardTask(index, shards[index]))
        return shares
    owners = resume.owners if resume.world == world else {}
    turn = 0
    for task in resume.tasks(shards, shuffle=shuffle):
        if task.index not in resume.partial:
            break  # (the untouched shards follow those in progress)
        owner = owners.get(task.index)
        if owner is None or not 0 <= owner < world:
            owner, turn = turn % world, turn + 1
        shares[owner].append(task)
    for position, index in enumerate(order):
        if index not in resume.done and index not in resume.partial:
            shares[position % world].append(ShardTask(index, shards[index]))
    return shares


def owners_of(shares: Sequence[Sequence[ShardTask]]) -> dict[int, int]:
    """Returns ``{shard: rank}`` for every task of an :func:`epoch_split`."""
    return {task.index: rank for rank, share in enumerate(shares) for task in share}


__all__ = ["epoch_split", "owners_of"]
