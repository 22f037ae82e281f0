"""A training job for the resume tests: one rank (or a lone process) reading epochs through one
of aisio's resumable loaders, as a real training loop would, checkpointing on the way.

``python _train_job.py --kind KIND --endpoint URL --template T --out DIR [options]``

* ``--kind``: ``dl2`` (DataLoader2), ``dataloader``, ``stateful`` (StatefulDataLoader) or
  ``nodes`` (torchdata.nodes).
* With ``--world`` > 1 it joins a gloo group on 127.0.0.1:``--port`` as ``--rank``.
* ``--resume CKPT`` loads the ``state`` of a checkpoint written by an earlier job.
* Every key received is appended as ``epoch<TAB>key`` to ``DIR/keys-rank<R>.txt``, flushed and
  fsynced after every batch, so a SIGKILL loses nothing already written.
* Every ``--every`` steps (while ``step <= --ckpt-until``), all ranks call
  :func:`aisio.gather_state` and rank 0 writes ``--ckpt`` atomically (temp file + os.replace):
  ``{"state": merged state, "ranks": [each rank's own state], "counts": [keys written by each
  rank], "step", "epoch", "time"}``. Every rank writes the merged state it got to
  ``DIR/gathered-rank<R>.json`` (gather_state gives it on every rank).
  With ``--ckpt-by-file``, no other collective is made: a rank that has run out (``keep``)
  takes no part, every rank that reached the step writes ``--ckpt`` (``{step}`` in it is
  replaced) without ``counts``, and each rank records its count in ``DIR/counts-rank<R>.json``
  (step -> keys written).
* ``--resume-ranks`` loads the checkpoint's list of per-rank states instead of the merged one.
* ``--stop-after N`` ends the process abruptly (``os._exit``) after N batches of the first epoch:
  a crash at a known step (all ranks stop at the same step).
* ``--ckpt-from-epoch E``: checkpoint (and ``--sleep``) only from the job's E-th epoch (0-based)
  on: a crash in a later epoch, on workers that served the earlier ones.
* ``--sleep`` slows each step down.
* ``--pause-after N``: ``N`` batches after its first checkpoint the job writes ``DIR/paused``
  and waits (at most ``--max-pause`` seconds, then fails) for the test to SIGKILL it: a kill
  mid-epoch at a known step, which the job cannot outrun.
* ``--epochs``: how many epochs to run (the first may be a resumed one).
* ``--order deterministic`` (with ``--streams K``): the loader's deterministic order;
  ``--batch-size`` is then the global batch.
* Each batch's keys are also appended, as ``[epoch, [keys]]`` per line, to
  ``DIR/batches-rank<R>.jsonl`` (to merge the ranks' batches round by round, or compare them).
* At the end, ``DIR/done-rank<R>.json`` gets the batch count of every epoch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import timedelta
from typing import Any


def build(kind: str, template: str, args: argparse.Namespace) -> Any:
    import aisio

    options: dict[str, Any] = dict(
        url=args.endpoint, num_workers=args.workers, seed=args.seed, uneven=args.uneven,
        shuffle_buffer=args.shuffle_buffer, decode=aisio.Decoder(image=None),
        tuple_fields=("__key__", "cls"), batch_size=args.batch_size)
    factory = {"dl2": aisio.webdataset_loader, "dataloader": aisio.webdataset_dataloader,
               "stateful": aisio.webdataset_stateful_loader,
               "nodes": aisio.webdataset_node_loader}[kind]
    if args.order != "fast":
        options.update(order=args.order, streams=args.streams)
    return factory(template, **options)


def write_atomic(path: str, payload: dict[str, Any]) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as fh:
        json.dump(payload, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", required=True)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--template", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--world", type=int, default=1)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--uneven", default="keep")
    parser.add_argument("--shuffle-buffer", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--resume", default=None)
    parser.add_argument("--resume-ranks", action="store_true")
    parser.add_argument("--ckpt", default=None)
    parser.add_argument("--every", type=int, default=0)
    parser.add_argument("--ckpt-until", type=int, default=10**9)
    parser.add_argument("--ckpt-from-epoch", type=int, default=0)
    parser.add_argument("--stop-after", type=int, default=0)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--pause-after", type=int, default=0)
    parser.add_argument("--max-pause", type=float, default=120.0)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=10_000)  # bounds every loop
    parser.add_argument("--ckpt-by-file", action="store_true")
    parser.add_argument("--order", default="fast")
    parser.add_argument("--streams", type=int, default=None)
    args = parser.parse_args()

    import torch.distributed as dist

    import aisio

    if args.world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}",
                                rank=args.rank, world_size=args.world,
                                timeout=timedelta(seconds=60))
    loader = build(args.kind, args.template, args)
    if args.resume:
        with open(args.resume) as fh:
            loader.load_state_dict(json.load(fh)["ranks" if args.resume_ranks else "state"])
    keys_path = os.path.join(args.out, f"keys-rank{args.rank}.txt")
    written = 0
    first_ckpt: int | None = None  # the global step of the first checkpoint
    steps = 0
    by_step: dict[str, Any] = {}
    batches: list[int] = []
    batches_path = os.path.join(args.out, f"batches-rank{args.rank}.jsonl")
    with open(keys_path, "a") as out, open(batches_path, "a") as batch_log:
        for _ in range(args.epochs):
            epoch = loader.epoch
            step = 0
            for keys, _labels in loader:
                step += 1
                steps += 1
                if step > args.max_steps:
                    raise SystemExit(f"more than {args.max_steps} steps in an epoch")
                out.write("".join(f"{epoch}\t{key}\n" for key in keys))
                out.flush()
                os.fsync(out.fileno())
                batch_log.write(json.dumps([epoch, list(keys)]) + "\n")
                batch_log.flush()
                written += len(keys)
                if (args.ckpt_by_file and args.every and step % args.every == 0
                        and step <= args.ckpt_until):
                    state = aisio.gather_state(loader)
                    by_step[str(step)] = written
                    write_atomic(os.path.join(args.out, f"counts-rank{args.rank}.json"),
                                 by_step)
                    if args.ckpt:
                        write_atomic(args.ckpt.format(step=step),
                                     {"state": state, "step": step, "epoch": epoch})
                elif (args.every and step % args.every == 0 and step <= args.ckpt_until
                        and len(batches) >= args.ckpt_from_epoch):
                    own = loader.local_state_dict()
                    state = aisio.gather_state(loader)
                    counts: list[Any] = [written]
                    ranks: list[Any] = [own]
                    if args.world > 1:
                        counts, ranks = [None] * args.world, [None] * args.world
                        dist.all_gather_object(counts, written)
                        dist.all_gather_object(ranks, own)
                    write_atomic(os.path.join(args.out, f"gathered-rank{args.rank}.json"),
                                 {"state": state, "step": step})
                    if args.rank == 0 and args.ckpt:
                        write_atomic(args.ckpt, {"state": state, "ranks": ranks,
                                                 "counts": counts, "step": step,
                                                 "epoch": epoch, "time": time.time()})
                    first_ckpt = steps if first_ckpt is None else first_ckpt
                if (args.pause_after and first_ckpt is not None
                        and steps - first_ckpt == args.pause_after):
                    write_atomic(os.path.join(args.out, "paused"), {"step": step})
                    time.sleep(args.max_pause)  # the test kills the job meanwhile
                    raise SystemExit(f"not killed within {args.max_pause} s of pausing")
                if args.stop_after and step >= args.stop_after and not batches:
                    if args.world > 1:
                        dist.barrier()  # no rank dies inside another's collective
                    os._exit(3)  # a crash: no shutdown
                if args.sleep and len(batches) == args.ckpt_from_epoch:
                    time.sleep(args.sleep)  # the epoch that checkpoints first only
            batches.append(step)
    loader.shutdown()
    if args.world > 1:
        dist.barrier()
        dist.destroy_process_group()
    with open(os.path.join(args.out, f"done-rank{args.rank}.json"), "w") as fh:
        json.dump({"batches": batches}, fh)


if __name__ == "__main__":
    sys.exit(main())
