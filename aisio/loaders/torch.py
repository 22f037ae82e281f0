"""aisio's pipeline on ``torch.utils.data.DataLoader`` and torchdata's ``StatefulDataLoader``.

The pipeline is the DataPipes one (:func:`aisio.datapipes.pipeline.epoch_pipe`): torch's
DataLoader applies its ``sharding_filter`` per worker and per rank itself, and seeds its
shuffles. Each epoch gets a fresh DataLoader over the epoch's shard tasks; the wrapper
(:class:`~aisio.core.loop.ResumableLoader`) unpacks what arrives and can resume mid-epoch on
any number of workers and ranks.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.utils.data.graph_settings
from torch.utils.data import DataLoader

from aisio.core.epoch import epoch_seed
from aisio.core.errors import LoaderUnavailableError
from aisio.core.loop import ResumableLoader
from aisio.core.spec import PipelineSpec
from aisio.datapipes.pipeline import documents_pipe_options, epoch_pipe, shard_names
from aisio.loaders.dist import drop_sync, rank_and_world, shared_seed


def _as_is(item: Any) -> Any:
    """DataLoader's collate for items that are already batches (picklable, unlike a lambda)."""
    return item


def _seed_worker(worker_id: int) -> None:
    """Gives each worker of each rank its own sample shuffle. DataLoader seeds the DataPipe
    graph once, before it is copied to the workers, so all would shuffle alike; the worker's
    own seed (the loader's per-epoch seed plus its id) and the rank make each distinct and
    reproducible."""
    info = torch.utils.data.get_worker_info()
    assert info is not None
    rank, _ = rank_and_world()
    generator = torch.Generator()
    generator.manual_seed((info.seed + 1_000_003 * rank) % (1 << 63))
    torch.utils.data.graph_settings.apply_random_seed(info.dataset, generator)  # type: ignore[arg-type]


def _loader(loader_class: type, shards: Any, *, num_workers: int, seed: int | None,
            uneven: str, prefetch_factor: int | None, **pipe_options: Any) -> ResumableLoader:
    spec = PipelineSpec.build(**pipe_options)
    refs = shard_names(shards, spec.config)
    run_seed = shared_seed(seed)
    pipe, tasks = epoch_pipe(refs, spec, seed=run_seed)
    sync = drop_sync(uneven)

    def open_epoch(epoch: int, resume: dict[str, Any] | None) -> Any:
        tasks.epoch, tasks.resume = epoch, resume
        generator = torch.Generator()
        generator.manual_seed(epoch_seed(run_seed, epoch))  # seeds the sample shuffle
        options: dict[str, Any] = {}
        if num_workers:
            options = {"prefetch_factor": prefetch_factor or 2, "persistent_workers": False,
                       "worker_init_fn": _seed_worker}
        # Its worker processes end with its iterator: nothing to close.
        return loader_class(pipe, batch_size=None, num_workers=num_workers,
                            collate_fn=_as_is, generator=generator, **options)

    return ResumableLoader(refs, seed=run_seed, open_epoch=open_epoch,
                           report=spec.report, timings=spec.times, sync=sync)


@documents_pipe_options(exclude=("resampled",))
def webdataset_dataloader(shards: Any, *, num_workers: int = 0, seed: int | None = None,
                          uneven: str = "drop", prefetch_factor: int | None = None,
                          **pipe_options: Any) -> ResumableLoader:
    """Returns aisio's pipeline on ``torch.utils.data.DataLoader``: batches from AIStore
    shards, resumable mid-epoch (``state_dict()`` / ``load_state_dict()``).

    Shards and samples are shuffled by default (``shuffle_buffer=1000`` per worker: see
    below; ``shuffle_buffer=0`` keeps each shard's order).

    Args:
        shards: a template (``"ais://b/train-{0000..0099}.tar"``), an object, a bucket or
            prefix (``"ais://b/train/"``, listed once), a list of them, or SDK objects.
        num_workers: DataLoader worker processes (0: read in the training process).
        seed: makes the shuffles reproducible (each epoch still reshuffles).
        uneven: with torch.distributed, ``"drop"`` (every rank stops when the first runs out,
            so DDP never hangs) or ``"keep"`` (every sample once; ranks may stop apart).
        prefetch_factor: items each worker keeps ready (DataLoader's option; default 2).
        **pipe_options: the pipeline options below.

    Example:
        >>> loader = webdataset_dataloader("ais://b/train-{000..099}.tar", decode="torchrgb",
        ...     tuple_fields=("png", "cls"), batch_size=64, num_workers=2)   # doctest: +SKIP
    """
    return _loader(DataLoader, shards, num_workers=num_workers, seed=seed, uneven=uneven,
                   prefetch_factor=prefetch_factor, **pipe_options)


@documents_pipe_options(exclude=("resampled",))
def webdataset_stateful_loader(shards: Any, *, num_workers: int = 0, seed: int | None = None,
                               uneven: str = "drop", prefetch_factor: int | None = None,
                               **pipe_options: Any) -> ResumableLoader:
    """Returns aisio's pipeline on torchdata's ``StatefulDataLoader`` (torchdata >= 0.8).

    The resume state is aisio's (what the training loop received, across ranks and any new
    topology), not StatefulDataLoader's per-worker snapshot. Shards and samples are shuffled
    by default (``shuffle_buffer=1000`` per worker: see below; ``shuffle_buffer=0`` keeps each
    shard's order).

    Args:
        shards: a template (``"ais://b/train-{0000..0099}.tar"``), an object, a bucket or
            prefix (``"ais://b/train/"``, listed once), a list of them, or SDK objects.
        num_workers: StatefulDataLoader worker processes (0: read in the training process).
        seed: makes the shuffles reproducible (each epoch still reshuffles).
        uneven: with torch.distributed, ``"drop"`` (every rank stops when the first runs out,
            so DDP never hangs) or ``"keep"`` (every sample once; ranks may stop apart).
        prefetch_factor: items each worker keeps ready (default 2).
        **pipe_options: the pipeline options below.

    Example:
        >>> loader = webdataset_stateful_loader("ais://b/train-{000..099}.tar",
        ...     decode="torchrgb", tuple_fields="png cls", batch_size=64)   # doctest: +SKIP
    """
    try:
        from torchdata.stateful_dataloader import StatefulDataLoader
    except ImportError as exc:
        raise LoaderUnavailableError(
            "StatefulDataLoader needs torchdata >= 0.8: install torchdata, or use "
            "aisio.webdataset_dataloader (torch's DataLoader)") from exc
    return _loader(StatefulDataLoader, shards, num_workers=num_workers, seed=seed, uneven=uneven,
                   prefetch_factor=prefetch_factor, **pipe_options)
