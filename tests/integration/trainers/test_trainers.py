"""Exactly once inside the trainers that checkpoint an aisio loader: a real job in each trainer
(Lightning, Fabric, accelerate, torchrun), on 1 and 2 processes (gloo on 127.0.0.1), SIGKILLed
mid-epoch past a checkpoint and resumed from the trainer's own checkpoint with another number
of workers; the keys trained before the checkpoint's step plus those after the resume must be
the epoch, each once. The jobs are the examples in examples/trainers/ (resume.py drives them),
all on one upload of 160 digits in 8 shards of 20.

The trainers are in both environments' locks (requirements/td09.txt, td011.txt): a missing one
fails its cases (the job cannot import it), it is not skipped.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from aisio.core.store.client import Client
from aisio.core.store.urls import Bucket

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
RESUME = EXAMPLES / "trainers" / "resume.py"
SAMPLES, PER_SHARD = 160, 20


@pytest.fixture(scope="module")
def digits(ais_endpoint: str, ais_client: Client, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[str]:
    """The template of 160 digits in 8 shards of 20, uploaded once for every case here."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        from train_digits import write_shards
    finally:
        sys.path.remove(str(EXAMPLES))
    bucket = Bucket(f"aisio-test-{uuid.uuid4().hex[:10]}")
    ais_client.create_bucket(bucket)
    try:
        yield write_shards(f"ais://{bucket.name}", tmp_path_factory.mktemp("digits"), PER_SHARD,
                           ais_endpoint, limit=SAMPLES)
    finally:
        ais_client.destroy_bucket(bucket)


def resume(endpoint: str, shards: str, *args: str) -> str:
    """Runs the kill-and-resume driver; returns what it printed (it exits 0 only when the
    epoch was trained on exactly once)."""
    env = {**os.environ, "AIS_ENDPOINT": endpoint}
    done = subprocess.run([sys.executable, str(RESUME), "--shards", shards, "--samples",
                           str(SAMPLES), *args], env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


LONG = pytest.mark.long  # the full matrix: make test-trainers (make test runs the rest)
ONCE = "160 samples trained, 160 distinct of 160: 0 twice, 0 never"


@pytest.mark.parametrize("trainer, devices, extra", [
    # make test: one case per trainer. Lightning's is issue #37's class: DDP, a shuffle buffer,
    # a checkpoint in the epoch's last quarter (step 16 of 20), resumed on as many ranks
    # (it lost a sample before each shard in progress went back to its rank).
    ("lightning", "2", ("--loader", "stateful", "--workers", "1", "1", "--batch-size", "4",
                        "--shuffle-buffer", "10", "--seed", "3", "--crash-at", "17")),
    ("fabric", "1", ()),
    ("accelerate", "1", ("--loader", "stateful")),
    ("torchrun", "1", ("--workers", "0", "1")),
    pytest.param("lightning", "2", ("--resume-devices", "1"), marks=LONG),
    pytest.param("lightning", "1", ("--loader", "stateful"), marks=LONG),
    pytest.param("lightning", "2", ("--order", "deterministic", "--workers", "1", "0"),
                 marks=LONG),
    pytest.param("fabric", "1", ("--order", "deterministic", "--workers", "0", "2"), marks=LONG),
    pytest.param("fabric", "2", (), marks=LONG),
    pytest.param("accelerate", "2", (), marks=LONG),
    # save_state() under 'if accelerator.is_main_process:', then wait_for_everyone(): rank 1
    # answers from its exchange thread (it hung until torch.distributed's timeout)
    pytest.param("accelerate", "2", ("--save-on-main",), marks=LONG),
    pytest.param("torchrun", "2", ("--workers", "0", "1"), marks=LONG),
    pytest.param("torchrun", "2", ("--loader", "stateful"), marks=LONG),
])
def test_a_killed_job_resumes_from_the_trainers_checkpoint_exactly_once(
        ais_endpoint: str, digits: str, trainer: str, devices: str,
        extra: tuple[str, ...]) -> None:
    out = resume(ais_endpoint, digits, "--trainer", trainer, "--devices", devices,
                 "--per-shard", str(PER_SHARD), *extra)
    assert ONCE in out, out
    if "deterministic" in extra:
        assert "the same order as the uninterrupted run" in out, out


@pytest.mark.long  # the refusal's logic: tests/unit/runtime/test_fetchers.py
def test_lightning_without_the_callback_is_refused_as_it_starts_iterating(
        ais_endpoint: str, digits: str) -> None:
    out = resume(ais_endpoint, digits, "--trainer", "lightning", "--no-callback")
    assert "fetcher runs a batch ahead" in out, out
    assert "callbacks=[aisio.trainers.pytorch_lightning.ExactlyOnce()]" in out, out


TRIALS = int(os.environ.get("AISIO_TRAINER_TRIALS", "8"))


@pytest.mark.long
@pytest.mark.parametrize("trial", range(TRIALS))
def test_random_kills_and_resumes_inside_the_trainers_train_each_sample_once(
        ais_endpoint: str, digits: str, trial: int) -> None:
    """The property, over trials drawn at random (AISIO_TRAINER_SEED replays a draw): any
    trainer, 1 or 2 processes (resumed on as many, or on 1), 0-2 workers before and after, a
    shuffle buffer of 0-16 samples, batches of 4 or 8, killed at any step past the first
    checkpoint (every 4 steps) and before the epoch's last."""
    seed = int(os.environ.get("AISIO_TRAINER_SEED", random.SystemRandom().getrandbits(32)))
    rng = random.Random(f"{seed}:{trial}")
    trainer = rng.choice(["lightning", "fabric", "accelerate", "torchrun"])
    devices = rng.choice([1, 2])
    resumed_on = rng.choice([devices, 1])
    batch = rng.choice([4, 8])
    steps = SAMPLES // (devices * batch)
    args = ["--trainer", trainer, "--devices", str(devices), "--resume-devices", str(resumed_on),
            "--per-shard", str(PER_SHARD), "--batch-size", str(batch),
            "--loader", rng.choice(["dataloader", "stateful"]),
            "--workers", str(rng.randint(0, 2)), str(rng.randint(0, 2)),
            "--shuffle-buffer", str(rng.choice([0, 1, 5, 10, 16])),
            "--seed", str(rng.randint(0, 99)), "--crash-at", str(rng.randint(5, steps - 1))]
    print(f"AISIO_TRAINER_SEED={seed}, trial {trial}: {' '.join(args)}")
    assert ONCE in resume(ais_endpoint, digits, *args)
