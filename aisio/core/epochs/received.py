"""What the training loop has received, when a trainer fetches batches ahead of training on them.

A plain loop (``for batch in loader: step(batch); save(loader.state_dict())``) has trained on
every batch the loader yielded, so a loader records each batch as it yields it. A trainer may
fetch ahead: PyTorch Lightning's fetcher holds the next batch before ``training_step`` runs on
the current one (to know when the epoch ends), so at a checkpoint one batch has been received
and not trained on; counted as received, it is lost on resume.

:class:`Received` is the one place that decides when a yielded batch counts. By default it
counts at once. A loader that follows a trainer (:meth:`follow`) keeps each batch's record
pending until the trainer reports it trained (:meth:`trained`); ``state_dict()`` then covers
exactly the batches trained on, and the ones fetched ahead come again after a resume.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from aisio.core.faults.errors import UsageError

Record = Callable[[], None]
"""Records one yielded item (or skipped samples) into a loader's progress."""


class Received:
    """Applies the records of what a loader yielded: at once, or as a trainer trains on them.

    Each epoch's iteration starts a new count (:meth:`start`). Records are applied in the
    order they were added; an item that is not a batch (skipped samples only) is applied in
    turn with the batches around it.
    """

    def __init__(self) -> None:
        #: held while records are applied (and by whoever reads a state beside the loop: the
        #: thread that answers other ranks, :mod:`aisio.runtime.exchange`)
        self.lock = threading.RLock()
        self.following = False
        self._pending: deque[tuple[Record, bool]] = deque()
        self._yielded = 0
        self._counted = 0  # batches whose record was applied
        self._trained = 0

    def follow(self, following: bool = True) -> None:
        """From the next batch on, counts a batch only once :meth:`trained` reports it (with
        ``following=False``: as it is yielded again, after what is pending)."""
        self.following = following

    def start(self) -> None:
        """Starts an epoch's iteration: nothing yielded, nothing trained yet."""
        with self.lock:
            self._pending.clear()
            self._yielded = self._counted = self._trained = 0

    def add(self, record: Record, *, batch: bool = True) -> None:
        """Takes the record of an item about to be yielded (``batch=False``: of samples that
        were skipped, yielded as nothing)."""
        with self.lock:
            self._yielded += batch
            if not self.following and not self._pending:
                record()
                self._counted += batch
                return
            self._pending.append((record, batch))
            self._apply(self._trained if self.following else None)

    def trained(self, batches: int = 1) -> None:
        """Reports that the trainer has trained on ``batches`` more of the epoch's batches.

        Raises:
            UsageError: more batches reported trained than the loader has yielded.
        """
        if self._trained + batches > self._yielded:
            raise UsageError(
                f"the trainer reported {self._trained + batches} batches trained this epoch, but "
                f"the loader has yielded {self._yielded}: report each batch once, after its "
                "step, from the loop that iterates this loader")
        with self.lock:
            self._trained += batches
            self._apply(self._trained)

    def flush(self) -> None:
        """Applies every pending record (the epoch is over, or the loader stops following)."""
        with self.lock:
            self._apply(None)

    @property
    def counted(self) -> int:
        """How many of the epoch's batches the records applied cover."""
        return self._counted

    @property
    def ahead(self) -> int:
        """How many batches the trainer holds that it has not trained on yet."""
        return self._yielded - self._counted

    def _apply(self, upto: int | None) -> None:
        """Applies pending records in order until ``upto`` batches are counted (None: all);
        records of skipped samples that follow the last counted batch are applied too."""
        pending = self._pending
        while pending:
            record, batch = pending[0]
            if batch and upto is not None and self._counted >= upto:
                break
            pending.popleft()
            record()
            self._counted += batch


STATE_SCOPES = ("job", "rank")
"""What a loader's ``state_dict()`` covers (:attr:`FollowsTrainer.state_scope`)."""


class FollowsTrainer:
    """What a loader offers the trainers that checkpoint it (``aisio.trainers``): the state of
    what the trainer trained on, of every rank of the job."""

    received: Received
    _scope = "job"

    #: ``(loader) -> every rank's state merged, at this rank's position``, over the ranks of
    #: ``torch.distributed``, which the core does not import: passed in by the set-up that
    #: builds the loader (:class:`aisio.runtime.setup.LoaderSetup`); None: this process's state.
    gather_over_ranks: Callable[[Any], dict[str, Any]] | None = None

    #: Called with the loader as its epoch starts yielding: raises
    #: :class:`~aisio.core.faults.errors.UsageError` where a trainer that fetches ahead iterates
    #: a loader that does not follow it (:func:`aisio.runtime.fetchers.check_iteration`, passed
    #: in by the set-up); None: no check.
    check_iteration: Callable[[FollowsTrainer], None] | None = None

    @property
    def state_scope(self) -> str:
        """What :meth:`state_dict` covers: ``"job"`` (the default: every rank's progress
        merged, so the state one rank saves resumes the whole job; under several ranks each
        rank calls ``state_dict()`` at the same step, as Lightning's, Fabric's and
        accelerate's checkpoints do) or ``"rank"`` (this process's own, as
        :meth:`local_state_dict`; merge the ranks' with :func:`aisio.merge_states`).
        It depends on nothing but this setting: not on who calls, nor how the loader is
        wrapped."""
        return self._scope

    @state_scope.setter
    def state_scope(self, scope: str) -> None:
        if scope not in STATE_SCOPES:
            raise UsageError(f"state_scope={scope!r} must be one of {STATE_SCOPES}: \"job\" "
                             "(every rank's progress) or \"rank\" (this process's)")
        self._scope = scope

    def follow_trainer(self, following: bool = True) -> None:
        """Makes ``state_dict()`` cover the batches the trainer reports with :meth:`trained`,
        not the ones it fetched ahead of them (``False``: the trainer is done with it)."""
        self.received.follow(following)

    def trained(self, batches: int = 1) -> None:
        """Reports that the trainer finished training on ``batches`` more batches of this
        epoch (see :meth:`follow_trainer`)."""
        self.received.trained(batches)

    def local_state_dict(self) -> dict[str, Any]:
        """Returns this process's state, never gathered over the ranks (each loader's own)."""
        raise NotImplementedError

    def position(self) -> tuple[int, int]:
        """Returns ``(epoch, batches)``: the epoch this rank's state is in and how many of its
        batches it covers (every rank's is the same at a step of the job)."""
        raise NotImplementedError

    def position_and_state(self) -> tuple[tuple[int, int], dict[str, Any]]:
        """Returns :meth:`position` and :meth:`local_state_dict`, of one moment (any thread)."""
        with self.received.lock:
            return self.position(), self.local_state_dict()

    def state_dict(self) -> dict[str, Any]:
        """Returns what the training loop received (or trained on, under a trainer that
        reports it), as a small JSON-able dict: with :attr:`state_scope` ``"job"`` (the
        default) every rank's progress merged, at the step every rank calls it; with
        ``"rank"``, :meth:`local_state_dict`.

        Raises:
            StateMismatchError: the loader cannot be resumed (``post=``, resampled shards).
            UsageError: not every rank asks at the same step (see :func:`aisio.gather_state`).
        """
        if self._scope == "rank" or self.gather_over_ranks is None:
            return self.local_state_dict()
        return self.gather_over_ranks(self)


__all__ = ["STATE_SCOPES", "FollowsTrainer", "Received", "Record"]
