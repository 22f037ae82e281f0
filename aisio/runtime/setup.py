"""The opening every one-call loader shares, and the loader it ends in.

Every front end (DataLoader2, DataLoader and StatefulDataLoader, torchdata.nodes; in either
order) starts alike: :func:`loader_setup` checks the options (:meth:`PipelineSpec.build`), lists
the shards (:func:`list_shards`), shares rank 0's seed and reads this process's rank, and
returns a :class:`LoaderSetup`. The front end builds its own plumbing from that (its pipe or
nodes, its worker processes) and hands it back to :meth:`LoaderSetup.resumable` or
:meth:`LoaderSetup.ordered`, which make the training loop's loader with what ``uneven`` asks for
across ranks (stopping together, or the state exchange).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from aisio.core.epochs.plan import EpochPlan
from aisio.core.order.loader import (
    OrderedLoader,
    OrderSetup,
    check_ordered_options,
    is_deterministic,
    refuse_streams,
)
from aisio.core.pipeline.loop import OpenEpoch, ResumableLoader
from aisio.core.pipeline.spec import PipelineSpec
from aisio.core.store.client import client_for
from aisio.core.store.config import AISConfig, resolve_config
from aisio.core.store.sources import ObjectRef, Source, resolve, shard_list
from aisio.runtime.dist import (
    Uneven,
    check_uneven,
    drop_sync,
    keep_exchange,
    rank_and_world,
    shared_seed,
)


@dataclass(frozen=True)
class LoaderSetup:
    """What a one-call loader starts from, the same in every front end (see the module doc).

    Attributes:
        where: the entry point's name, for messages.
        spec: the pipeline options, checked.
        shards: the shard list.
        seed: the run's seed, the same on every rank (rank 0's).
        rank: this process's rank (0 without torch.distributed).
        world: the number of ranks (1 without torch.distributed).
        uneven: ``"drop"`` or ``"keep"`` (see :data:`~aisio.runtime.dist.Uneven`).
        deterministic: whether the loader reads in ``order="deterministic"``.
        streams: that order's canonical streams (None: its default).
    """

    where: str
    spec: PipelineSpec
    shards: tuple[ObjectRef, ...]
    seed: int
    rank: int
    world: int
    uneven: Uneven
    deterministic: bool = False
    streams: int | None = None

    def epoch_plan(self, *, shared: bool) -> EpochPlan:
        """Returns where the training process publishes each epoch for its readers: a
        temporary file when they run in other processes (``shared``), else in memory."""
        return EpochPlan.temporary() if shared else EpochPlan()

    def order(self, plan: EpochPlan) -> OrderSetup:
        """Returns what the readers of ``order="deterministic"`` need (streams checked against
        the batch size and the ranks), their epochs published on ``plan``."""
        return OrderSetup.build(self.shards, self.spec, seed=self.seed, streams=self.streams,
                                rank=self.rank, world=self.world, epochs=plan,
                                where=self.where)

    def resumable(self, *, open_epoch: OpenEpoch, close: Callable[[], None],
                  end_epoch: Callable[[], None] | None = None,
                  stops_together: bool = False) -> ResumableLoader:
        """Returns the training loop's loader (``order="fast"``) over what ``open_epoch``
        opens. ``stops_together``: the loader underneath already stops every rank when the
        first runs out (DataLoader2's distributed reading service), so no check is added."""
        loader = ResumableLoader(self.shards, seed=self.seed, open_epoch=open_epoch,
                                 close=close, end_epoch=end_epoch, report=self.spec.report,
                                 timings=self.spec.times,
                                 sync=None if stops_together else drop_sync(self.uneven))
        return keep_exchange(loader, self.uneven)

    def ordered(self, order: OrderSetup, *, open_epoch: OpenEpoch,
                collate: Callable[[list[Any]], Any] | None, close: Callable[[], None],
                end_epoch: Callable[[], None] | None = None) -> OrderedLoader:
        """Returns the training loop's loader in ``order="deterministic"``: the readers'
        packs that ``open_epoch`` opens, put in order and collated with ``collate``."""
        loader = OrderedLoader(order, open_epoch=open_epoch, collate=collate, close=close,
                               end_epoch=end_epoch, sync=drop_sync(self.uneven))
        return keep_exchange(loader, self.uneven)


def loader_setup(where: str, shards: Any, options: Mapping[str, Any], *, seed: int | None,
                 uneven: str, order: str = "fast", streams: int | None = None,
                 resampled: bool = False) -> LoaderSetup:
    """Returns the set-up of the loader ``where`` builds: ``options`` (the pipeline options
    alone) checked, the shards listed, rank 0's seed, this rank. A collective under
    torch.distributed: every rank builds its loaders in the same order.

    Raises:
        ConfigError: an option is refused (``order="deterministic"`` with one it cannot honour,
            ``streams`` without it).
        ValueError: ``uneven`` or an option is out of range.
    """
    check_uneven(uneven)
    deterministic = is_deterministic(order, where)
    if deterministic:
        check_ordered_options({**options, "resampled": resampled}, where)
    else:
        refuse_streams(streams, where)
    spec = PipelineSpec.build(**options)
    refs = list_shards(shards, spec.config)
    rank, world = rank_and_world()
    return LoaderSetup(where, spec, tuple(refs), shared_seed(seed), rank, world,
                       cast(Uneven, uneven), deterministic, streams)


def list_shards(sources: Any, config: AISConfig | None = None) -> list[ObjectRef]:
    """Returns the shards that sources stand for, in this process: templates expanded and SDK
    objects converted without I/O, a bucket or prefix (``ais://b/train/``) listed once, here,
    rather than in every worker and every epoch (see :mod:`aisio.core.store.sources`)."""
    return _lister(config)(resolve(sources))


def _lister(config: AISConfig | None) -> Callable[[list[Source]], list[ObjectRef]]:
    def shards(sources: list[Source]) -> list[ObjectRef]:
        listing = any(source.kind == "prefix" for source in sources)
        return shard_list(sources, client_for(resolve_config(None, config)) if listing
                          else None)

    return shards


__all__ = ["LoaderSetup", "list_shards", "loader_setup"]
