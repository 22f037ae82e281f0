"""The training-side loop every aisio loader shares: epochs, what was received, resume.

Every front end (DataLoader2, DataLoader, StatefulDataLoader, torchdata.nodes; in either order)
ends in one :class:`ResumableLoader`. It is built over two things:

- the front end's plumbing, one function ``open_epoch(epoch, resume)`` that publishes the epoch
  to its readers and returns the iterable of what they send (and ``close``, which stops them);
- an :class:`EpochOrder`, the one place an order differs: how an epoch is recorded and how
  what arrives becomes batches. :class:`FastOrder` (``order="fast"``, and resampled epochs)
  records each :class:`~aisio.core.transport.delivery.Delivery`'s positions in an
  :class:`~aisio.core.epochs.progress.EpochProgress`; the deterministic order's
  (:class:`aisio.core.order.loader.DeterministicOrder`) puts the readers' packs back in order.

The loop yields each batch in the training process and records it (:class:`Received`): its
``state_dict()`` describes exactly what the training loop received.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from typing import Any, Protocol

from aisio.core.epochs.progress import EpochProgress, check_state, merge_states
from aisio.core.epochs.received import FollowsTrainer, Received, Record
from aisio.core.epochs.split import Deal
from aisio.core.faults.errors import StateMismatchError, WorkerTraceback
from aisio.core.faults.policy import check_epoch
from aisio.core.faults.report import ErrorReport
from aisio.core.store.sources import ObjectRef
from aisio.core.transport import ring
from aisio.core.transport.delivery import Delivery, Failure, give_warnings

OpenEpoch = Callable[[int, "dict[str, Any] | None"], Iterable[Any]]

NOTHING: Any = object()
"""What an :class:`Epoch` gives in place of a batch for items that hold none (only skipped
samples, a round without this rank's samples): their record is applied, nothing is yielded."""


class Epoch(Protocol):
    """One epoch of an :class:`EpochOrder`, as the loop runs it."""

    #: the state the epoch resumes (None: from its start), as ``open_epoch`` is given it
    resume: dict[str, Any] | None

    def batches(self, items: Iterable[Any]) -> Iterator[tuple[Any, Record]]:
        """Yields ``(batch, record)`` for what the readers send (``items``): the batch to
        yield (or :data:`NOTHING`, or a :class:`Failure` to raise) and what records it."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Returns what the records applied so far describe."""
        ...

    def held(self) -> int | None:
        """Returns how many samples this rank held past a stop of ``uneven="drop"`` (reading
        the rest of what arrives), or None when the order does not count them."""
        ...


class EpochOrder(Protocol):
    """What differs between the orders of a :class:`ResumableLoader`: its backend."""

    @property
    def shards(self) -> Sequence[ObjectRef]:
        """The loader's shard list."""
        ...

    @property
    def seed(self) -> int:
        """The run's seed (the same on every rank)."""
        ...

    @property
    def resumable(self) -> bool:
        """False when nothing says which samples the loop received (``state_dict`` raises)."""
        ...

    def start(self, epoch: int, resume: dict[str, Any] | None) -> Epoch:
        """Returns epoch ``epoch``, continuing ``resume`` when it is a state of that epoch."""
        ...

    def state_at(self, epoch: int, loaded: dict[str, Any] | None) -> dict[str, Any]:
        """Returns the state before epoch ``epoch`` starts: ``loaded`` (a checked state of it,
        not started yet) as this process's, else the epoch's start."""
        ...

    def checked(self, state: dict[str, Any] | Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Returns ``state`` (or every rank's, merged) when this order can continue it.

        Raises:
            StateMismatchError: it cannot (another run, order or shard list; corrupt).
        """
        ...

    def describe(self) -> str:
        """Returns what ``repr()`` adds after the shards, epoch and seed."""
        ...


class ResumableLoader(FollowsTrainer):
    """Iterates epochs of a loader and keeps what the training loop received, to resume.

    Each ``iter()`` is one epoch (the next one, or the one a loaded state is in). Every epoch
    is reshuffled from ``(seed, epoch)``. Every one-call loader returns one, in either order.

    Example (any aisio loader)::

        loader = aisio.webdataset_loader("ais://b/train-{0000..0099}.tar", batch_size=64,
                                         num_workers=2, seed=0)
        for step, (images, labels) in enumerate(loader):
            ...
            if step % 100 == 0:
                torch.save({"model": model.state_dict(), "data": loader.state_dict()}, path)
        # after a crash, in a new process (any number of workers or ranks):
        loader.load_state_dict(torch.load(path)["data"])
        for images, labels in loader:   # the rest of the epoch, each sample once
            ...

    Args:
        order: how epochs are recorded and batches made (:class:`FastOrder`, or the
            deterministic order's).
        open_epoch: ``(epoch, resume_state or None) -> iterable`` of what the readers send.
        close: stops the loader's worker processes, if any (:meth:`close`, :meth:`shutdown`);
            workers otherwise live across epochs.
        end_epoch: what ends with each epoch (e.g. workers that do not outlive it), if any.
        report: the skip report (``on_error="skip"``/``"warn"``).
        sync: with ``uneven="drop"`` across ranks: ``sync(have_item) -> all ranks have one``.
        timings: the pipeline's :class:`~aisio.core.system.timing.StageTimes` (``timings=True``).
    """

    def __init__(self, order: EpochOrder, *, open_epoch: OpenEpoch,
                 close: Callable[[], None] | None = None, report: ErrorReport | None = None,
                 sync: Callable[[bool], bool] | None = None, timings: Any = None,
                 end_epoch: Callable[[], None] | None = None) -> None:
        #: the order's backend (:class:`EpochOrder`)
        self.order = order
        self.shards = list(order.shards)
        self.seed = order.seed
        self.epoch = 0
        self.report = report
        #: per-stage times with ``timings=True`` (a :class:`~aisio.core.system.timing.StageTimes`),
        #: of the current (or last) epoch: each epoch resets them as it starts
        self.timings = timings
        self.resumable = order.resumable
        self._open_epoch = open_epoch
        self._close = close
        self._end_epoch = end_epoch
        self._sync = sync
        self._resume: dict[str, Any] | None = None
        self._running: Epoch | None = None
        #: what counts as received: each batch as it is yielded, or as a trainer trains on it
        self.received = Received()
        #: the underlying loader (a DataLoader2, DataLoader or nodes Loader), kept across epochs
        self.current: Any = None
        #: called with ``(epoch, state)`` when this process has received all of its share of
        #: an epoch (its final state of that epoch); see :func:`aisio.gather_state`
        self.on_finish: Callable[[int, dict[str, Any]], None] | None = None

    def set_epoch(self, epoch: int) -> None:
        """Makes the next iteration epoch ``epoch`` (from its start)."""
        with self.received.lock:
            self.epoch, self._resume, self._running = epoch, None, None

    def __iter__(self) -> Iterator[Any]:
        if self.check_iteration is not None:  # a trainer that fetches ahead, unfollowed
            self.check_iteration(self)
        epoch = self.epoch
        running = self.order.start(epoch, self._resume)
        received = self.received
        with received.lock:
            self._resume, self._running = None, running
            received.start()
        skipped_before = len(self.report) if self.report is not None else 0
        yielded = 0
        if self.timings is not None:
            self.timings.reset()  # loader.timings covers this epoch
        self.current = self._open_epoch(epoch, running.resume)
        batches = running.batches(self.current)
        finished = False
        try:
            while True:
                batch, record = next(batches, _END)
                while batch is NOTHING:  # only skipped samples, or none of this rank's
                    received.add(record, batch=False)
                    batch, record = next(batches, _END)
                if self._sync is not None and not self._sync(batch is not _DONE):
                    _count_dropped(self._sync, epoch, running)
                    break  # uneven="drop": a rank ran out, every rank stops here
                if batch is _DONE:
                    finished = True
                    break
                if type(batch) is Failure:  # from a worker, with its type, message, fields
                    raise_failure(batch)
                received.add(record)
                yielded += 1
                yield batch
        finally:
            if self._end_epoch is not None:
                self._end_epoch()
        received.flush()  # the epoch is over: a trainer has what it fetched
        if finished and self.on_finish is not None:
            self.on_finish(epoch, running.state_dict())
        with received.lock:
            self.epoch, self._running = epoch + 1, None
        # Nothing yielded is fine for a resumed epoch that had nothing left; an epoch whose
        # every shard was skipped raises.
        check_epoch(yielded, self.report, skipped_before=skipped_before)

    def local_state_dict(self) -> dict[str, Any]:
        """Returns what this process's training loop has received (or trained on, under a
        trainer integration), never gathered over the ranks: mid-epoch, the epoch's progress;
        between epochs, the start of the next one (or the state loaded). With several ranks
        each rank's state covers its own shards or streams (see :func:`aisio.merge_states`,
        or :func:`aisio.gather_state`).

        Raises:
            StateMismatchError: the loader cannot be resumed (``post=``, resampled shards).
        """
        if not self.resumable:
            raise StateMismatchError(
                "this loader cannot say what the training loop received (resampled=True or "
                "post= hides the samples' positions); drop them to checkpoint mid-epoch, or "
                "save the epoch number and call set_epoch(epoch) after a restart")
        if self._running is not None:
            return self._running.state_dict()
        return self.order.state_at(self.epoch, self._resume)

    def position(self) -> tuple[int, int]:
        """Returns ``(epoch, batches)`` of :meth:`local_state_dict` (see
        :meth:`~aisio.core.epochs.received.FollowsTrainer.position`)."""
        return self.epoch, self.received.counted if self._running is not None else 0

    def load_state_dict(self, state: dict[str, Any] | Sequence[dict[str, Any]]) -> None:
        """Makes the next iteration continue the saved epoch: every sample not yet received,
        once, split across this loader's workers and ranks (whatever their number was); in
        the deterministic order, exactly the batches the uninterrupted run would have
        yielded next.

        Args:
            state: a state from :meth:`state_dict`, or the list of every rank's state.

        Raises:
            StateMismatchError: the state is of another run, order or shard list, or corrupt.
        """
        state = self.order.checked(state)
        with self.received.lock:
            self.epoch, self._resume, self._running = int(state["epoch"]), state, None

    def close(self) -> None:
        """Stops the loader's worker processes (the next epoch starts them again)."""
        if self._close is not None:
            self._close()
        ring.forget()  # unmap the slots of workers that may be gone

    def shutdown(self) -> None:
        """Same as :meth:`close` (the DataLoader2 spelling)."""
        self.close()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({len(self.shards)} shards, epoch {self.epoch}, "
                f"seed {self.seed}{self.order.describe()})")


def raise_failure(failure: Failure) -> None:
    """Raises the error a reader sent as a :class:`Failure`, its traceback (from a worker
    process) as its cause."""
    if failure.traceback is None:
        raise failure.error
    raise failure.error from WorkerTraceback(failure.traceback)


class FastOrder:
    """``order="fast"``: each reader's own stream, recorded by the positions each delivery
    carries (an :class:`~aisio.core.epochs.progress.EpochProgress`), so that a resume reads
    every sample not received exactly once. With ``resumable=False`` (resampled epochs) the
    items are batches without positions.

    Args:
        shards: the loader's shard list.
        seed: the run's seed (the same on every rank).
        world: the ranks the epoch is dealt to (:mod:`aisio.core.epochs.split`), and
        shuffle_shards: whether it deals them shuffled, as the readers do: under several ranks
            the state names the rank of each shard in progress.
        resumable: False when the items carry no positions.
    """

    def __init__(self, shards: Sequence[ObjectRef], *, seed: int, world: int = 1,
                 shuffle_shards: bool = True, resumable: bool = True) -> None:
        self.shards = list(shards)
        self.seed = seed
        self.world = world
        self.shuffle_shards = shuffle_shards
        self.resumable = resumable

    def start(self, epoch: int, resume: dict[str, Any] | None) -> _FastEpoch:
        if resume is not None and resume["epoch"] == epoch:
            progress = EpochProgress.from_state(resume, self.shards)
        else:
            resume = None
            progress = EpochProgress(self.shards, self.seed, epoch)
        if self.world > 1:  # which rank reads each shard, as the readers deal them
            progress.owners = Deal(self.shards, self.seed, epoch, shuffle=self.shuffle_shards,
                                   world=self.world,
                                   resume=progress if resume is not None else None)
            progress.world = self.world
        return _FastEpoch(progress, resume)

    def state_at(self, epoch: int, loaded: dict[str, Any] | None) -> dict[str, Any]:
        if loaded is not None:  # loaded, not started: the same progress, as a state
            return EpochProgress.from_state(loaded, self.shards).state_dict()
        return EpochProgress(self.shards, self.seed, epoch).state_dict()

    def checked(self, state: dict[str, Any] | Sequence[dict[str, Any]]) -> dict[str, Any]:
        if not isinstance(state, dict):
            state = merge_states(list(state))
        check_state(state, self.shards)
        return state

    def describe(self) -> str:
        return ""


class _FastEpoch:
    """An epoch of :class:`FastOrder`: deliveries unpacked and their positions recorded."""

    def __init__(self, progress: EpochProgress, resume: dict[str, Any] | None) -> None:
        self.progress = progress
        self.resume = resume
        self._items: Iterator[Any] = iter(())
        self._held: Any = _DONE

    def batches(self, items: Iterable[Any]) -> Iterator[tuple[Any, Record]]:
        record = self.progress.record
        self._items = iter(items)
        for item in self._items:
            self._held = item
            give_warnings(item)
            if isinstance(item, Delivery):
                note = partial(record, item.positions, item.versions)
                # out of shared memory, if it came that way
                yield (NOTHING if item.empty else item.unpack()), note
            else:  # a Failure, or a value without positions (a loader that cannot resume)
                yield item, _nothing
        self._held = _DONE

    def state_dict(self) -> dict[str, Any]:
        return self.progress.state_dict()

    def held(self) -> int | None:
        if self._held is _DONE:
            return 0
        left = 0
        try:
            for held in itertools.chain([self._held], self._items):
                if isinstance(held, Delivery) and not held.empty:
                    left += len(held.positions)
        except Exception:
            pass
        return left


_DONE: Any = object()
_END: tuple[Any, Record] = (_DONE, lambda: None)  # what the loop reads when the batches end


def _count_dropped(sync: Any, epoch: int, running: Epoch) -> None:
    """Tells the ranks' sync how many samples this rank held past a stop of
    ``uneven="drop"`` (every rank calls it at the same stop: a collective, whatever the
    reading raised), where the order counts them."""
    dropped = getattr(sync, "dropped", None)
    if dropped is None:
        return
    left = running.held()
    if left is not None:
        dropped(epoch, left)


def _nothing() -> None:
    """The record of an item without positions."""


__all__ = ["NOTHING", "Epoch", "EpochOrder", "FastOrder", "OpenEpoch", "ResumableLoader",
           "raise_failure"]
