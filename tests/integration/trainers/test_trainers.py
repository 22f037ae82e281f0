"""Exactly once inside the trainers that checkpoint an aisio loader: a real job in each trainer
(Lightning, Fabric, accelerate, torchrun), on 1 and 2 processes (gloo on 127.0.0.1), SIGKILLed
mid-epoch past a checkpoint and resumed from the trainer's own checkpoint with another number
of workers; the keys trained before the checkpoint's step plus those after the resume must be
the epoch, each once. The jobs are the examples in examples/trainers/ (resume.py drives them).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from aisio.core.store.urls import Bucket

pytestmark = [pytest.mark.integration, pytest.mark.slow]
pytest.importorskip("pytorch_lightning")
pytest.importorskip("accelerate")

RESUME = Path(__file__).resolve().parents[3] / "examples" / "trainers" / "resume.py"


def resume(endpoint: str, bucket: Bucket, *args: str) -> str:
    """Runs the kill-and-resume driver; returns what it printed (it exits 0 only when the
    epoch was trained on exactly once)."""
    env = {**os.environ, "AIS_ENDPOINT": endpoint}
    done = subprocess.run([sys.executable, str(RESUME), "--bucket", f"ais://{bucket.name}",
                           "--samples", "160", *args], env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


LONG = pytest.mark.long  # the full matrix: make test-trainers (make test runs the rest)


@pytest.mark.parametrize("trainer, devices, extra", [
    # make test: the callback, the DDP gather and a resume on another number of processes
    ("lightning", "2", ("--resume-devices", "1")),
    pytest.param("lightning", "1", ("--loader", "stateful"), marks=LONG),
    pytest.param("lightning", "2", ("--order", "deterministic", "--workers", "1", "0"),
                 marks=LONG),
    pytest.param("fabric", "1", ("--order", "deterministic", "--workers", "0", "2"), marks=LONG),
    pytest.param("fabric", "2", (), marks=LONG),
    pytest.param("accelerate", "1", ("--loader", "stateful"), marks=LONG),
    pytest.param("accelerate", "2", (), marks=LONG),
    pytest.param("torchrun", "1", (), marks=LONG),
    pytest.param("torchrun", "2", ("--loader", "stateful"), marks=LONG),
])
def test_a_killed_job_resumes_from_the_trainers_checkpoint_exactly_once(
        ais_endpoint: str, bucket: Bucket, trainer: str, devices: str,
        extra: tuple[str, ...]) -> None:
    out = resume(ais_endpoint, bucket, "--trainer", trainer, "--devices", devices, *extra)
    assert "160 samples trained, 160 distinct of 160: 0 twice, 0 never" in out, out
    if "deterministic" in extra:
        assert "the same order as the uninterrupted run" in out, out


def test_lightning_without_the_callback_is_refused_as_it_starts_iterating(
        ais_endpoint: str, bucket: Bucket) -> None:
    out = resume(ais_endpoint, bucket, "--trainer", "lightning", "--no-callback")
    assert "fetcher runs a batch ahead" in out, out
    assert "callbacks=[aisio.trainers.pytorch_lightning.ExactlyOnce()]" in out, out
