"""PyTorch Lightning (the ``pytorch-lightning`` package): exactly once through its checkpoints.

Example::

    from aisio.trainers.pytorch_lightning import ExactlyOnce

    trainer = pytorch_lightning.Trainer(callbacks=[ExactlyOnce(), ModelCheckpoint(...)])
    trainer.fit(model, datamodule=dm)                       # train_dataloader(): any aisio loader
    trainer.fit(model, datamodule=dm, ckpt_path="last.ckpt")  # after a crash: the rest, once

With the ``lightning`` package (``import lightning``) use :mod:`aisio.trainers.lightning`
instead.
"""

from __future__ import annotations

from aisio.core.faults.errors import LoaderUnavailableError
from aisio.trainers.callback import TrainedBatches

try:
    from pytorch_lightning import Callback
except ImportError as exc:
    raise LoaderUnavailableError(
        "aisio.trainers.pytorch_lightning needs pytorch-lightning: pip install "
        "'aisio[lightning]' (or pip install pytorch-lightning); with the lightning package, import "
        "aisio.trainers.lightning instead") from exc


class ExactlyOnce(TrainedBatches, Callback):
    """The callback that makes Lightning's checkpoints of an aisio loader resume every sample
    exactly once: the batch Lightning fetched ahead is not counted as trained, and under DDP
    the state holds every rank's progress. Add it to ``Trainer(callbacks=[...])``."""


__all__ = ["ExactlyOnce"]
