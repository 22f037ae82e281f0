"""The training-side loop every aisio loader shares: epochs, what was received, resume.

A front end (DataLoader2, DataLoader, StatefulDataLoader, torchdata.nodes) gives
:class:`ResumableLoader` one function, ``open_epoch(epoch, resume)``, that returns an iterator
of :class:`~aisio.core.transport.delivery.Delivery` items for that epoch (built over the epoch's
:class:`~aisio.core.epochs.progress.ShardTask` list, resumed from ``resume`` when it is a state of
that
epoch). The loop unpacks each delivery in the training process, records its positions, and
yields the value: ``state_dict()`` then describes exactly what the training loop received.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from typing import Any

from aisio.core.epochs.progress import EpochProgress, check_state, merge_states
from aisio.core.epochs.received import FollowsTrainer, Received
from aisio.core.epochs.split import Deal
from aisio.core.faults.errors import StateMismatchError, WorkerTraceback
from aisio.core.faults.policy import check_epoch
from aisio.core.faults.report import ErrorReport
from aisio.core.store.sources import ObjectRef
from aisio.core.transport import ring
from aisio.core.transport.delivery import Delivery, Failure, give_warnings

OpenEpoch = Callable[[int, "dict[str, Any] | None"], Iterable[Any]]


class ResumableLoader(FollowsTrainer):
    """Iterates epochs of a loader and keeps what the training loop received, to resume.

    Each ``iter()`` is one epoch (the next one, or the one a loaded state is in). Every epoch
    is reshuffled from ``(seed, epoch)``.

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
        shards: the loader's shard list.
        seed: the run's seed (the same on every rank).
        open_epoch: ``(epoch, resume_state or None) -> iterable of deliveries``.
        close: stops the loader's worker processes, if any (:meth:`close`, :meth:`shutdown`);
            workers otherwise live across epochs.
        end_epoch: what ends with each epoch (e.g. workers that do not outlive it), if any.
        report: the skip report (``on_error="skip"``/``"warn"``).
        sync: with ``uneven="drop"`` across ranks: ``sync(have_item) -> all ranks have one``.
        resumable: False when the items carry no positions (then ``state_dict`` raises).
        timings: the pipeline's :class:`~aisio.core.system.timing.StageTimes` (``timings=True``).
        world: the ranks the epoch is dealt to (:mod:`aisio.core.epochs.split`), and
        shuffle_shards: whether it deals them shuffled, as the readers do: under several ranks
            the state names the rank of each shard in progress.
    """

    def __init__(self, shards: Sequence[ObjectRef], *, seed: int, open_epoch: OpenEpoch,
                 close: Callable[[], None] | None = None, report: ErrorReport | None = None,
                 sync: Callable[[bool], bool] | None = None, resumable: bool = True,
                 timings: Any = None, end_epoch: Callable[[], None] | None = None,
                 world: int = 1, shuffle_shards: bool = True) -> None:
        self.shards = list(shards)
        self.world = world
        self.shuffle_shards = shuffle_shards
        self.seed = seed
        self.epoch = 0
        self.report = report
        #: per-stage times with ``timings=True`` (a :class:`~aisio.core.system.timing.StageTimes`),
        #: of the current (or last) epoch: each epoch resets them as it starts
        self.timings = timings
        self.resumable = resumable
        self._open_epoch = open_epoch
        self._close = close
        self._end_epoch = end_epoch
        self._sync = sync
        self._resume: dict[str, Any] | None = None
        self._progress: EpochProgress | None = None
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
            self.epoch, self._resume, self._progress = epoch, None, None

    def __iter__(self) -> Iterator[Any]:
        if self.check_iteration is not None:  # a trainer that fetches ahead, unfollowed
            self.check_iteration(self)
        epoch, resume = self.epoch, self._resume
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
        received = self.received
        with received.lock:
            self._resume, self._progress = None, progress
            received.start()
        skipped_before = len(self.report) if self.report is not None else 0
        yielded = 0
        if self.timings is not None:
            self.timings.reset()  # loader.timings covers this epoch
        self.current = self._open_epoch(epoch, resume)
        items = iter(self.current)
        finished = False
        try:
            while True:
                item = next(items, _END)
                give_warnings(item)
                while isinstance(item, Delivery) and item.empty:  # only skipped samples
                    received.add(partial(progress.record, item.positions, item.versions),
                                 batch=False)
                    item = next(items, _END)
                    give_warnings(item)
                if self._sync is not None and not self._sync(item is not _END):
                    _count_dropped(self._sync, epoch, item, items)
                    break  # uneven="drop": a rank ran out, every rank stops here
                if item is _END:
                    finished = True
                    break
                if isinstance(item, Failure):  # from a worker, with its type, message, fields
                    if item.traceback is None:
                        raise item.error
                    raise item.error from WorkerTraceback(item.traceback)
                if isinstance(item, Delivery):
                    received.add(partial(progress.record, item.positions, item.versions))
                    item = item.unpack()  # out of shared memory, if it came that way
                else:
                    received.add(_nothing)  # no positions (a loader that cannot resume)
                yielded += 1
                yield item
        finally:
            if self._end_epoch is not None:
                self._end_epoch()
        received.flush()  # the epoch is over: a trainer has what it fetched
        if finished and self.on_finish is not None:
            self.on_finish(epoch, progress.state_dict())
        with received.lock:
            self.epoch, self._progress = epoch + 1, None
        # Nothing yielded is fine for a resumed epoch that had nothing left; an epoch whose
        # every shard was skipped raises.
        check_epoch(yielded, self.report, skipped_before=skipped_before)

    def local_state_dict(self) -> dict[str, Any]:
        """Returns what this process's training loop has received (or trained on, under a
        trainer integration), never gathered over the ranks: mid-epoch, the epoch's progress;
        between epochs, the start of the next one. With several ranks each rank's state covers
        its own shards (see :func:`aisio.merge_states`, or :func:`aisio.gather_state`).

        Raises:
            StateMismatchError: the loader cannot be resumed (``post=``, resampled shards).
        """
        if not self.resumable:
            raise StateMismatchError(
                "this loader cannot say what the training loop received (resampled=True or "
                "post= hides the samples' positions); drop them to checkpoint mid-epoch, or "
                "save the epoch number and call set_epoch(epoch) after a restart")
        if self._progress is not None:
            return self._progress.state_dict()
        if self._resume is not None:  # loaded, not started: the same progress, as a state
            return EpochProgress.from_state(self._resume, self.shards).state_dict()
        return EpochProgress(self.shards, self.seed, self.epoch).state_dict()

    def position(self) -> tuple[int, int]:
        """Returns ``(epoch, batches)`` of :meth:`local_state_dict` (see
        :meth:`~aisio.core.epochs.received.FollowsTrainer.position`)."""
        if self._progress is not None:
            return self._progress.epoch, self.received.counted
        return self.epoch, 0

    def load_state_dict(self, state: dict[str, Any] | Sequence[dict[str, Any]]) -> None:
        """Makes the next iteration continue the saved epoch: every sample not yet received,
        once, split across this loader's workers and ranks (whatever their number was).

        Args:
            state: a state from :meth:`state_dict`, or the list of every rank's state.

        Raises:
            StateMismatchError: the state is from another shard list or corrupt.
        """
        if not isinstance(state, dict):
            state = merge_states(list(state))
        check_state(state, self.shards)
        with self.received.lock:
            self.epoch, self._resume, self._progress = int(state["epoch"]), state, None

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
                f"seed {self.seed})")


_END = object()


def _count_dropped(sync: Any, epoch: int, item: Any, items: Iterator[Any]) -> None:
    """Reads what this rank holds past a stop of ``uneven="drop"`` (the item it had and the
    rest of its share) and tells the ranks' sync how many samples that is (every rank calls
    it at the same stop: a collective, whatever the reading raised)."""
    dropped = getattr(sync, "dropped", None)
    if dropped is None:
        return
    left = 0
    if item is not _END:
        try:
            for held in itertools.chain([item], items):
                if isinstance(held, Delivery) and not held.empty:
                    left += len(held.positions)
        except Exception:
            pass
    dropped(epoch, left)


def _nothing() -> None:
    """The record of an item without positions."""
