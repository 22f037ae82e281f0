"""aisio's pipeline on ``torch.utils.data.DataLoader`` and torchdata's ``StatefulDataLoader``.

An adapter over the core's reader (:mod:`aisio.core.pipeline.epoch`): each DataLoader worker
iterates :class:`Reading`, its reader's items of the epoch (deliveries, or the deterministic
order's packs). One DataLoader serves every epoch, its workers persistent
(``persistent_workers=True``): each epoch, and each resumed state, reaches them through an
:class:`~aisio.core.epochs.plan.EpochPlan` published before its ``iter()``. The wrapper
(:class:`~aisio.core.pipeline.loop.ResumableLoader`) unpacks what arrives and can resume
mid-epoch on any number of workers and ranks.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import signal
import threading
import warnings
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from aisio.core.epochs.resample import RESAMPLED, SAMPLES_PER_EPOCH
from aisio.core.faults.errors import ConfigError, LoaderUnavailableError, WorkerDiedError
from aisio.core.pipeline.loader_options import (
    DATALOADER,
    LOADER_OPTIONS,
    STATEFUL,
    workers_only,
)
from aisio.core.pipeline.loop import ResumableLoader
from aisio.core.pipeline.spec import documents_options
from aisio.core.transport.delivery import Delivery
from aisio.runtime.ordered import batch_collate, can_pin
from aisio.runtime.setup import Reader, loader_setup
from aisio.runtime.workers import forking, widen_pipe, worker_died, worker_init_fn


class Reading(IterableDataset):
    """The dataset each DataLoader worker iterates: its reader's items of the published epoch
    (:meth:`~aisio.runtime.setup.LoaderSetup.reader`: worker ``w`` of the DataLoader's ``N``,
    or ``0`` of ``1`` in the training process). The epoch is read when the worker starts it,
    so persistent workers serve every epoch."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        return self.reader.read(info.id, info.num_workers) if info is not None else (
            self.reader.read())


def _as_is(item: Any) -> Any:
    """DataLoader's collate for items that are already batches (picklable, unlike a lambda)."""
    return item


class _Pinned:
    """A delivery on its way through torch's pin-memory step: ``pin_memory()`` pins the
    delivery's value and returns the delivery itself."""

    __slots__ = ("delivery",)

    def __init__(self, delivery: Delivery) -> None:
        self.delivery = delivery

    def pin_memory(self, device: Any = None) -> Delivery:
        from torch.utils.data._utils.pin_memory import pin_memory

        if not self.delivery.empty:
            self.delivery.value = pin_memory(self.delivery.value, device)
        return self.delivery


