"""Train on AIStore shards with PyTorch Lightning; Lightning checkpoints the aisio loader.

The only aisio-specific line is the callback: ``callbacks=[ExactlyOnce(), ...]``. Lightning
saves the loader's ``state_dict()`` in its checkpoints and restores it with
``fit(ckpt_path=...)``; the callback makes that state the batches trained on (Lightning fetches
one ahead) and, under DDP, every rank's.

Run: ``python lightning_digits.py --shards 'ais://digits/digits-{0000..0007}.tar' --dir ckpts
[--devices 2] [--resume]`` (``resume.py`` runs it, kills it and resumes it).
"""

from __future__ import annotations

import os
from typing import Any

import pytorch_lightning as pl
import torch
from common import KeyLog, arguments, classifier, digits_loader, loss_of, maybe_crash
from pytorch_lightning.callbacks import ModelCheckpoint

from aisio.trainers.pytorch_lightning import ExactlyOnce


class Digits(pl.LightningDataModule):
    def __init__(self, args: Any) -> None:
        super().__init__()
        self.args = args

    def train_dataloader(self) -> Any:
        return digits_loader(self.args)


class Classifier(pl.LightningModule):
    def __init__(self, args: Any) -> None:
        super().__init__()
        self.args = args
        self.net = classifier()
        self.keys: KeyLog | None = None

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        keys, images, labels = batch
        if self.keys is None:
            self.keys = KeyLog(self.args.dir, self.global_rank)
        self.keys.step(self.trainer.global_step, keys)
        maybe_crash(self.trainer.global_step, self.args.crash_at)
        return loss_of(self.net, images, labels)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--no-callback", action="store_true",
                        help="leave out aisio's callback (the first checkpoint then raises)")
    args = parser.parse_args()
    callbacks: list[Any] = [ModelCheckpoint(dirpath=args.dir, every_n_train_steps=args.every,
                                            save_last=True, save_top_k=0)]
    if not args.no_callback:
        callbacks.insert(0, ExactlyOnce())
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", devices=args.devices,
                         strategy="ddp" if args.devices > 1 else "auto", callbacks=callbacks,
                         logger=False, enable_progress_bar=False, enable_model_summary=False)
    last = os.path.join(args.dir, "last.ckpt")
    trainer.fit(Classifier(args), datamodule=Digits(args),
                ckpt_path=last if args.resume else None)


if __name__ == "__main__":
    main()
