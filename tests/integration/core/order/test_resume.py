"""``order="deterministic"`` across processes, against the real AIStore: a training job
(``_train_job.py``) SIGKILLed mid-epoch and resumed in a new process on another number of
workers continues with exactly the batches the uninterrupted job yielded; and 2 ranks (gloo on
127.0.0.1), their batches merged round by round, yield the 1-rank sequence (``uneven="drop"``:
its first steps), also when a 2-rank run is resumed on 1 rank."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.integration.core.epochs.test_resume import (
    ALL,
    DIST,
    Data,
    _checkpointed,
    _cmd,
    _epoch,
    _keys,
    _kill_after_checkpoint,
    _run,
    data,
)

ORDER: dict[str, Any] = dict(order="deterministic", streams=4, batch_size=8, seed=3)

__all__ = ["data"]  # the module-scoped shards fixture, shared with test_resume


def _batches(out: Path, rank: int = 0, epoch: int = 0) -> list[list[str]]:
    path = out / f"batches-rank{rank}.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [keys for e, keys in lines if e == epoch]


def _flat(batches: list[list[str]]) -> list[str]:
    return [k for batch in batches for k in batch]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
@pytest.mark.parametrize("kind", ALL)
def test_sigkill_then_resume_on_other_workers_continues_the_same_batches(
        data: Data, tmp_path: Path, kind: str) -> None:
    whole_out = tmp_path / "whole"
    _run([_cmd(kind, data, whole_out, workers=0, epochs=2, **ORDER)])
    whole, whole_next = _batches(whole_out), _batches(whole_out, epoch=1)
    assert sorted(_flat(whole)) == sorted(data.keys)

    ckpt_path, run1 = tmp_path / "ckpt.json", tmp_path / "run1"
    _kill_after_checkpoint(_cmd(kind, data, run1, workers=2, every=1, ckpt=ckpt_path,
                                **ORDER), run1, 4)
    ckpt = json.loads(ckpt_path.read_text())
    before = _checkpointed([run1], ckpt)
    assert 0 < len(before) < len(data.keys)
    assert before == _flat(whole)[:len(before)]

    resumed = tmp_path / "resumed"
    _run([_cmd(kind, data, resumed, workers=1, epochs=2, resume=ckpt_path, **ORDER)])
    assert before + _epoch(_keys(resumed), 0) == _flat(whole)
    assert _batches(resumed) == whole[ckpt["step"]:]
    assert _batches(resumed, epoch=1) == whole_next  # the next epoch: the same too


@pytest.mark.slow
@pytest.mark.parametrize("kind", DIST)
def test_two_ranks_merged_by_round_are_the_one_rank_sequence_and_resume_on_one(
        data: Data, tmp_path: Path, kind: str) -> None:
    one = tmp_path / "one"
    _run([_cmd(kind, data, one, workers=1, **ORDER)])
    whole = _batches(one)

    port, outs = _free_port(), [tmp_path / "rank0", tmp_path / "rank1"]
    opts = dict(world=2, port=port, uneven="keep", **ORDER)
    _run([_cmd(kind, data, outs[r], rank=r, workers=2 - r, **opts) for r in (0, 1)])
    ranks = [_batches(outs[r], rank=r) for r in (0, 1)]
    assert all(len(b) == 4 for b in ranks[0][:3] + ranks[1][:3])  # G / R while streams last
    merged = [ranks[0][t] if t < len(ranks[0]) else [] for t in range(len(whole))]
    merged = [m + (ranks[1][t] if t < len(ranks[1]) else []) for t, m in enumerate(merged)]
    assert merged == whole
    # uneven="drop": every rank stops at the first step where a rank has no part left
    port, drop = _free_port(), [tmp_path / "drop0", tmp_path / "drop1"]
    opts = dict(world=2, port=port, uneven="drop", **ORDER)
    _run([_cmd(kind, data, drop[r], rank=r, workers=1, **opts) for r in (0, 1)])
    steps = min(len(ranks[0]), len(ranks[1]))
    assert [_batches(drop[r], rank=r) for r in (0, 1)] == [ranks[0][:steps], ranks[1][:steps]]

    # a 2-rank run that crashes after step 5 (checkpoint at step 3), resumed on 1 rank
    port, crash = _free_port(), [tmp_path / "crash0", tmp_path / "crash1"]
    ckpt_path = tmp_path / "ckpt.json"
    opts = dict(world=2, port=port, uneven="keep", every=3, stop_after=5, ckpt=ckpt_path,
                **ORDER)
    _run([_cmd(kind, data, crash[r], rank=r, workers=1, **opts) for r in (0, 1)], expect=3)
    ckpt = json.loads(ckpt_path.read_text())
    assert ckpt["step"] == 3
    resumed = tmp_path / "resumed"
    _run([_cmd(kind, data, resumed, workers=2, resume=ckpt_path, **ORDER)])
    assert _batches(resumed) == whole[3:]
