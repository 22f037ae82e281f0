"""aisio.core.epochs.resample: each reader's draw of shards, its share of ``samples_per_epoch``,
and the check of that option when a loader is built."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from aisio.core.epochs.progress import ShardTask
from aisio.core.epochs.resample import check_resampled, reader_share, resampled_tasks
from aisio.core.store.sources import ObjectRef
from aisio.core.store.urls import AISPath, Bucket


def test_samples_per_epoch_goes_with_resampled_and_is_at_least_one() -> None:
    check_resampled(False, None)
    check_resampled(True, None)
    check_resampled(True, 1)
    with pytest.raises(ValueError, match=r"samples_per_epoch goes with resampled=True"):
        check_resampled(False, 5)
    with pytest.raises(ValueError, match=r"samples_per_epoch=0 must be at least 1"):
        check_resampled(True, 0)


def _refs(count: int) -> list[Any]:
    return [ObjectRef(AISPath(Bucket("b"), f"s-{i}.tar")) for i in range(count)]


def _draw(shards: list[Any], seed: int, epoch: int, count: int = 200, **reader: int) -> list[Any]:
    return list(itertools.islice(resampled_tasks(shards, seed, epoch, **reader), count))


def test_each_reader_draws_its_own_shards_with_replacement_the_same_on_a_rerun() -> None:
    """Which shard a resampled reader reads next: drawn from the whole list with replacement,
    from ``(seed, epoch, rank, worker)`` (rank 0, worker 0 unless given), so that a rerun draws
    the same and every epoch and reader differently."""
    shards = _refs(5)
    draw = _draw(shards, 3, 1)
    assert all(task == ShardTask(task.index, shards[task.index]) for task in draw)
    assert {task.index for task in draw} == set(range(5))  # every shard, some more than once
    assert draw == _draw(shards, 3, 1) == _draw(shards, 3, 1, rank=0, worker=0)
    for other in (_draw(shards, 4, 1), _draw(shards, 3, 2), _draw(shards, 3, 1, rank=1),
                  _draw(shards, 3, 1, worker=1)):
        assert other != draw
    assert len(_draw(shards, 3, 1, count=5000)) == 5000  # it never ends by itself
    with pytest.raises(ValueError, match="resampled=True needs at least one shard"):
        next(resampled_tasks([], 3, 1))


@pytest.mark.parametrize("workers", [1, 2, 3, 5])
def test_a_ranks_samples_per_epoch_split_across_its_workers_add_up_to_it(workers: int) -> None:
    """Each worker yields ``N // W`` samples, the first ``N % W`` workers one more: the rank
    yields exactly ``samples_per_epoch``; without one, no worker is limited."""
    for total in range(12):
        shares = [reader_share(total, worker, workers) for worker in range(workers)]
        assert sum(shares) == total
        assert shares == sorted(shares, reverse=True)
        assert {share - total // workers for share in shares} <= {0, 1}
    assert [reader_share(10, w, 3) for w in range(3)] == [4, 3, 3]
    assert reader_share(None, 0, workers) is None