@contextlib.contextmanager
def _quiet_set_vital() -> Iterator[None]:
    """Silences the one warning StatefulDataLoader's constructor causes and the user did not:
    it calls ``torch.set_vital``, which torch deprecates."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="'set_vital' is deprecated",
                                category=UserWarning)
        yield


def _pinnable(item: Any) -> Any:
    """The collate (in the workers) when memory is pinned: deliveries go through the pin."""
    return _Pinned(item) if isinstance(item, Delivery) else item


def _widen_results(loader: Any) -> None:
    """Widens the pipe of each worker iterator ``loader`` makes (its ``_worker_result_queue``,
    which all its workers write to; see :func:`~aisio.runtime.workers.widen_pipe`), as the
    iterator is made: the first epoch's with persistent workers, else each epoch's. The
    iterator forks the workers inside :func:`~aisio.runtime.workers.forking`."""
    make = loader._get_iterator

    def get_iterator() -> Any:
        with forking():
            iterator = make()
        widen_pipe(getattr(iterator, "_worker_result_queue", None))
        _name_dead_workers(iterator, type(loader).__name__)
        return iterator

    loader._get_iterator = get_iterator


_ITERATORS: weakref.WeakSet[Any] = weakref.WeakSet()  # worker iterators, for the handler


def _worker_error(exc: BaseException) -> BaseException:
    """Returns :class:`~aisio.WorkerDiedError` for torch's ``RuntimeError`` about a worker
    that died unasked ("DataLoader worker (pid N) is killed by signal: Killed.", "... exited
    unexpectedly"), naming the worker of a live iterator of this process; else ``exc``."""
    if (not isinstance(exc, RuntimeError) or isinstance(exc, WorkerDiedError)
            or "DataLoader worker (pid" not in str(exc)):
        return exc
    named = {int(n) for n in re.findall(r"\d+", str(exc))}
    for iterator in list(_ITERATORS):
        for index, worker in enumerate(getattr(iterator, "_workers", ())):
            if worker.pid in named and worker.exitcode is not None:
                return worker_died(iterator.aisio_loader, index, worker)
    return exc


def _typed_sigchld(handler: Any) -> Any:
    def typed(signum: int, frame: Any) -> None:
        try:
            handler(signum, frame)
        except RuntimeError as exc:
            error = _worker_error(exc)
            if error is exc:
                raise
            raise error from exc

    typed.aisio = True  # type: ignore[attr-defined]
    return typed


def _name_dead_workers(iterator: Any, name: str) -> None:
    """Makes a worker that died unasked raise :class:`~aisio.WorkerDiedError` (its index, pid
    and signal) where torch raises a bare ``RuntimeError``: from torch's SIGCHLD handler
    (the training process's main thread, wherever it is) and from its periodic check of the
    workers as the loop waits for a batch (the iterator's ``_next_data``)."""
    next_data = getattr(iterator, "_next_data", None)
    if next_data is None or not hasattr(iterator, "_workers"):
        return
    iterator.aisio_loader = name
    _ITERATORS.add(iterator)
    if threading.current_thread() is threading.main_thread():  # where torch sets its handler
        handler = signal.getsignal(signal.SIGCHLD)
        if callable(handler) and not getattr(handler, "aisio", False):
            signal.signal(signal.SIGCHLD, _typed_sigchld(handler))

    def named() -> Any:
        try:
            return next_data()
        except RuntimeError as exc:
            error = _worker_error(exc)
            if error is exc:
                raise
            raise error from exc

    iterator._next_data = named


def _stop_workers(loader: Any) -> None:
    """Stops a DataLoader's persistent workers now (torch's own bounded shutdown)."""
    iterator = getattr(loader, "_iterator", None)
    loader._iterator = None
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()


def _loader(loader_class: type, where: str, shards: Any, *, num_workers: int,
            seed: int | None, uneven: str, order: str = "fast", streams: int | None = None,
            **options: Any) -> ResumableLoader:
    def check(torch_options: dict[str, Any]) -> None:
        if "in_order" in torch_options and (
                "in_order" not in inspect.signature(loader_class).parameters):
            raise ConfigError(f"{where}() cannot honour in_order=: this "
                              f"{loader_class.__name__} has no such option (torchdata >= "
                              "0.10's has)")
        given = workers_only(torch_options)
        if not num_workers and any(torch_options.get(name) for name in given):
            raise ConfigError(f"{where}(): {', '.join(given)} go(es) with worker processes: "
                              "pass num_workers=N (N >= 1)")

    setup = loader_setup(where, shards, options, seed=seed, uneven=uneven, order=order,
                         streams=streams, workers=num_workers, shared=bool(num_workers),
                         check=check)
    torch_options, plan = setup.loader_options, setup.plan
    # Deliveries are pinned where torch pins (with an accelerator); without one, torch warns.
    pinned = can_pin(torch_options.get("pin_memory"))
    device = torch_options.get("pin_memory_device") or None
    if pinned and setup.ordered is not None:  # the batch is made, and pinned, in the loop
        torch_options["pin_memory"] = False
        torch_options.pop("pin_memory_device", None)
    dataset = Reading(setup.reader())
    # Deliveries are pinned through _Pinned (a resampled epoch's batches pass it by, to be
    # pinned by torch itself).
    collate_fn = _pinnable if pinned and setup.ordered is None else _as_is
    current: list[Any] = []
    with_workers = workers_only(LOADER_OPTIONS)

    def build() -> Any:
        kwargs = {name: value for name, value in torch_options.items()
                  if value is not None or name not in with_workers}
        if num_workers:
            kwargs.setdefault("persistent_workers", True)
            kwargs.setdefault("prefetch_factor", 2)
            # Built now, in the thread that iterates: workers end with the training process.
            kwargs["worker_init_fn"] = worker_init_fn(kwargs.get("worker_init_fn"))
        generator = torch.Generator()  # DataLoader's per-epoch seeds, not the global RNG
        generator.manual_seed(setup.seed)
        with _quiet_set_vital():
            loader = loader_class(dataset, batch_size=None, num_workers=num_workers,
                                  collate_fn=collate_fn, generator=generator, **kwargs)
        if num_workers:
            _widen_results(loader)
        return loader

    def open_epoch(epoch: int, resume: dict[str, Any] | None) -> Any:
        plan.publish(epoch, resume)  # before iter(): the workers read it when they start
        if not current:
            current.append(build())
        return current[0]  # its iter() forks the workers (see _widen_results)

    def close() -> None:
        while current:
            _stop_workers(current.pop())

    return setup.loader(open_epoch=open_epoch, close=close,
                        collate=batch_collate(setup.spec, pin=pinned, device=device))


@documents_options(extra=[("resampled", RESAMPLED), ("samples_per_epoch", SAMPLES_PER_EPOCH)],
                   where=DATALOADER)
def webdataset_dataloader(shards: Any, *, num_workers: int = 0, seed: int | None = None,
                          uneven: str = "drop", order: str = "fast", streams: int | None = None,
                          **options: Any) -> ResumableLoader:
    """Returns aisio's pipeline on ``torch.utils.data.DataLoader``: batches from AIStore
    shards, resumable mid-epoch (``state_dict()`` / ``load_state_dict()``).

    Its worker processes start with the first epoch and live until
    :meth:`~aisio.ResumableLoader.shutdown` (``persistent_workers=False``: each epoch).
    Shards and samples are shuffled by default (``shuffle_buffer=1000`` per worker: see
    below; ``shuffle_buffer=0`` keeps each shard's order).

    Args:
        shards: a template (``"ais://b/train-{0000..0099}.tar"``), an object, a bucket or
            prefix (``"ais://b/train/"``, listed once, by rank 0 for every rank), a list of
            them, or SDK objects.
        num_workers: DataLoader worker processes (0: read in the training process).
        seed: makes the shuffles reproducible (each epoch still reshuffles).
        uneven: with torch.distributed, ``"drop"`` (every rank stops when the first runs out,
            so DDP never hangs) or ``"keep"`` (every sample once; ranks may stop apart).
        order: ``"fast"`` (each worker's own stream: the fastest, exactly once after any
            resume) or ``"deterministic"`` (the batches are a function of the seed, epoch,
            shard list, ``batch_size``, ``streams`` and ``shuffle_buffer`` alone: the same on
            any number of workers and ranks, and after a resume on any other; see
            docs/guide/order.md). There ``batch_size`` is the *global* batch
            (required: each of R ranks yields ``batch_size / R`` samples a step, made in the
            training process), ``shuffle_buffer`` is per stream, and ``drop_last``,
            ``decode_threads`` are refused.
        streams: with ``order="deterministic"``, ``K``, the canonical streams: it must divide
            ``batch_size``, and the number of ranks must divide it (default
            ``gcd(batch_size, 8)``). Up to ``K / R`` workers per rank have work.
        **options: the pipeline options and the loader options below (DataLoader's
            ``prefetch_factor`` defaults to 2 here).

    Example:
        >>> loader = webdataset_dataloader("ais://b/train-{000..099}.tar", decode="torchrgb",
        ...     tuple_fields=("png", "cls"), batch_size=64, num_workers=2)   # doctest: +SKIP
    """
    return _loader(DataLoader, "webdataset_dataloader", shards, num_workers=num_workers,
                   seed=seed, uneven=uneven, order=order, streams=streams, **options)


@documents_options(extra=[("resampled", RESAMPLED), ("samples_per_epoch", SAMPLES_PER_EPOCH)],
                   where=STATEFUL)
def webdataset_stateful_loader(shards: Any, *, num_workers: int = 0, seed: int | None = None,
                               uneven: str = "drop", order: str = "fast",
                               streams: int | None = None, **options: Any
                               ) -> ResumableLoader:
    """Returns aisio's pipeline on torchdata's ``StatefulDataLoader`` (torchdata >= 0.8).

    Takes the options of :func:`webdataset_dataloader` (``in_order`` with torchdata >= 0.10).
    The resume state is aisio's (what the training loop received, across ranks and any new
    topology), not StatefulDataLoader's per-worker snapshot. Shards and samples are shuffled
    by default (``shuffle_buffer=1000`` per worker: see below; ``shuffle_buffer=0`` keeps each
    shard's order).

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
    return _loader(StatefulDataLoader, "webdataset_stateful_loader", shards,
                   num_workers=num_workers, seed=seed, uneven=uneven, order=order,
                   streams=streams, **options)

