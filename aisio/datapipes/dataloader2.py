"""DataLoader2 (torchdata <= 0.9) over aisio's pipeline: reading services, epochs, one-call loader.

torchdata 0.10 removed DataLoader2; importing this module there raises ImportError, and the
top-level helpers (:func:`aisio.webdataset_loader`, ...) turn that into a
:class:`aisio.LoaderUnavailableError` naming the loaders that replace it.
"""

from __future__ import annotations

import pickle
import random
import warnings
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    import torch.distributed as dist
    import torch.utils.data.graph_settings
    from torch.utils.data.datapipes.iter.sharding import SHARDING_PRIORITIES
    from torchdata.dataloader2 import (
        DataLoader2,
        DistributedReadingService,
        MultiProcessingReadingService,
        SequentialReadingService,
    )
    from torchdata.dataloader2.reading_service import ReadingServiceInterface

from aisio.core.epochs.plan import EpochPlan
from aisio.core.faults.errors import ConfigError, StateMismatchError
from aisio.core.faults.policy import check_epoch
from aisio.core.faults.report import ErrorReport
from aisio.core.order.loader import is_deterministic, refuse_streams
from aisio.core.pipeline.loader_options import DATALOADER2
from aisio.core.pipeline.loop import ResumableLoader
from aisio.core.pipeline.spec import documents_options
from aisio.datapipes.base import IterDataPipe
from aisio.datapipes.mpfix import install as _install_round_robin_fix
from aisio.datapipes.pipeline import (
    RESAMPLED,
    ReaderPipe,
    SampleQuota,
    batch_pipe,
    shards_pipe,
)
from aisio.runtime.dist import Uneven, check_uneven
from aisio.runtime.ordered import batch_collate
from aisio.runtime.setup import LoaderSetup, loader_setup
from aisio.runtime.workers import widen_pipe


class KeepUnevenReadingService(DistributedReadingService):
    """Splits the pipe across ranks and shares rank 0's seed, like DistributedReadingService, but
    without its ``fullsync``: each rank reads all of its share, so ranks may end at different
    steps (use ``torch.distributed.algorithms.Join`` around DDP training)."""

    def initialize(self, datapipe: IterDataPipe) -> IterDataPipe:
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("torch.distributed must be initialised before the loader is built")
        self._world_size = dist.get_world_size()
        self._rank = dist.get_rank()
        self._pg = dist.new_group(backend="gloo", timeout=timedelta(seconds=self._timeout))
        torch.utils.data.graph_settings.apply_sharding(
            datapipe, self._world_size, self._rank, SHARDING_PRIORITIES.DISTRIBUTED
        )
        self._datapipe = datapipe
        return datapipe


class WorkersReadingService(MultiProcessingReadingService):
    """DataLoader2's MultiProcessingReadingService, each worker's result pipe widened (see
    :func:`~aisio.runtime.workers.widen_pipe`): a worker's batches no longer wait for the
    training process to drain them 64 KiB at a time."""

    def initialize(self, datapipe: IterDataPipe) -> IterDataPipe:
        datapipe = super().initialize(datapipe)
        for _, _, results in self._worker_processes:
            widen_pipe(results)
        return datapipe


def reading_service(num_workers: int = 0, *, uneven: Uneven = "drop", worker_prefetch: int = 10,
                    main_prefetch: int = 10, multiprocessing_context: str | None = None
                    ) -> ReadingServiceInterface | None:
    """Returns the reading service for ``num_workers`` processes, distributed when initialised.

    With ``torch.distributed`` initialised, shards are split across ranks (rank 0's seed is
    shared, so every rank agrees on the shuffled shard order), then across each rank's workers.
    Ranks rarely get equal numbers of samples; ``uneven`` says what happens then:

    * ``"drop"``: every rank yields the same number of items per epoch (torchdata's ``fullsync``):
      when the first rank runs out, all stop, and the others' surplus is dropped for this epoch
      (a different surplus each epoch, as shards are reshuffled). DDP never hangs.
    * ``"keep"``: every item is yielded exactly once across ranks; ranks may stop at different
      steps, so DDP training needs ``torch.distributed.algorithms.Join``.
    """
    check_uneven(uneven)
    mp = WorkersReadingService(num_workers=num_workers,
                               multiprocessing_context=multiprocessing_context,
                               worker_prefetch_cnt=worker_prefetch,
                               main_prefetch_cnt=main_prefetch) if num_workers else None
    if dist.is_available() and dist.is_initialized():
        dist_rs = DistributedReadingService() if uneven == "drop" else KeepUnevenReadingService()
        return SequentialReadingService(dist_rs, mp) if mp else dist_rs
    return mp


