"""The opening every one-call loader shares, and the loader it ends in.

Every front end (DataLoader2, DataLoader and StatefulDataLoader, torchdata.nodes; in either
order) starts alike: :func:`loader_setup` checks the options (:meth:`PipelineSpec.build`), agrees
on the shards with every other rank (:func:`agreed_shards`), shares rank 0's seed and reads this
process's rank, and returns a :class:`LoaderSetup`. It is the one place the options are
split (the pipeline's; ``resampled``; the loader options of
:data:`~aisio.core.pipeline.loader_options.LOADER_OPTIONS`) and the order chosen (fast,
resampled or deterministic). The front end builds its own plumbing from that (its pipe or
nodes, its worker processes) and hands it back to :meth:`LoaderSetup.loader`, which makes the
training loop's loader (:class:`~aisio.core.pipeline.loop.ResumableLoader` over the chosen
order) with what ``uneven`` asks for across ranks (stopping together, or the state exchange).

The set-up is also where what the core cannot import is plugged in, never at import: it
registers how items cross between processes (:func:`~aisio.runtime.workers.prepare_process`)
and passes each loader the ranks' state (:func:`~aisio.runtime.dist.gather_state`) and the
check on Lightning's loop (:func:`~aisio.runtime.fetchers.check_iteration`).

The ranks agree on the shards because each rank's share is cut from one list: under
torch.distributed with more than one rank, rank 0 alone lists a bucket or prefix and sends the
list to the others (one listing per job, not one per rank); a list that needs no listing
(templates, objects) is expanded by every rank and checked equal to rank 0's. Ranks given
different shards get a :class:`~aisio.ConfigError` naming the difference, on every rank.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from aisio.core.epochs.plan import EpochPlan
from aisio.core.epochs.progress import shard_list_id
from aisio.core.epochs.resample import RESAMPLING, check_resampled
from aisio.core.faults.errors import ClusterError, ConfigError
from aisio.core.faults.policy import warn_in_user_code
from aisio.core.order.loader import (
    DeterministicOrder,
    OrderSetup,
    check_ordered_options,
    is_deterministic,
    refuse_streams,
)
from aisio.core.pipeline.epoch import FastReader, ResampledReader
from aisio.core.pipeline.loader_options import refused_by, split_loader_options, taken_by
from aisio.core.pipeline.loop import EpochOrder, FastOrder, OpenEpoch, ResumableLoader
from aisio.core.pipeline.spec import PipelineSpec, check_options
from aisio.core.store.ais import AISStore
from aisio.core.store.config import AISConfig, resolve_config
from aisio.core.store.protocol import ObjectStore
from aisio.core.store.sources import (
    ObjectRef,
    Source,
    check_templates,
    pack_refs,
    resolve,
    shard_list,
    templates_of,
    unpack_refs,
)
from aisio.runtime.collate import stack_collate
from aisio.runtime.dist import (
    Uneven,
    check_uneven,
    drop_sync,
    gather_state,
    job_ranks,
    rank_and_world,
    shared_seed,
    with_exchange,
)
from aisio.runtime.fetchers import check_iteration
from aisio.runtime.workers import prepare_process


@dataclass(frozen=True)
class LoaderSetup:
    """What a one-call loader starts from, the same in every front end (see the module doc).

    Attributes:
        where: the entry point's name, for messages.
        spec: the pipeline options, checked.
        shards: the shard list, the same on every rank (rank 0's).
        seed: the run's seed, the same on every rank (rank 0's).
        rank: this process's rank (0 without torch.distributed).
        world: the number of ranks (1 without torch.distributed).
        uneven: ``"drop"`` or ``"keep"`` (see :data:`~aisio.runtime.dist.Uneven`).
        plan: where the training process publishes each epoch for its readers.
        ordered: ``order="deterministic"``'s set-up (None: ``order="fast"``).
        resampled: whether epochs are resampled (``resampled=True``).
        samples_per_epoch: a resampled epoch's length per rank (None: endless).
        loader_options: the options for the loader underneath (DataLoader's, as
            :data:`~aisio.core.pipeline.loader_options.LOADER_OPTIONS` says ``where`` takes).
        checked: the shards' templates, checked against the bucket at the first epoch opened.
    """

    where: str
    spec: PipelineSpec
    shards: tuple[ObjectRef, ...]
    seed: int
    rank: int
    world: int
    uneven: Uneven
    plan: EpochPlan = field(default_factory=EpochPlan)
    ordered: OrderSetup | None = None
    resampled: bool = False
    samples_per_epoch: int | None = None
    loader_options: dict[str, Any] = field(default_factory=dict)
    checked: TemplateCheck = field(default_factory=lambda: TemplateCheck((), None))

    @property
    def deterministic(self) -> bool:
        """Whether the loader reads in ``order="deterministic"``."""
        return self.ordered is not None

    def warn_idle_readers(self, num_workers: int) -> None:
        """Warns, once (when the loader is built), when the job's reading workers
        (``num_workers`` on each rank) are more than what they split: each reads whole shards
        (``order="fast"``), or whole canonical streams (``order="deterministic"``), so the
        ones left without any sit idle every epoch. Names the option that helps."""
        readers = max(1, num_workers) * self.world
        order = self.ordered
        units, what = ((order.streams, "stream") if order is not None
                       else (len(self.shards), "shard"))
        idle = readers - units
        if idle <= 0:
            return
        ranks = f" ({max(1, num_workers)} on each of {self.world} ranks)" if self.world > 1 else ""
        fix = (f"pass num_workers={units // self.world}, or "
               if num_workers > 1 and units >= self.world else "")
        more = ("write the dataset in at least {} shards" if order is None else
                "pass streams={} or more (dividing the batch size)").format(readers)
        warn_in_user_code(
            f"{self.where}(): {units} {what}(s) for {readers} reading worker(s){ranks}: "
            f"{idle} worker(s) will have no {what} to read and sit idle; each reads whole "
            f"{what}s: {fix}{more}")

    def reader(self) -> Reader:
        """Returns what each reader (a worker, or the training process) runs each epoch in the
        order the set-up chose: ``reader.read(worker, workers)`` yields that reader's items of
        the epoch published on :attr:`plan` (see :mod:`aisio.core.pipeline.epoch`)."""
        if self.ordered is not None:
            return self.ordered
        if self.resampled:  # every reader samples from every shard
            return ResampledReader(self.shards, self.spec, self.seed, self.plan, self.rank,
                                   self.samples_per_epoch, stack_collate)
        return FastReader(self.shards, self.spec, self.seed, self.plan, self.rank, self.world,
                          stack_collate)

    def loader(self, *, open_epoch: OpenEpoch, close: Callable[[], None],
               end_epoch: Callable[[], None] | None = None,
               collate: Callable[[list[Any]], Any] | None = None,
               stops_together: bool = False) -> ResumableLoader:
        """Returns the training loop's loader over what ``open_epoch`` opens, in the order the
        set-up chose: its :class:`~aisio.core.pipeline.loop.FastOrder` (resumable unless
        resampled) or :class:`~aisio.core.order.loader.DeterministicOrder` (whose batches
        ``collate`` makes in the training process). ``stops_together``: the loader
        underneath already stops every rank when the first runs out (DataLoader2's
        distributed reading service), so no check is added."""
        order: EpochOrder
        if self.ordered is not None:
            order = DeterministicOrder(self.ordered, collate=collate)
        else:
            order = FastOrder(self.shards, seed=self.seed, world=self.world,
                              shuffle_shards=self.spec.shuffle_shards,
                              resumable=not self.resampled)
        loader = ResumableLoader(order, open_epoch=self.checked.before(open_epoch),
                                 close=close, end_epoch=end_epoch, report=self.spec.report,
                                 timings=self.spec.times,
                                 sync=None if stops_together else drop_sync(self.uneven))
        return _plugged(loader)


def _plugged(loader: ResumableLoader) -> ResumableLoader:
    """Returns ``loader`` with what the core cannot import passed in: the state of every rank
    (``torch.distributed``, :func:`~aisio.runtime.dist.gather_state`), the check that a
    trainer which fetches ahead is followed (:func:`~aisio.runtime.fetchers.check_iteration`),
    and the exchange of states between ranks (:func:`~aisio.runtime.dist.with_exchange`)."""
    loader.gather_over_ranks = gather_state
    loader.check_iteration = check_iteration
    return with_exchange(loader)


def loader_setup(where: str, shards: Any, options: dict[str, Any], *, seed: int | None,
                 uneven: str, order: str = "fast", streams: int | None = None,
                 workers: int | None = None, shared: bool = False,
                 check: Callable[[dict[str, Any]], None] | None = None) -> LoaderSetup:
    """Returns the set-up of the loader ``where`` builds, the one place its options are split
    and its order chosen: ``options`` checked (the pipeline's, ``resampled`` and
    ``samples_per_epoch``, and the loader options ``where`` takes, which are taken out of
    ``options`` into ``loader_options``), the shards agreed by every rank, rank 0's seed,
    this rank, the epoch plan (a temporary file its worker processes share when ``shared``)
    and, in ``order="deterministic"``, that order's set-up. With ``workers`` (the reading
    worker processes of each rank), warns when some would sit idle. ``check`` looks at the
    loader options first, before any I/O (raising what the front end refuses). A collective under
    torch.distributed: every rank builds its loaders in the same order.

    Raises:
        ConfigError: an option is refused (``order="deterministic"`` with one it cannot honour,
            ``streams`` without it), or the ranks were given different shards.
        ValueError: ``uneven`` or an option is out of range.
    """
    check_options(options, where=where, known=(*taken_by(where), *RESAMPLING),
                  refused=refused_by(where))
    resampled = bool(options.pop("resampled", False))
    samples_per_epoch = options.pop("samples_per_epoch", None)
    check_resampled(resampled, samples_per_epoch)
    loader_options = split_loader_options(options, where)
    if check is not None:
        check(loader_options)
    check_uneven(uneven)
    prepare_process()  # before any worker starts: forked ones inherit it
    deterministic = is_deterministic(order, where)
    if deterministic:
        check_ordered_options({**options, "resampled": resampled}, where)
    else:
        refuse_streams(streams, where)
    spec = PipelineSpec.build(**options)
    refs = tuple(agreed_shards(shards, spec.config, store=spec.store))
    rank, world = rank_and_world()
    seed = shared_seed(seed)
    plan = EpochPlan.temporary() if shared else EpochPlan()
    ordered = (OrderSetup.build(refs, spec, seed=seed, streams=streams, rank=rank,
                                world=world, epochs=plan, where=where)
               if deterministic else None)
    setup = LoaderSetup(where, spec, refs, seed, rank, world, cast(Uneven, uneven), plan,
                        ordered, resampled, samples_per_epoch, loader_options,
                        TemplateCheck(templates_of(resolve(shards)), spec.config, spec.store))
    if workers is not None and not resampled:  # resampled: every reader reads every shard
        setup.warn_idle_readers(workers)
    return setup


class TemplateCheck:
    """Checks that every name of the shards' templates exists, once, when the loader opens its
    first epoch (before any worker starts or any batch is read), rather than mid-epoch when a
    reader reaches the first missing shard; building a loader does no I/O for a template.
    Every rank checks for itself (one listing per template), so every rank raises alike.

    Args:
        templates: the template sources to check.
        config: the cluster's configuration (None: ``AIS_ENDPOINT``).
        store: where the shards are (None: that cluster).
    """

    def __init__(self, templates: Sequence[Source], config: AISConfig | None,
                 store: ObjectStore | None = None) -> None:
        self.templates = tuple(templates)
        self.config = config
        self.store = store

    def __call__(self) -> None:
        """Checks the templates, unless an earlier call found them whole.

        Raises:
            ObjectNotFoundError: names that do not exist (all of them in ``.missing``), with
                the nearest template that does in the message.
        """
        if self.templates:
            check_templates(_store(self.config, self.store), self.templates)
            self.templates = ()

    def before(self, open_epoch: OpenEpoch) -> OpenEpoch:
        """Returns ``open_epoch`` that checks first (see the class doc)."""
        if not self.templates:
            return open_epoch

        def checked(epoch: int, resume: dict[str, Any] | None) -> Any:
            self()
            return open_epoch(epoch, resume)

        return checked


def list_shards(sources: Any, config: AISConfig | None = None, *,
                store: ObjectStore | None = None) -> list[ObjectRef]:
    """Returns the shards that sources stand for, in this process: templates expanded and SDK
    objects converted without I/O, a bucket or prefix (``ais://b/train/``) listed once, here,
    rather than in every worker and every epoch (see :mod:`aisio.core.store.sources`), from
    ``store`` (None: the cluster of ``config``)."""
    return _lister(config, store)(resolve(sources))


def agreed_shards(sources: Any, config: AISConfig | None = None, *,
                  store: ObjectStore | None = None) -> list[ObjectRef]:
    """Returns the shards that sources stand for, the same list on every rank: rank 0's (see
    the module doc); :func:`list_shards` without torch.distributed or with one rank. A
    collective under torch.distributed.

    Raises:
        ConfigError: the ranks were given different shards (named on every rank).
    """
    return agree_on_shards(sources, _lister(config, store), job_ranks())


def _store(config: AISConfig | None, store: ObjectStore | None) -> ObjectStore:
    """Returns ``store``, else the cluster of ``config`` (None: ``AIS_ENDPOINT``)."""
    return store if store is not None else AISStore(resolve_config(None, config))


def _lister(config: AISConfig | None, store: ObjectStore | None
            ) -> Callable[[list[Source]], list[ObjectRef]]:
    def shards(sources: list[Source]) -> list[ObjectRef]:
        listing = any(source.kind == "prefix" for source in sources)
        return shard_list(sources, _store(config, store) if listing else None)

    return shards


class Reader(Protocol):
    """What one reader of a loader runs each epoch (:mod:`aisio.core.pipeline.epoch`)."""

    def read(self, worker: int = 0, workers: int = 1) -> Iterator[Any]: ...


class Ranks(Protocol):
    """The job's ranks, as the agreement needs them (:class:`~aisio.runtime.dist.JobRanks`)."""

    rank: int
    world: int

    def broadcast(self, value: Any) -> Any: ...

    def flags(self, flag: bool) -> list[bool]: ...


