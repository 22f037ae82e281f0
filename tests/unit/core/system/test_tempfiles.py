"""Temporary files shared with workers do not accumulate when their owner is killed
(aisio.core.system.tempfiles): each new one sweeps the files of owners that are gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from aisio.core.epochs.plan import EpochPlan
from aisio.core.faults.report import ErrorReport
from aisio.core.system.tempfiles import UNOWNED_AGE, owned_temporary, sweep

KILLED = """
import os, signal, sys
from aisio.core.epochs.plan import EpochPlan
from aisio.core.faults.report import ErrorReport
from aisio.core.pipeline.spec import PipelineSpec
plan = EpochPlan.temporary()
report = PipelineSpec.build(on_error="skip").report
print(plan.path, report.path, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no finalizer runs
"""


def test_a_killed_owners_files_are_swept_by_the_next_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    done = subprocess.run([sys.executable, "-c", KILLED], capture_output=True, text=True,
                          timeout=120, check=False, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == -signal.SIGKILL, done.stderr
    left = [Path(p) for p in done.stdout.split()]
    assert all(p.exists() for p in left)  # a killed process leaves them behind
    plan = EpochPlan.temporary()
    report = ErrorReport.temporary(owned_temporary("aisio-errors-", ".jsonl"))
    assert not any(p.exists() for p in left)  # the next ones sweep them
    assert {p.name for p in tmp_path.iterdir()} == {plan.path.name, report.path.name}


def test_a_sweep_leaves_live_owners_and_young_unnamed_files(tmp_path: Path) -> None:
    mine = Path(owned_temporary("aisio-plan-", ".json", directory=str(tmp_path)))
    old = tmp_path / "aisio-plan-abcd1234.json"  # as versions before owners were named
    young = tmp_path / "aisio-plan-efgh5678.json"
    for path in (old, young):
        path.write_text("{}")
    os.utime(old, (0, 0))
    removed = sweep("aisio-plan-", str(tmp_path), now=UNOWNED_AGE + 1)
    assert removed == [old.name]
    assert mine.exists() and young.exists()