class EpochLoader(DataLoader2):
    """A DataLoader2 whose seed advances every epoch.

    DataLoader2 seeded with ``seed(n)`` replays the same shuffles every epoch when the shuffles
    run in worker processes (the main process's seed generator never advances). Here epoch ``e``
    is seeded from ``(seed, e)``: a run is reproducible, and each epoch is shuffled anew.
    ``set_epoch(e)`` picks the epoch explicitly (e.g. when resuming).
    """

    def __init__(self, pipe: IterDataPipe, reading_service: ReadingServiceInterface | None,
                 seed: int | None) -> None:
        super().__init__(pipe, reading_service=reading_service)
        self.base_seed = seed
        self.epoch = 0
        #: what ``on_error="skip"``/``"warn"`` left out (set by :func:`webdataset_loader`).
        self.report: ErrorReport | None = None
        #: per-stage times with ``timings=True`` (set by :func:`webdataset_loader`).
        self.timings: Any = None
        #: what runs before the first epoch (the templates' check, set by
        #: :func:`webdataset_loader`).
        self.before_first: Callable[[], None] | None = None

    def set_epoch(self, epoch: int) -> None:
        """Makes the next iteration epoch ``epoch``."""
        self.epoch = epoch

    def state_dict(self) -> dict[str, Any]:
        """Raises :class:`~aisio.StateMismatchError`: this loader cannot say what the training
        loop received (DataLoader2's own state would replay the epoch on resume)."""
        raise StateMismatchError(_NO_STATE)

    def load_state_dict(self, state: Any) -> None:
        """Raises :class:`~aisio.StateMismatchError` (see :meth:`state_dict`)."""
        raise StateMismatchError(_NO_STATE)

    def __iter__(self) -> Iterator[Any]:
        if self.before_first is not None:
            self.before_first()
        if self.base_seed is not None:
            self.seed(random.Random(f"{self.base_seed}:{self.epoch}").getrandbits(63))
        self.epoch += 1
        skipped_before = len(self.report) if self.report is not None else 0
        yielded = 0
        if self.timings is not None:
            self.timings.reset()  # loader.timings covers this epoch
        for item in super().__iter__():
            yielded += 1
            yield item
        check_epoch(yielded, self.report, skipped_before=skipped_before)


_NO_STATE = (
    "this loader (make_loader, or webdataset_loader with post= or resampled=True) cannot say "
    "which samples the training loop received, so it has no resumable state; for a function "
    "of each sample pass map=f instead of post= (webdataset_loader(..., map=f) resumes "
    "mid-epoch), and checkpoint a resampled run at epoch boundaries (set_epoch)")


def make_loader(pipe: IterDataPipe, *, num_workers: int = 0, seed: int | None = None,
                uneven: Uneven = "drop", worker_prefetch: int = 10,
                main_prefetch: int = 10) -> EpochLoader:
    """Returns a DataLoader2 over ``pipe`` with the right reading service (see above).

    ``seed`` makes every epoch reproducible; each epoch still reshuffles (see EpochLoader).
    It cannot checkpoint mid-epoch (``state_dict()`` raises
    :class:`~aisio.StateMismatchError`): :func:`webdataset_loader` can.
    """
    _install_round_robin_fix()
    return EpochLoader(pipe, reading_service(num_workers, uneven=uneven,
                                             worker_prefetch=worker_prefetch,
                                             main_prefetch=main_prefetch), seed)


def _in_order(loader_options: dict[str, Any]) -> None:
    """Refuses ``in_order=False``: DataLoader2's round robin is always in order."""
    if loader_options.get("in_order", True) is not True:
        raise ConfigError("webdataset_loader() cannot honour in_order=False: DataLoader2 takes "
                          "items from its workers in turn; use aisio.webdataset_dataloader")


