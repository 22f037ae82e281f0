"""What the trainer examples share: the digits loader, a log of the keys each step trained on,
and the crash that the resume driver (``resume.py``) asks for.

The loader is an ordinary aisio one-call loader; nothing here is specific to a trainer.
"""

from __future__ import annotations

import argparse
import os
import signal
from typing import Any

import torch
from torch import nn

import aisio

LOADERS = {
    "dataloader": aisio.webdataset_dataloader,  # torch.utils.data.DataLoader
    "stateful": aisio.webdataset_stateful_loader,  # torchdata's StatefulDataLoader
    "nodes": aisio.webdataset_node_loader,  # torchdata.nodes (torchdata >= 0.10)
}


def arguments(description: str) -> argparse.ArgumentParser:
    """The options every trainer example takes (the resume driver passes them)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--shards", required=True, help="e.g. ais://digits/digits-{0000..0007}.tar")
    parser.add_argument("--loader", choices=sorted(LOADERS), default="dataloader")
    parser.add_argument("--order", choices=["fast", "deterministic"], default="fast")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=8,
                        help="per rank (order=fast) or global (order=deterministic)")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--shuffle-buffer", type=int, default=64, help="samples, per reader")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--every", type=int, default=4, help="checkpoint every N steps")
    parser.add_argument("--dir", required=True, help="checkpoints and key logs")
    parser.add_argument("--resume", action="store_true", help="resume from the last checkpoint")
    parser.add_argument("--crash-at", type=int, default=None,
                        help="SIGKILL the job (every process of it) at this global step")
    return parser


def digits_loader(args: argparse.Namespace) -> Any:
    """Returns the aisio loader of the digits shards: (keys, images, labels) batches."""
    options: dict[str, Any] = dict(decode="torchl", tuple_fields=("__key__", "png", "cls"),
                                   batch_size=args.batch_size, num_workers=args.workers,
                                   shuffle_buffer=args.shuffle_buffer, seed=args.seed)
    if args.order == "deterministic":
        options.update(order="deterministic", streams=4)
    return LOADERS[args.loader](args.shards, **options)


def classifier() -> nn.Module:
    """A small classifier of 8 x 8 digits."""
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


class KeyLog:
    """Appends ``step key`` for every sample a step trains on to ``DIR/keys-rank<R>.txt``,
    written before the step (a SIGKILL loses nothing already logged)."""

    def __init__(self, directory: str, rank: int) -> None:
        self.file = open(os.path.join(directory, f"keys-rank{rank}.txt"), "a")  # noqa: SIM115

    def step(self, step: int, keys: list[str]) -> None:
        self.file.write("".join(f"{step} {key}\n" for key in keys))
        self.file.flush()


def maybe_crash(step: int, crash_at: int | None) -> None:
    """SIGKILLs the whole job (its process group) at ``crash_at``, as a preemption would."""
    if crash_at is not None and step == crash_at:
        os.killpg(os.getpgrp(), signal.SIGKILL)


def loss_of(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(model(images.float()), labels)
