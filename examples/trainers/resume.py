"""Kill a training job inside a trainer mid-epoch, resume it from the trainer's own checkpoint,
and check that every sample of the epoch was trained on exactly once.

``python examples/trainers/resume.py --trainer lightning|fabric|accelerate|torchrun
[--devices 1|2] [--order fast|deterministic] [--loader dataloader|stateful|nodes]
[--workers A B]``

1. Starts a local AIStore (unless ``AIS_ENDPOINT`` points at one) and uploads digits shards.
2. Runs the trainer's example (``<trainer>_digits.py``) on 1 or 2 processes, with A workers,
   and SIGKILLs every process of it at a step past a checkpoint (as a preemption would).
3. Runs it again with B workers, resuming from the trainer's checkpoint.
4. Counts the keys: those the first run trained on up to its checkpoint's step, plus all the
   second run's, must be the epoch, each once (with ``--order deterministic``, also in the
   uninterrupted run's order, which a third, uninterrupted run gives).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # train_digits.py: the digits shards



def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def command(trainer: str, devices: int) -> list[str]:
    """The command that starts the trainer's example on ``devices`` processes."""
    script = str(HERE / f"{trainer}_digits.py")
    if trainer in ("lightning", "fabric") or devices == 1:
        return [sys.executable, script]  # Lightning and Fabric start their own processes
    return [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={devices}",
            "--master-addr=127.0.0.1", f"--master-port={free_port()}", script]


def checkpoint_step(trainer: str, directory: Path) -> int:
    """The global step the trainer's last checkpoint was taken at."""
    if trainer == "lightning":
        import torch

        return int(torch.load(directory / "last.ckpt", weights_only=True)["global_step"])
    return int(json.loads((directory / "checkpoint.json").read_text())["step"])


def keys(directory: Path, below: int | None = None) -> list[tuple[int, str]]:
    """``(step, key)`` for every sample the run trained on (before step ``below``)."""
    found = []
    for log in sorted(directory.glob("keys-rank*.txt")):
        for line in log.read_text().splitlines():
            step, key = line.split(" ", 1)
            if below is None or int(step) < below:
                found.append((int(step), key))
    return found


def run(args: argparse.Namespace, shards: str, work: Path, env: dict[str, str]) -> bool:
    def base_on(devices: int) -> list[str]:
        return [*command(args.trainer, devices), "--shards", shards, "--loader", args.loader,
                "--order", args.order, "--devices", str(devices), "--every", "4",
                "--batch-size", str(args.batch_size), "--shuffle-buffer", str(args.shuffle_buffer),
                "--seed", str(args.seed), *(["--save-on-main"] if args.save_on_main else [])]

    base = base_on(args.devices)
    resumed_on = args.resume_devices or args.devices
    first, second = work / "run1", work / "run2"
    first.mkdir()
    if args.no_callback:  # Lightning without aisio's callback: refused at the first checkpoint
        done = subprocess.run([*base, "--workers", "0", "--dir", str(first), "--no-callback"],
                              env=env, start_new_session=True, capture_output=True, text=True)
        refusal = [line for line in done.stderr.splitlines() if "UsageError" in line]
        print(refusal[-1] if refusal else done.stderr[-2000:])
        return done.returncode != 0 and bool(refusal)
    crash = args.crash_at if args.crash_at is not None else 9 if args.devices == 1 else 6
    print(f"run 1: {args.devices} process(es), {args.workers[0]} workers, killed at step {crash}")
    done = subprocess.run([*base, "--workers", str(args.workers[0]), "--dir", str(first),
                           "--crash-at", str(crash)], env=env, start_new_session=True)
    if done.returncode == 0:  # -9, or torchrun's 1 for a worker killed by a signal
        print("run 1 was to be killed, but it finished")
        return False
    shutil.copytree(first, second, ignore=shutil.ignore_patterns("keys-*"))
    saved = checkpoint_step(args.trainer, first)
    print(f"run 2: resumed from the checkpoint of step {saved} on {resumed_on} process(es), "
          f"{args.workers[1]} workers")
    subprocess.run([*base_on(resumed_on), "--workers", str(args.workers[1]), "--dir", str(second),
                    "--resume"], env=env, check=True, start_new_session=True)
    trained = [key for _, key in keys(first, below=saved)] + [key for _, key in keys(second)]
    counts = Counter(trained)
    twice = sorted(key for key, n in counts.items() if n > 1)
    never = sorted(set(f"sample{i:05d}" for i in range(args.samples)) - set(counts))
    print(f"{len(trained)} samples trained, {len(counts)} distinct of {args.samples}: "
          f"{len(twice)} twice, {len(never)} never")
    if twice or never:
        print(f"twice: {twice[:8]}, never: {never[:8]}")
        return False
    if args.order == "deterministic":
        whole = work / "whole"
        whole.mkdir()
        subprocess.run([*base, "--workers", "1", "--dir", str(whole)], env=env, check=True,
                       start_new_session=True)
        resumed = sorted(keys(first, below=saved) + keys(second))
        if resumed != sorted(keys(whole)):
            print("the resumed runs did not train in the uninterrupted run's order")
            return False
        print("the same order as the uninterrupted run, step for step")
    print("every sample of the epoch trained on exactly once")
    return True


@contextlib.contextmanager
def cluster() -> Iterator[str]:
    """Yields the endpoint of AIS_ENDPOINT's cluster, or of a local one started here."""
    if os.environ.get("AIS_ENDPOINT"):
        yield os.environ["AIS_ENDPOINT"]
        return
    from aisio.playground import Playground

    with tempfile.TemporaryDirectory() as tmp, Playground(Path(tmp) / "ais") as pg:
        yield pg.endpoint


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trainer", choices=["lightning", "fabric", "accelerate", "torchrun"],
                        required=True)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--resume-devices", type=int, default=None,
                        help="resume on this many processes (default: --devices)")
    parser.add_argument("--order", choices=["fast", "deterministic"], default="fast")
    parser.add_argument("--loader", default="dataloader")
    parser.add_argument("--workers", type=int, nargs=2, default=[2, 1])
    parser.add_argument("--samples", type=int, default=320, help="digits to use (of 1797)")
    parser.add_argument("--per-shard", type=int, default=40, help="samples a shard")
    parser.add_argument("--batch-size", type=int, default=8,
                        help="per rank (order=fast) or global (order=deterministic)")
    parser.add_argument("--shuffle-buffer", type=int, default=64, help="samples, per reader")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--crash-at", type=int, default=None,
                        help="SIGKILL the first run at this global step (default 9, or 6 on 2 "
                             "processes; a checkpoint every 4)")
    parser.add_argument("--bucket", default="ais://aisio-trainers")
    parser.add_argument("--shards", default=None,
                        help="digits shards uploaded before (their template): no upload")
    parser.add_argument("--save-on-main", action="store_true",
                        help="accelerate: save_state() on the main process only")
    parser.add_argument("--no-callback", action="store_true",
                        help="lightning: show the error when aisio's callback is left out")
    args = parser.parse_args()
    from train_digits import write_shards

    with cluster() as endpoint, tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "AIS_ENDPOINT": endpoint, "PYTHONPATH": os.pathsep.join(
            [str(HERE), os.environ.get("PYTHONPATH", "")])}
        shards = args.shards or write_shards(args.bucket, Path(tmp), args.per_shard, endpoint,
                                             limit=args.samples)
        return 0 if run(args, shards, Path(tmp), env) else 1


if __name__ == "__main__":
    sys.exit(main())