@documents_options(extra=[("resampled", RESAMPLED)], where=DATALOADER2)
def webdataset_loader(
    shards: Any,
    *,
    num_workers: int = 0,
    seed: int | None = None,
    uneven: Uneven = "drop",
    samples_per_epoch: int | None = None,
    post: Callable[[IterDataPipe], IterDataPipe] | None = None,
    order: str = "fast",
    streams: int | None = None,
    **pipe_options: Any,
) -> ResumableLoader | EpochLoader:
    """Returns a DataLoader2 pipeline that streams batches from AIStore shards: the one-call
    entry point, resumable mid-epoch (``state_dict()`` / ``load_state_dict()``).

    The pipe is the core's epoch reader as one DataPipe
    (:class:`~aisio.datapipes.pipeline.ReaderPipe`: shard tasks -> load -> parse -> shuffle
    -> decode -> tuples and batches) on one DataLoader2 with the reading service of
    :func:`reading_service`. Its worker processes start with the first epoch and live until
    :meth:`~aisio.ResumableLoader.shutdown`: each epoch, and each resumed state, reaches them
    through an :class:`~aisio.core.epochs.plan.EpochPlan`.
    Shards and samples are shuffled by default (``shuffle_buffer=1000`` per worker: see
    below; ``shuffle_buffer=0`` keeps each shard's order). Needs torchdata < 0.10.

    Args:
        shards: a template (``"ais://b/train-{0000..0099}.tar"``), an object, a bucket or
            prefix (``"ais://b/train/"``, listed once, by rank 0 for every rank), a list of
            them, or SDK objects.
        num_workers: worker processes (0: read in the main process).
        seed: makes the shuffles reproducible (each epoch still reshuffles).
        uneven: with torch.distributed, ``"drop"`` or ``"keep"`` (see :func:`reading_service`).
        samples_per_epoch: with ``resampled=True``, the epoch length per rank, in samples
            (counted before batching): exactly that many on each rank, split across its
            workers (worker ``w`` of ``W`` yields ``N // W``, plus one when ``w < N % W``;
            each worker's last batch may be short).
        post: a function applied to the whole pipe last, after batching (so a map it adds
            receives batches), still inside the workers. For a function of each sample, use
            ``map=`` (see :func:`webdataset_pipe`), which keeps the loader resumable. With
            workers, what it adds must pickle: functions defined with ``def`` at module
            level, not lambdas (checked here, with an error naming the function). With
            ``post`` or ``resampled=True`` the loader is a plain :class:`EpochLoader`, whose
            ``state_dict()`` raises :class:`~aisio.StateMismatchError` (it cannot say what
            the training loop received).
        **pipe_options: the pipeline options below, as for :func:`webdataset_pipe`, and the
            loader options below: ``prefetch_factor`` is the items each worker keeps ready
            (default 10), ``persistent_workers=False`` starts the workers again each epoch.
        order: ``"fast"`` or ``"deterministic"``, as for
            :func:`aisio.webdataset_dataloader` (``batch_size`` then the global batch;
            ``post``, ``resampled``, ``drop_last`` and ``decode_threads`` refused).
        streams: with ``order="deterministic"``, the canonical streams (see
            :func:`aisio.webdataset_dataloader`).

    Example:
        >>> loader = webdataset_loader("ais://b/train-{000..099}.tar", decode="torchrgb",
        ...     tuple_fields=("png", "cls"), batch_size=64, num_workers=2)   # doctest: +SKIP
    """
    deterministic = is_deterministic(order, "webdataset_loader")
    if deterministic and (post is not None or samples_per_epoch is not None):
        raise ConfigError("webdataset_loader(order=\"deterministic\") takes neither post= nor "
                          "samples_per_epoch=: use map= for a function of each sample")
    plain = not deterministic and (post is not None or pipe_options.get("resampled")
                                   or samples_per_epoch is not None)
    if plain:
        refuse_streams(streams, "webdataset_loader")
        pipe_options["samples_per_epoch"] = samples_per_epoch
    setup = loader_setup("webdataset_loader", shards, pipe_options, seed=seed, uneven=uneven,
                         order=order, streams=streams, workers=num_workers,
                         shared=not plain, check=_in_order)
    loader_options = setup.loader_options
    if plain:
        if loader_options:
            raise ConfigError(
                f"webdataset_loader() with post= or resampled=True takes none of "
                f"{sorted(loader_options)}: build the pipe with aisio.webdataset_pipe and pass "
                "it to aisio.make_loader")
        return _plain_loader(setup, num_workers=num_workers, seed=seed, uneven=uneven,
                             post=post)
    # DataLoader2 copies the pipe even in one process: the plan is a file that every copy reads
    # (shared=True above).
    plan = setup.plan
    persistent = loader_options.get("persistent_workers", True)
    prefetch = loader_options.get("prefetch_factor") or 10
    context = loader_options.get("multiprocessing_context")
    pipe = ReaderPipe(setup.reader(), setup.world)  # the core's reader, as one DataPipe
    if setup.ordered is not None:
        # ranks are the order's plan's, not a reading service's
        served = ServedEpochs(pipe, plan, lambda: WorkersReadingService(
            num_workers=num_workers, multiprocessing_context=context,
            worker_prefetch_cnt=prefetch, main_prefetch_cnt=10) if num_workers else None)
    else:
        served = ServedEpochs(pipe, plan, lambda: reading_service(
            num_workers, uneven=uneven, worker_prefetch=prefetch,
            multiprocessing_context=context))
    if num_workers:
        check_picklable(served.pipe, num_workers, "the pipeline")
    _install_round_robin_fix()
    # DataLoader2's distributed reading service stops the ranks together itself (the
    # deterministic order's workers are a rank's own: the loop stops the ranks together)
    return setup.loader(open_epoch=served.open, close=served.close,
                        end_epoch=None if persistent else served.close,
                        collate=batch_collate(setup.spec),
                        stops_together=setup.ordered is None)


