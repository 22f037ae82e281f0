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

from array import array
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from aisio.core.epochs.progress import EpochProgress, ShardTask, shard_order
from aisio.core.store.sources import ObjectRef


class Deal(Mapping[int, int]):
    """Which rank reads each shard of an epoch: ``deal.tasks(rank)`` is a rank's tasks, in the
    order it reads them, its shards in progress first; ``deal[shard]`` the rank that reads a
    shard not done. Each reader of a job makes its own rank's tasks alone and the training
    process asks the owners of the few shards in progress only: at a million shards, nobody
    holds a million tasks or a million owners.

    Args:
        shards: the loader's shard list.
        seed: the run's seed (a resumed epoch's own, from its state).
        epoch: the epoch's number.
        shuffle: whether the epoch's order is shuffled.
        world: the number of ranks.
        resume: a progress or saved state of this epoch (else: a fresh epoch).
    """

    def __init__(self, shards: Sequence[ObjectRef], seed: int | None, epoch: int, *,
                 shuffle: bool, world: int,
                 resume: EpochProgress | dict[str, Any] | None = None) -> None:
        if isinstance(resume, dict):
            resume = EpochProgress.from_state(resume, shards) if resume["epoch"] == epoch else None
        if resume is not None and resume.epoch != epoch:
            resume = None
        self.shards = shards
        self.world = world
        self.done: set[int] = set(resume.done) if resume is not None else set()
        self.order = array("q", shard_order(len(shards), resume.seed if resume is not None
                                            else seed, epoch, shuffle=shuffle))
        #: the shards in progress: their rank and task, in the epoch's order
        self.started: dict[int, tuple[int, ShardTask]] = {}
        if resume is not None:
            owners = resume.owners if resume.world == world else {}
            turn = 0
            for task in resume.tasks(shards, shuffle=shuffle).started:
                owner = owners.get(task.index)
                if owner is None or not 0 <= owner < world:
                    owner, turn = turn % world, turn + 1
                self.started[task.index] = (owner, task)
        self._positions: array[int] | None = None

    def tasks(self, rank: int) -> list[ShardTask]:
        """Returns rank ``rank``'s tasks: its shards in progress, then the untouched shards at
        its positions of the epoch's order (``rank, rank + world, ...``)."""
        mine = [task for owner, task in self.started.values() if owner == rank]
        done, started, shards = self.done, self.started, self.shards
        mine.extend(ShardTask(index, shards[index])
                    for index in self.order[rank::self.world]
                    if index not in done and index not in started)
        return mine

    def __getitem__(self, shard: int) -> int:
        if shard in self.started:
            return self.started[shard][0]
        if shard in self.done or not 0 <= shard < len(self.shards):
            raise KeyError(shard)
        if self._positions is None:
            positions = array("q", bytes(8 * len(self.order)))
            for position, index in enumerate(self.order):
                positions[index] = position
            self._positions = positions
        return self._positions[shard] % self.world

    def __iter__(self) -> Iterator[int]:
        return (index for index in self.order if index not in self.done)

    def __len__(self) -> int:
        return len(self.order) - len(self.done)


def epoch_split(shards: Sequence[ObjectRef], seed: int | None, epoch: int, *, shuffle: bool,
                world: int, resume: EpochProgress | dict[str, Any] | None = None
                ) -> list[list[ShardTask]]:
    """Returns each rank's tasks of the epoch (``[rank]``, in the order it reads them): every
    shard from its start, or what ``resume`` (a progress, or a saved state) left of this
    epoch, its shards in progress first (every rank's :meth:`Deal.tasks`)."""
    deal = Deal(shards, seed, epoch, shuffle=shuffle, world=world, resume=resume)
    return [deal.tasks(rank) for rank in range(world)]


def owners_of(shares: Sequence[Sequence[ShardTask]]) -> dict[int, int]:
    """Returns ``{shard: rank}`` for every task of an :func:`epoch_split`."""
    return {task.index: rank for rank, share in enumerate(shares) for task in share}


__all__ = ["Deal", "epoch_split", "owners_of"]
