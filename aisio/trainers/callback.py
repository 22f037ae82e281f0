"""The hooks of aisio's Lightning callback, whichever Lightning package runs them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from aisio.core.epochs.received import FollowsTrainer
from aisio.core.faults.errors import UsageError
from aisio.runtime import fetchers


class TrainedBatches:
    """Lightning hooks that tell aisio's train loaders which batches the trainer trained on.

    Lightning saves a train loader's ``state_dict()`` in its checkpoints and restores it on
    ``fit(ckpt_path=...)``; this makes that state cover the batches trained on (the one
    Lightning fetched ahead comes again after a resume) and, under DDP, every rank's.
    """

    def __init__(self) -> None:
        self._loaders: list[FollowsTrainer] = []

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        fetchers.announce(self)  # (Lightning fetches the first batch before on_train_start)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._follow(trainer)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._follow(trainer)  # (train loaders may be rebuilt between epochs)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        for loader in self._loaders:
            loader.trained()

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        # Not on_train_end: ModelCheckpoint(save_last=True) saves the last checkpoint in its
        # own on_train_end, which Lightning calls after this callback's (checkpoint callbacks
        # go last); the loader must still follow the trainer then.
        for loader in self._loaders:  # a later loop, or another Trainer, is not this one
            loader.follow_trainer(False)
        fetchers.withdraw(self)

    def _follow(self, trainer: Any) -> None:
        loaders = [loader for loader in _leaves(trainer.train_dataloader)
                   if isinstance(loader, FollowsTrainer)]
        if len(loaders) > 1:
            raise UsageError(
                f"this Trainer has {len(loaders)} aisio train loaders; aisio's callback follows "
                "one (Lightning's combined modes draw from several at different paces, so a "
                "step's batch is not one of each): mix the shards into one loader instead")
        self._loaders = loaders
        for loader in loaders:
            loader.follow_trainer()


def _leaves(iterables: Any) -> Iterator[Any]:
    """Yields the loaders in what ``trainer.train_dataloader`` returns (one, or a dict, list
    or tuple of them, nested)."""
    if isinstance(iterables, dict):
        for value in iterables.values():
            yield from _leaves(value)
    elif isinstance(iterables, (list, tuple)):
        for value in iterables:
            yield from _leaves(value)
    elif iterables is not None:
        yield iterables


__all__ = ["TrainedBatches"]