class ServedEpochs:
    """The one DataLoader2 that serves every epoch of a one-call loader: made at the first
    epoch, made again after an error shut it down; each epoch (and the state it resumes)
    published on ``plan`` before the DataLoader2's ``iter()``, which its workers then read.

    Args:
        pipe: the pipe it serves.
        plan: where each epoch is published.
        service: makes the reading service of each DataLoader2 made.
    """

    def __init__(self, pipe: IterDataPipe, plan: EpochPlan,
                 service: Callable[[], ReadingServiceInterface | None]) -> None:
        self.pipe = pipe
        self.plan = plan
        self.service = service
        self.current: DataLoader2 | None = None

    def open(self, epoch: int, resume: dict[str, Any] | None) -> DataLoader2:
        """Returns the DataLoader2 for ``epoch`` (continuing ``resume``)."""
        self.plan.publish(epoch, resume)  # before iter(): the workers read it when they start
        if self.current is not None and self.current._terminated:  # an error in the last epoch
            self.close()
        if self.current is None:
            self.current = DataLoader2(self.pipe, reading_service=self.service())
        self.current._reset_iter = True  # a new epoch, also after one left mid-way
        return self.current

    def close(self) -> None:
        """Shuts the DataLoader2 and its workers down (the next epoch makes another)."""
        current, self.current = self.current, None
        if current is not None:
            current.shutdown()


def _plain_loader(setup: LoaderSetup, *, num_workers: int, seed: int | None, uneven: Uneven,
                  post: Callable[[IterDataPipe], IterDataPipe] | None) -> EpochLoader:
    """``webdataset_loader`` with ``post=`` or ``resampled=True``: :func:`make_loader` over the
    pipe (its shards agreed by the ranks like every loader's), with no resumable state."""
    spec = setup.spec
    # samples: counted before batching
    pipe = shards_pipe(setup.shards, spec, resampled=setup.resampled, batched=False)
    if setup.samples_per_epoch is not None:
        pipe = SampleQuota(pipe, setup.samples_per_epoch)  # exactly that many per rank
    pipe = batch_pipe(pipe, spec.batch_size, collate=spec.collate, drop_last=spec.drop_last)
    if post is not None:
        pipe = post(pipe)
    if num_workers:
        check_picklable(pipe, num_workers, "post=" if post is not None else "the pipeline")
    loader = make_loader(pipe, num_workers=num_workers, seed=seed, uneven=uneven)
    loader.report = spec.report
    loader.timings = spec.times
    loader.before_first = setup.checked
    return loader


def _describe(fn: Any) -> str:
    name = getattr(fn, "__qualname__", None) or repr(fn)
    code = getattr(fn, "__code__", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    return f"{name}{where}"


def _unpicklable_callable(pipe: IterDataPipe) -> Any:
    """Returns the first function held by a DataPipe of ``pipe``'s graph that does not pickle
    (held itself, or inside what it holds: the user's ``map=`` in the reader's spec, say)."""
    from torch.utils.data.graph import traverse_dps

    stack = [traverse_dps(pipe)]
    while stack:
        for dp, parents in stack.pop().values():
            for value in vars(dp).values():
                if not isinstance(value, (type, IterDataPipe)):
                    try:
                        pickle.dumps(value)
                    except Exception:
                        culprit = _innermost_unpicklable(value)
                        if callable(culprit):
                            return culprit
            stack.append(parents)
    return None


def _innermost_unpicklable(fn: Any, depth: int = 4) -> Any:
    """Returns the object inside ``fn`` (a stage or a reader holding the user's ``map=``,
    say) that keeps it from pickling, or ``fn`` itself."""
    for value in getattr(fn, "__dict__", {}).values():
        if depth and not isinstance(value, type):
            try:
                pickle.dumps(value)
            except Exception:
                return _innermost_unpicklable(value, depth - 1)
    return fn


def check_picklable(pipe: IterDataPipe, num_workers: int, origin: str = "post=") -> None:
    """Raises a one-line ConfigError naming the function that keeps ``pipe`` from reaching
    worker processes (a lambda or a local function), and the fix.

    Raises:
        ConfigError: ``pipe`` does not pickle.
    """
    try:
        pickle.dumps(pipe)
    except Exception as exc:
        culprit = _unpicklable_callable(pipe)
        what = (f"function {_describe(culprit)} cannot be pickled" if culprit is not None
                else f"it does not pickle ({type(exc).__name__}: {exc})")
        raise ConfigError(
            f"the pipe from {origin} cannot be sent to the {num_workers} worker process(es): "
            f"{what}; define it with `def` at module level (or use functools.partial of one), "
            "or pass num_workers=0"
        ) from exc
