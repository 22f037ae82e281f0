"""Kill a training job mid-epoch and resume it: every sample of the epoch trained on once.

1. Start a local AIStore (unless AIS_ENDPOINT points at one) and upload the digits shards.
2. Run ``train_digits.py`` with ``--checkpoint``: it saves the model, the optimizer and the
   loader's position every few steps, and is killed with SIGKILL at a random step after a
   checkpoint (as a preemption or the OOM killer would).
3. Run it again with another number of workers: it loads the checkpoint and finishes the epoch.
4. Check, from the sample keys each run trained on, that every sample of the epoch was trained
   on exactly once across both runs (the first run's keys count up to its last checkpoint, as
   its model does).
5. With ``--order deterministic``: run the epoch once more, uninterrupted, and check that the
   two runs together trained on the samples in exactly its order (the same batches, although
   the resumed run had another number of workers).

Run: ``python examples/resume_after_kill.py [--loader dataloader|stateful|nodes|dataloader2]
[--order deterministic]``.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import aisio

HERE = Path(__file__).parent
DIGITS = 1797


def trained_keys(log: Path, *, until_checkpoint: bool) -> list[str]:
    """Returns the epoch-1 sample keys a run logged (up to its last checkpoint if asked)."""
    keys: list[str] = []
    kept = 0
    for line in log.read_text().splitlines():
        if line.startswith("checkpoint"):
            kept = len(keys)
        elif line.startswith("1 "):
            keys.append(line.split(" ", 1)[1])
    return keys[:kept] if until_checkpoint else keys


def run(loader: str, workers: tuple[int, int], seed: int, endpoint: str, work: Path,
        order: str = "fast") -> bool:
    """Kills one run and resumes it; returns whether the epoch was trained on exactly once
    (and, in the deterministic order, in the uninterrupted run's order)."""
    env = {**os.environ, "AIS_ENDPOINT": endpoint}
    job = [sys.executable, str(HERE / "train_digits.py"), "--bucket", "ais://aisio-resume",
           "--epochs", "1", "--loader", loader, "--batch-size", "32", "--order", order]
    common = [*job, "--checkpoint", str(work / "ckpt.pt"), "--every", "4"]
    crash = random.Random(seed).randint(6, 40)  # batches of 32: the epoch has 57
    first, second = work / "run1.keys", work / "run2.keys"
    print(f"run 1: {workers[0]} workers, killed at step {crash}")
    killed = subprocess.run([*common, "--workers", str(workers[0]), "--crash-at", str(crash),
                             "--no-upload",
                             "--log-keys", str(first)], env=env, timeout=300)
    if killed.returncode != -9:
        print(f"run 1 was expected to die of SIGKILL, but exited with {killed.returncode}")
        return False
    print(f"run 2: {workers[1]} workers, resuming from the checkpoint")
    subprocess.run([*common, "--workers", str(workers[1]), "--no-upload", "--log-keys",
                    str(second)], env=env, timeout=300, check=True)
    before = trained_keys(first, until_checkpoint=True)
    after = trained_keys(second, until_checkpoint=False)
    counts = Counter(before + after)
    once = len(counts) == DIGITS and set(counts.values()) == {1}
    print(f"trained on {len(before)} samples before the last checkpoint and {len(after)} after "
          f"the resume: {len(counts)} distinct of {DIGITS}, "
          f"{'each exactly once' if once else 'NOT exactly once'}")
    if order != "deterministic":
        return once
    whole = work / "whole.keys"
    print("run 3: 0 workers, the epoch uninterrupted")
    subprocess.run([*job, "--workers", "0", "--no-upload", "--log-keys", str(whole)], env=env,
                   timeout=300, check=True)
    same = before + after == trained_keys(whole, until_checkpoint=False)
    print(f"runs 1 and 2 together: {'the same order' if same else 'NOT the same order'} as "
          "the uninterrupted run, sample for sample")
    return once and same


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loader", default="dataloader",
                        choices=["dataloader2", "dataloader", "stateful", "nodes"])
    parser.add_argument("--workers", type=int, nargs=2, default=(2, 3), metavar=("BEFORE", "AFTER"))
    parser.add_argument("--seed", type=int, default=0, help="picks the step the job is killed at")
    parser.add_argument("--order", choices=["fast", "deterministic"], default="fast",
                        help="deterministic: also check the uninterrupted run's order")
    args = parser.parse_args(argv)
    with aisio.playground.cluster_endpoint() as endpoint, tempfile.TemporaryDirectory() as tmp:
        # Upload once, here: the killed run must not own the cluster it trains from.
        sys.path.insert(0, str(HERE))
        from train_digits import write_shards

        write_shards("ais://aisio-resume", Path(tmp), 200, endpoint)
        ok = run(args.loader, tuple(args.workers), args.seed, endpoint, Path(tmp), args.order)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