@dataclass(frozen=True)
class _RankZero:
    """What rank 0 tells the others first: its listing (when it listed a bucket or prefix: its
    ``sources`` and the ``shards`` found), else only the identity of its list; or the error
    that stopped it."""

    sources: list[Source] | None
    shards: list[ObjectRef] | None
    shards_id: str
    error: BaseException | None

    def __reduce__(self) -> tuple[Any, ...]:
        # Sent to every rank: the listing compactly (see pack_refs), not ref by ref.
        packed = pack_refs(self.shards) if self.shards is not None else None
        return (_rank_zero, (self.sources, packed, self.shards_id, self.error))


def _rank_zero(sources: list[Source] | None, packed: Any, shards_id: str,
               error: BaseException | None) -> _RankZero:
    return _RankZero(sources, unpack_refs(*packed) if packed is not None else None, shards_id,
                     error)


#: A rank's own shard list differs from rank 0's (named once rank 0's list is known).
_OTHER_LIST = "other list"


def agree_on_shards(sources: Any, lister: Callable[[list[Source]], list[ObjectRef]],
                    ranks: Ranks | None) -> list[ObjectRef]:
    """Returns the shards ``sources`` stand for, as rank 0 found them, on every rank of
    ``ranks`` (None: this process alone). Rank 0 runs ``lister`` over its resolved sources;
    when that lists a bucket or prefix, the others take its list and only check that they
    were given the same sources; otherwise each expands its own (no I/O) and checks that it
    has rank 0's list. A collective of ``ranks``: two steps when they agree, three when not.

    Raises:
        ConfigError: the ranks were given different shards (on every rank: a rank that
            differs names the difference, the others the ranks that differ).
    """
    if ranks is None or ranks.world < 2:
        return lister(resolve(sources))
    mine, error = _attempt(resolve, sources)
    shards: list[ObjectRef] | None = None
    if ranks.rank == 0:
        if error is None:
            shards, error = _attempt(lister, mine)
        listed = mine is not None and any(source.kind == "prefix" for source in mine)
        first = ranks.broadcast(_RankZero(mine if listed else None, shards if listed else None,
                                          shard_list_id(shards or []), _portable(error)))
    else:
        first = ranks.broadcast(None)
    if first.error is not None:
        raise error if error is not None else first.error
    problem = None
    if ranks.rank != 0 and error is None:
        shards, problem = _follow(first, mine, lister, ranks.rank)
    agreed = ranks.flags(error is None and problem is None)
    if all(agreed):
        assert shards is not None
        return shards
    rank_zero = first.shards if first.shards is not None else ranks.broadcast(shards)
    if error is not None:
        raise error
    if problem == _OTHER_LIST:
        problem = (f"rank {ranks.rank}'s shards are not rank 0's: "
                   f"{_difference(shards or [], rank_zero)}")
    elif problem is None:
        others = [str(rank) for rank, ok in enumerate(agreed) if not ok]
        problem = (f"rank{'s' if len(others) > 1 else ''} {', '.join(others)} "
                   f"{'were' if len(others) > 1 else 'was'} given other shards than rank 0 "
                   f"({len(rank_zero)} shard(s))")
    raise ConfigError(f"{problem}; give every rank the same shards (rank 0 lists a bucket or "
                      "prefix once for all of them)")


