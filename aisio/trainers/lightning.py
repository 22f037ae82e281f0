"""PyTorch Lightning (the ``lightning`` package): exactly once through its checkpoints.

Example::

    from aisio.trainers.lightning import ExactlyOnce

    trainer = lightning.pytorch.Trainer(callbacks=[ExactlyOnce(), ModelCheckpoint(...)])
    trainer.fit(model, datamodule=dm)                       # train_dataloader(): any aisio loader
    trainer.fit(model, datamodule=dm, ckpt_path="last.ckpt")  # after a crash: the rest, once

With ``pytorch-lightning`` (``import pytorch_lightning``) use
:mod:`aisio.trainers.pytorch_lightning` instead.
"""

from __future__ import annotations

from aisio.core.faults.errors import LoaderUnavailableError
from aisio.trainers.callback import TrainedBatches

try:
    from lightning.pytorch import Callback
except ImportError as exc:
    raise LoaderUnavailableError(
        "aisio.trainers.lightning needs the lightning package (pip install lightning); with "
        "pytorch-lightning (pip install 'aisio[lightning]'), import "
        "aisio.trainers.pytorch_lightning instead") from exc


class ExactlyOnce(TrainedBatches, Callback):
    """The callback that makes Lightning's checkpoints of an aisio loader resume every sample
    exactly once: the batch Lightning fetched ahead is not counted as trained, and under DDP
    the state holds every rank's progress. Add it to ``Trainer(callbacks=[...])``."""


__all__ = ["ExactlyOnce"]
