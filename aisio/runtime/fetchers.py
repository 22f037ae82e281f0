"""The one loop that must not iterate an aisio loader unannounced: Lightning's training loop.

Lightning's Trainer fetches the next batch before it trains on the current one, so a loader
that counts each batch as it yields it would save, at a checkpoint, a batch not trained on
(lost on resume). aisio's callback (:mod:`aisio.trainers`) makes the loader count what the
trainer reports trained; without it the loader refuses to start (:func:`check_iteration`, as
its epoch yields its first batch), rather than run until a checkpoint that would lose a batch.

This looks at who iterates the loader (the frames above its first ``next()``) to refuse a
mistake; what a state covers never depends on it (see
:attr:`~aisio.core.epochs.received.FollowsTrainer.state_scope`).
"""

from __future__ import annotations

import sys
from typing import Any

from aisio.core.epochs.received import FollowsTrainer
from aisio.core.faults.errors import UsageError

_LOOPS = {  # Lightning's training loops, by package: the callback that package needs
    "lightning.pytorch.loops.": "aisio.trainers.lightning",
    "pytorch_lightning.loops.": "aisio.trainers.pytorch_lightning",
}
_DEPTH = 40  # frames looked at above the loader (Lightning's are within ~10)


_ANNOUNCED: list[Any] = []  # aisio's callbacks of the Lightning Trainers fitting here


def announce(callback: Any) -> None:
    """Says that a Lightning Trainer with aisio's callback starts fitting in this process:
    the loaders its training loop iterates follow it from their first batch (Lightning
    fetches it before any hook that could name the loader)."""
    _ANNOUNCED.append(callback)


def withdraw(callback: Any) -> None:
    """Says that the Trainer of ``callback`` is done fitting."""
    if callback in _ANNOUNCED:
        _ANNOUNCED.remove(callback)


def check_iteration(loader: FollowsTrainer) -> None:
    """Raises :class:`~aisio.UsageError` when Lightning's training loop iterates ``loader``
    and no aisio callback was announced (called as the loader's epoch starts); with one, the
    loader follows the trainer from this first batch."""
    if loader.received.following or not any(name in sys.modules for name in
                                             ("lightning", "pytorch_lightning")):
        return
    frame: Any = sys._getframe(1)
    for _ in range(_DEPTH):
        if frame is None:
            return
        module = str(frame.f_globals.get("__name__", ""))
        callback = next((fix for prefix, fix in _LOOPS.items() if module.startswith(prefix)),
                        None)
        if callback is not None and _ANNOUNCED:
            loader.follow_trainer()
            return
        if callback is not None:
            raise UsageError(
                "Lightning's Trainer is iterating an aisio loader that does not know which "
                "batches were trained on: its fetcher runs a batch ahead of the training step, "
                "so a checkpoint would lose that batch on resume; add aisio's callback: "
                f"Trainer(..., callbacks=[{callback}.ExactlyOnce()])")
        frame = frame.f_back
