"""Train on AIStore shards under torchrun, with the checkpoint written by the script itself.

The recipe: every rank calls :func:`aisio.gather_state` at the same step (a collective that
returns every rank's progress merged); rank 0 saves it with the model. A killed job is
relaunched with the same command plus ``--resume``, on any number of ranks.

Run: ``torchrun --nproc-per-node 2 torchrun_digits.py --shards
'ais://digits/digits-{0000..0007}.tar' --dir ckpts [--resume]`` (``resume.py`` runs it, kills
it and resumes it).
"""

from __future__ import annotations

import json
import os

import torch
import torch.distributed as dist
from common import KeyLog, arguments, classifier, digits_loader, loss_of, maybe_crash

import aisio


def main() -> None:
    args = arguments(__doc__.splitlines()[0]).parse_args()
    if "RANK" in os.environ:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if dist.is_initialized() else 0
    model = classifier()
    if dist.is_initialized():
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = digits_loader(args)
    path, step = os.path.join(args.dir, "checkpoint.pt"), 0
    if args.resume:
        saved = torch.load(path, weights_only=True)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        loader.load_state_dict(saved["loader"])
        step = saved["step"]
    keys = KeyLog(args.dir, rank)
    for names, images, labels in loader:
        keys.step(step, names)
        maybe_crash(step, args.crash_at)
        optimizer.zero_grad()
        loss_of(model, images, labels).backward()
        optimizer.step()
        step += 1
        if step % args.every == 0:
            state = aisio.gather_state(loader)  # every rank, at the same step
            if rank == 0:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "loader": state, "step": step}, path + ".tmp")
                os.replace(path + ".tmp", path)
                with open(os.path.join(args.dir, "checkpoint.json"), "w") as fh:
                    json.dump({"step": step}, fh)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
