"""Resampled epochs (``resampled=True``): shards drawn with replacement, each reader its own
draw, an epoch cut at a number of samples per rank.

A reader (worker ``w`` of rank ``r``) draws from ``(seed, epoch, r, w)``: every epoch draws
anew, every reader differently, and a rerun with the same seed, epoch, ranks and workers draws
the same shards. What the training loop received is not recorded (a shard may be read twice
in an epoch, or never): a resampled loader resumes from an epoch's start, not mid-epoch.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

from aisio.core.epochs.progress import ShardTask, epoch_seed
from aisio.core.store.sources import ObjectRef

RESAMPLED = ("draw shards with replacement forever (cap the epoch with ``.header(n)`` or "
             "the loaders' ``samples_per_epoch``). Each worker of each rank draws from "
             "``(seed, epoch, rank, worker)``; a resampled loader cannot checkpoint mid-epoch "
             "(``state_dict()`` raises StateMismatchError): ``set_epoch(e)`` after a restart "
             "draws epoch ``e`` again, the same draw with the same seed, ranks and workers "
             "(on DataLoader2, whose workers DataLoader2 seeds, a new draw).")
"""The doc of ``resampled=``, which :func:`webdataset_pipe` and every one-call loader take."""
SAMPLES_PER_EPOCH = ("with ``resampled=True``, the epoch length per rank, in samples (counted "
                     "before batching): exactly that many on each rank, split across its "
                     "workers (worker ``w`` of ``W`` yields ``N // W``, plus one when "
                     "``w < N % W``; each worker's last batch may be short).")
"""The doc of ``samples_per_epoch=``."""
#: The options of resampling, which the loaders take beside the pipeline's.
RESAMPLING = ("resampled", "samples_per_epoch")


def resampled_tasks(shards: Sequence[ObjectRef], seed: int, epoch: int, *, rank: int = 0,
                    worker: int = 0) -> Iterator[ShardTask]:
    """Yields shard tasks drawn with replacement, forever, for one reader of one epoch.

    Example:
        >>> from aisio.core.store.urls import AISPath, Bucket
        >>> refs = [ObjectRef(AISPath(Bucket("b"), f"s-{i}.tar")) for i in range(3)]
        >>> draw = lambda w: [t.index for t, _ in zip(resampled_tasks(refs, 0, 1, worker=w),
        ...                                         range(5), strict=False)]
        >>> draw(0) == draw(0), draw(0) == draw(1)
        (True, False)
    """
    if not shards:
        raise ValueError("resampled=True needs at least one shard")
    rng = random.Random(f"{epoch_seed(seed, epoch)}:resampled:{rank}:{worker}")
    while True:
        index = rng.randrange(len(shards))
        yield ShardTask(index, shards[index])


def reader_share(total: int | None, worker: int, workers: int) -> int | None:
    """Returns how many of a rank's ``total`` samples per epoch worker ``worker`` of
    ``workers`` yields: ``total // workers``, plus one when ``worker < total % workers``
    (None: no limit).

    Example:
        >>> [reader_share(10, w, 3) for w in range(3)]
        [4, 3, 3]
    """
    if total is None:
        return None
    count, extra = divmod(total, workers)
    return count + (worker < extra)


def check_resampled(resampled: bool, samples_per_epoch: int | None) -> None:
    """Raises ValueError for ``samples_per_epoch`` without ``resampled=True``, or below 1."""
    if samples_per_epoch is not None and not resampled:
        raise ValueError("samples_per_epoch goes with resampled=True (exact epochs end "
                         "when the shards do)")
    if samples_per_epoch is not None and samples_per_epoch < 1:
        raise ValueError(f"samples_per_epoch={samples_per_epoch} must be at least 1")


__all__ = ["RESAMPLED", "RESAMPLING", "SAMPLES_PER_EPOCH", "check_resampled", "reader_share",
           "resampled_tasks"]
