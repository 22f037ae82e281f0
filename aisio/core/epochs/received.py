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

import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
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
        self._pending.clear()
        self._yielded = self._counted = self._trained = 0

    def add(self, record: Record, *, batch: bool = True) -> None:
        """Takes the record of an item about to be yielded (``batch=False``: of samples that
        were skipped, yielded as nothing)."""
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
        self._trained += batches
        self._apply(self._trained)

    def flush(self) -> None:
        """Applies every pending record (the epoch is over, or the loader stops following)."""
        self._apply(None)

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


class FollowsTrainer:
    """What a loader offers the trainers that checkpoint it (``aisio.trainers``): the state of
    what the trainer trained on, of every rank where the trainer asks every rank at once."""

    received: Received

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

    def state_dict(self) -> dict[str, Any]:  # pragma: no mutate block (reads its caller)
        """Returns what the training loop received, as a small JSON-able dict (see
        :meth:`local_state_dict`). Asked by a trainer that checkpoints on every rank at once
        (:data:`TRAINERS`): every rank's progress merged, of the batches it trained on.

        Raises:
            StateMismatchError: the loader cannot be resumed (``post=``, resampled shards).
            UsageError: a trainer that fetches ahead asks, but the loader does not follow it.
        """
        state = self.local_state_dict()
        caller = sys._getframe(1).f_globals.get("__name__", "")
        trainer = next((t for prefix, t in TRAINERS.items()
                        if caller == prefix or str(caller).startswith(prefix + ".")), None)
        if trainer is None:
            return state
        if trainer.fix and not self.received.following:
            raise UsageError(
                f"{trainer.name} is checkpointing an aisio loader that does not know which "
                "batches were trained on: its fetcher runs a batch ahead of the training "
                "step, so this state would lose that batch on resume; add aisio's "
                f"callback: {trainer.fix}")
        return gather_over_ranks(self, state) if gather_over_ranks is not None else state


@dataclass(frozen=True)
class Trainer:
    """A trainer that calls a loader's ``state_dict()`` on every rank at once (and keeps rank
    0's); ``fix``: the line that makes aisio follow it, where it fetches batches ahead."""

    name: str
    fix: str = ""


_LIGHTNING = "Trainer(..., callbacks=[aisio.trainers.lightning.ExactlyOnce()])"
TRAINERS: dict[str, Trainer] = {
    "lightning.pytorch": Trainer("Lightning", _LIGHTNING),
    "pytorch_lightning": Trainer(
        "Lightning", _LIGHTNING.replace(".lightning.", ".pytorch_lightning.")),
    "lightning.fabric": Trainer("Fabric"),
    "lightning_fabric": Trainer("Fabric"),
    "accelerate": Trainer("accelerate"),
}
"""The modules whose code calls a loader's ``state_dict()`` for a trainer's checkpoint (by
name prefix): Lightning's ``CombinedLoader``, Fabric's strategies, accelerate's
``save_state``. Each calls it on every rank and saves rank 0's, so the state must hold every
rank's progress."""

gather_over_ranks: Callable[[Any, dict[str, Any]], dict[str, Any]] | None = None
"""``(loader, this rank's state) -> every rank's state merged``: a collective over the ranks
of ``torch.distributed``, plugged in by :mod:`aisio.runtime.dist` (the core imports no torch);
None, or the state as it is, in one process."""


__all__ = ["TRAINERS", "FollowsTrainer", "Received", "Record", "Trainer"]
