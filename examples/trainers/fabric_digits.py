"""Train on AIStore shards with Lightning Fabric, the aisio loader in Fabric's checkpoint.

Nothing aisio-specific: the loader goes into the state like the model and the optimizer
(``fabric.save(path, {"model": ..., "optimizer": ..., "loader": loader})``) and comes back
with ``fabric.load``. Fabric calls ``state_dict()`` on every rank and writes rank 0's; the
loader gives every rank's progress merged, so that file resumes the whole job.

Run: ``python fabric_digits.py --shards 'ais://digits/digits-{0000..0007}.tar' --dir ckpts
[--devices 2] [--resume]`` (``resume.py`` runs it, kills it and resumes it).
"""

from __future__ import annotations

import json
import os

import torch
from common import KeyLog, arguments, classifier, digits_loader, loss_of, maybe_crash
from lightning_fabric import Fabric


def main() -> None:
    args = arguments(__doc__.splitlines()[0]).parse_args()
    fabric = Fabric(accelerator="cpu", devices=args.devices,
                    strategy="ddp" if args.devices > 1 else "auto")
    fabric.launch()
    model = classifier()
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    loader = digits_loader(args)  # not fabric.setup_dataloaders: aisio splits by rank itself
    state = {"model": model, "optimizer": optimizer, "loader": loader, "step": 0}
    path = os.path.join(args.dir, "checkpoint.ckpt")
    if args.resume:
        fabric.load(path, state)
    keys = KeyLog(args.dir, fabric.global_rank)
    for batch in loader:
        step = state["step"]
        names, images, labels = batch
        keys.step(step, names)
        maybe_crash(step, args.crash_at)
        images, labels = fabric.to_device((images, labels))
        optimizer.zero_grad()
        fabric.backward(loss_of(model, images, labels))
        optimizer.step()
        state["step"] = step + 1
        if state["step"] % args.every == 0:
            fabric.save(path, state)
            if fabric.global_rank == 0:
                with open(os.path.join(args.dir, "checkpoint.json"), "w") as fh:
                    json.dump({"step": state["step"]}, fh)


if __name__ == "__main__":
    main()