def _attempt(fn: Callable[[Any], Any], arg: Any) -> tuple[Any, BaseException | None]:
    """Returns ``(fn(arg), None)``, or ``(None, the error it raised)``: a rank that fails must
    still take its part in the collectives, so that the others fail too rather than wait."""
    try:
        return fn(arg), None
    except Exception as exc:
        return None, exc


def _follow(first: _RankZero, mine: list[Source], lister: Callable[[list[Source]],
            list[ObjectRef]], rank: int) -> tuple[list[ObjectRef] | None, str | None]:
    """Returns a rank's shards given what rank 0 said, and what differs from rank 0 (None:
    nothing)."""
    if first.shards is not None:  # rank 0 listed for every rank
        if mine != first.sources:
            return first.shards, (f"rank {rank} was given {_sources(mine)} where rank 0 was "
                                  f"given {_sources(first.sources)}")
        return first.shards, None
    if any(source.kind == "prefix" for source in mine):  # rank 0 needed no listing: no I/O
        return None, (f"rank {rank} was given a bucket or prefix to list ({_sources(mine)}) "
                      "where rank 0 was given none")
    shards, error = _attempt(lister, mine)
    if error is not None or shard_list_id(shards) != first.shards_id:
        return shards, _OTHER_LIST
    return shards, None


