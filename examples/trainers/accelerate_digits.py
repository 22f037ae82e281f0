"""Train on AIStore shards with HF accelerate, the aisio loader in accelerate's checkpoint.

accelerate's own lines: ``accelerator.register_for_checkpointing(loader)``, then
``save_state``/``load_state``. ``prepare`` leaves an aisio loader as it is (it rewraps only
``torch.utils.data.DataLoader``, and aisio has split the shards by rank already), so batches
are moved with ``accelerate.utils.send_to_device``. accelerate calls ``state_dict()`` on
every process and writes the main one's; the loader gives every rank's progress merged.

Run: ``python accelerate_digits.py --shards 'ais://digits/digits-{0000..0007}.tar' --dir
ckpts [--resume]``; on two processes: ``torchrun --nproc-per-node 2 accelerate_digits.py ...``
(``resume.py`` runs it, kills it and resumes it).
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import send_to_device
from common import KeyLog, arguments, classifier, digits_loader, loss_of, maybe_crash


class Step:
    """The global step, checkpointed with the rest."""

    def __init__(self) -> None:
        self.value = 0

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value = int(state["value"])


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--save-on-main", action="store_true",
                        help="call save_state() under 'if accelerator.is_main_process:' (some "
                             "scripts do: aisio's state still holds every rank's progress)")
    args = parser.parse_args()
    accelerator = Accelerator(cpu=True)
    model = classifier()
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    loader, step = digits_loader(args), Step()
    accelerator.register_for_checkpointing(loader)
    accelerator.register_for_checkpointing(step)
    directory = os.path.join(args.dir, "state")
    if args.resume:
        accelerator.load_state(directory)
    keys = KeyLog(args.dir, accelerator.process_index)
    for names, images, labels in loader:
        keys.step(step.value, names)
        maybe_crash(step.value, args.crash_at)
        images, labels = send_to_device((images, labels), accelerator.device)
        optimizer.zero_grad()
        accelerator.backward(loss_of(model, images, labels))
        optimizer.step()
        step.value += 1
        if step.value % args.every == 0:
            if accelerator.is_main_process or not args.save_on_main:
                accelerator.save_state(directory)
            accelerator.wait_for_everyone()
            if accelerator.is_main_process:
                with open(os.path.join(args.dir, "checkpoint.json"), "w") as fh:
                    json.dump({"step": step.value}, fh)


if __name__ == "__main__":
    main()