def _portable(error: BaseException | None) -> BaseException | None:
    """Returns ``error`` as it can travel to the other ranks (pickled)."""
    if error is None:
        return None
    try:
        pickle.dumps(error)
    except Exception:
        return ClusterError(f"rank 0 could not resolve the shards: {type(error).__name__}: "
                            f"{error}")
    return error


def _sources(sources: Sequence[Source] | None) -> str:
    return _names([source.given or source.uri() for source in sources or []])


def _names(names: Iterable[str], most: int = 3) -> str:
    names = list(names)
    shown = ", ".join(names[:most])
    return f"{shown} and {len(names) - most} more" if len(names) > most else shown


def _difference(mine: Sequence[ObjectRef], theirs: Sequence[ObjectRef]) -> str:
    """Says how shard list ``mine`` differs from rank 0's, ``theirs``."""
    ours, rank_zero = [ref.uri() for ref in mine], [ref.uri() for ref in theirs]
    known_here, known_there = set(ours), set(rank_zero)
    only_here = [name for name in ours if name not in known_there]
    only_there = [name for name in rank_zero if name not in known_here]
    if not (only_here or only_there):
        return f"the same {len(ours)} names in another order or count"
    parts = [f"{len(only_here)} only here ({_names(only_here)})" if only_here else "",
             f"{len(only_there)} only on rank 0 ({_names(only_there)})" if only_there else ""]
    return ", ".join(part for part in parts if part)


__all__ = ["LoaderSetup", "Ranks", "TemplateCheck", "agree_on_shards", "agreed_shards",
           "list_shards", "loader_setup"]
