"""Resumable epochs and distributed semantics of every loader, against the real AIStore.

Each test runs training jobs (``_train_job.py``) as subprocesses: a job reads an epoch through
one loader, logs every key it received (fsynced per batch) and checkpoints the merged loader
state with the number of keys each rank had written. A crash (SIGKILL of the process group, or
``os._exit`` at a known step) is followed by a job resumed from the checkpoint, possibly on
another number of workers or ranks; the keys up to the checkpoint plus the resumed job's keys
must be the epoch's samples, each exactly once.

Loaders: ``dl2`` (DataLoader2, torchdata < 0.10), ``dataloader`` (torch DataLoader),
``stateful`` (StatefulDataLoader) and ``nodes`` (torchdata.nodes, >= 0.10); each test skips the
loaders this environment lacks.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import random
import signal
import subprocess
import sys
import tarfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aisio.core.store.client import Client
from aisio.core.store.urls import AISPath, Bucket
from aisio.core.system.ports import free_port
from tests.conftest import write_shards
from tests.integration._recording_proxy import RecordingProxy
from tests.integration.jobs import Job, popen

HERE = Path(__file__).parents[2]  # the integration tests' helper scripts
JOB = HERE / "_train_job.py"
JOB_TIMEOUT = 120
BATCH = 4


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


_AVAILABLE = {
    "dl2": _has("torchdata.dataloader2"),
    "dataloader": True,
    "stateful": _has("torchdata.stateful_dataloader"),
    "nodes": _has("torchdata.nodes"),
}
_WHY = {"dl2": "DataLoader2 needs torchdata < 0.10", "stateful": "needs torchdata >= 0.8",
        "nodes": "torchdata.nodes needs torchdata >= 0.10"}


def _kinds(*kinds: str) -> list[Any]:
    return [pytest.param(k, id=k, marks=pytest.mark.skipif(not _AVAILABLE[k], reason=_WHY.get(k,
            ""))) for k in kinds]


ALL = _kinds("dl2", "dataloader", "stateful", "nodes")
DIST = _kinds("dl2", "dataloader", "stateful", "nodes")


class Data:
    def __init__(self, endpoint: str, bucket: Bucket, template: str, keys: list[str],
                 client: Client) -> None:
        self.endpoint, self.bucket, self.template, self.keys = endpoint, bucket, template, keys
        self.client = client
        self.names = [f"shard-{i:04d}.tar" for i in range(len({k.split('/')[0] for k in keys}))]
        self._spans: dict[int, tuple[int, list[tuple[int, int]]]] = {}

    def spans(self, shard: int) -> tuple[int, list[tuple[int, int]]]:
        """Returns (the shard's size, each sample's (start, end) byte span, by ordinal)."""
        if shard in self._spans:
            return self._spans[shard]
        data = self.client.get_bytes(AISPath(self.bucket, self.names[shard]))
        spans: dict[str, list[int]] = {}
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar.getmembers():
                key = member.name.rsplit(".", 1)[0] if "." in member.name else member.name
                end = member.offset_data + -(-member.size // 512) * 512
                span = spans.setdefault(key, [member.offset, end])
                span[1] = end
        self._spans[shard] = (len(data), [(a, b) for a, b in spans.values()])
        return self._spans[shard]


@pytest.fixture(scope="module")
def data(ais_endpoint: str, ais_client: Client,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Data]:
    """7 shards of 12..18 samples (odd count, unequal sizes: ranks are uneven), 1 KiB each."""
    bucket = Bucket(f"aisio-resume-{uuid.uuid4().hex[:8]}")
    ais_client.create_bucket(bucket)
    try:
        template, keys = write_shards(ais_client, bucket, tmp_path_factory.mktemp("shards"),
                                      shards=7, per_shard=12, payload=1024)
        yield Data(ais_endpoint, bucket, template, keys, ais_client)
    finally:
        ais_client.destroy_bucket(bucket)


# ---------------------------------------------------------------------------------- helpers


def _cmd(kind: str, data: Data, out: Path, *, endpoint: str | None = None,
         **options: Any) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(JOB), "--kind", kind, "--endpoint", endpoint or data.endpoint,
           "--template", data.template, "--out", str(out), "--batch-size", str(BATCH)]
    for name, value in options.items():
        flag = f"--{name.replace('_', '-')}"
        cmd += [flag] if value is True else [flag, str(value)]
    return cmd


def _run(cmds: list[list[str]], *, expect: int = 0) -> None:
    """Runs jobs (ranks) at once, each in its own process group; each must end with ``expect``
    within the timeout. Whatever is left of a group afterwards (DataLoader2's worker processes
    outlive a main process that crashed) is killed."""
    procs, logs = [], []
    for i, cmd in enumerate(cmds):
        log = Path(cmd[cmd.index("--out") + 1]) / f"stderr-{i}-{time.monotonic_ns()}.txt"
        logs.append(log)
        procs.append(popen(cmd, log))
    try:
        for p, log in zip(procs, logs, strict=True):
            p.wait(timeout=JOB_TIMEOUT)
            assert p.returncode == expect, (
                f"job ended with {p.returncode}:\n{log.read_text()[-3000:]}")
    finally:
        for p in procs:
            _kill_group(p)


def _kill_group(proc: Job | subprocess.Popen[Any]) -> None:
    with contextlib.suppress(ProcessLookupError):  # the whole group is gone already
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _kill_after_checkpoint(cmd: list[str], out: Path, more: int) -> None:
    """Runs the job ``cmd`` (its keys and stderr in ``out``) until it has taken ``more``
    batches past its first checkpoint and paused there (``--pause-after``: it waits to be
    killed, so it cannot finish first), then SIGKILLs its process group (the job and its
    workers, at once): mid-epoch, past a checkpoint, as a preemption would."""
    out.mkdir(exist_ok=True)
    proc = popen([*cmd, "--pause-after", str(more)], out / "stderr.txt")
    try:
        deadline = time.monotonic() + JOB_TIMEOUT
        while (not (out / "paused").exists() and proc.poll() is None
               and time.monotonic() < deadline):
            time.sleep(0.05)
        assert (out / "paused").exists(), (
            f"the job did not pause (rc {proc.poll()}): "
            f"{(out / 'stderr.txt').read_text()[-2000:]}")
    finally:
        _kill_group(proc)
    assert proc.returncode == -signal.SIGKILL


def _keys(out: Path, rank: int = 0) -> list[tuple[int, str]]:
    path = out / f"keys-rank{rank}.txt"
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [(int(e), k) for e, k in (line.split("\t") for line in lines)]


def _batch_log(out: Path, rank: int, epoch: int) -> list[list[str]]:
    """The batches rank ``rank`` received in epoch ``epoch`` (its job's batch log)."""
    lines = (out / f"batches-rank{rank}.jsonl").read_text().splitlines()
    return [keys for e, keys in map(json.loads, lines) if e == epoch]


def _epoch(pairs: list[tuple[int, str]], epoch: int) -> list[str]:
    return [k for e, k in pairs if e == epoch]


def _checkpointed(outs: list[Path], ckpt: dict[str, Any]) -> list[str]:
    """The keys each rank had written at the checkpoint (the rest are lost with the model)."""
    keys: list[str] = []
    for rank, out in enumerate(outs):
        pairs = _keys(out, rank)
        assert len(pairs) >= ckpt["counts"][rank]
        keys += [k for _, k in pairs[: ckpt["counts"][rank]]]
    return keys


def _exactly_once(got: list[str], data: Data) -> None:
    counts = Counter(got)
    twice = sorted(k for k, n in counts.items() if n > 1)
    missing = sorted(set(data.keys) - set(counts))
    extra = sorted(set(counts) - set(data.keys))
    assert not (twice or missing or extra), (
        f"{len(twice)} twice {twice[:5]}, {len(missing)} missing {missing[:5]}, extra {extra[:5]}")


def _done(out: Path, rank: int = 0) -> dict[str, Any]:
    return json.loads((out / f"done-rank{rank}.json").read_text())


# ------------------------------------------------------------------------ 1. SIGKILL + resume


@pytest.mark.slow
@pytest.mark.parametrize("kind", ALL)
def test_sigkill_then_resume_reads_every_sample_once(data: Data, tmp_path: Path,
                                                     kind: str) -> None:
    """A job on 2 workers is SIGKILLed a random number of batches after its first checkpoint;
    jobs resumed from the checkpoint on 2, 1 and 3 workers (at once, each on its own) each
    complete the epoch: with the keys up to the checkpoint, every sample exactly once. The next
    epoch (3.) is a whole epoch, reshuffled."""
    seed = random.SystemRandom().randrange(10**6)
    extra = random.Random(seed).randint(1, 6)  # batches past the first checkpoint
    ckpt_path, run1 = tmp_path / "ckpt.json", tmp_path / "run1"
    _kill_after_checkpoint(_cmd(kind, data, run1, workers=2, every=3, ckpt=ckpt_path), run1,
                           extra)
    ckpt = json.loads(ckpt_path.read_text())
    before = _checkpointed([run1], ckpt)
    assert 0 < len(before) < len(data.keys), f"seed {seed}"
    assert ckpt["state"]["delivered"] == len(before)

    runs = {w: tmp_path / f"resume-{w}workers" for w in (2, 1, 3)}
    _run([_cmd(kind, data, out, workers=w, resume=ckpt_path, epochs=2 if w == 2 else 1)
          for w, out in runs.items()])
    for workers, out in runs.items():
        resumed = _keys(out)
        rest = _epoch(resumed, 0)
        try:
            _exactly_once(before + rest, data)
        except AssertionError as exc:
            raise AssertionError(f"resumed on {workers} workers (killed {extra} batches after "
                                 f"the first checkpoint, seed {seed}): {exc}") from None
        if workers == 2:
            # 3. The next epoch is a whole epoch, and reshuffled.
            next_epoch = _epoch(resumed, 1)
            assert len(rest) + len(next_epoch) == len(resumed)
            _exactly_once(next_epoch, data)
            assert next_epoch != before + rest


@pytest.mark.slow
@pytest.mark.parametrize("kind", ALL)
def test_sigkill_in_a_later_epoch_of_live_workers_then_resume(data: Data, tmp_path: Path,
                                                              kind: str) -> None:
    """Workers live across epochs: a job's 2 workers read a whole epoch, then the job is
    SIGKILLed in its second epoch after a checkpoint; a job resumed from it on 1 worker completes
    that epoch, every sample once."""
    ckpt_path, run1, run2 = tmp_path / "ckpt.json", tmp_path / "run1", tmp_path / "run2"
    _kill_after_checkpoint(_cmd(kind, data, run1, workers=2, epochs=2, every=3,
                                ckpt_from_epoch=1, ckpt=ckpt_path), run1, 2)
    ckpt = json.loads(ckpt_path.read_text())
    assert ckpt["epoch"] == 1
    first = _keys(run1)
    _exactly_once(_epoch(first, 0), data)
    before = [k for e, k in first[: ckpt["counts"][0]] if e == 1]
    assert 0 < len(before) == ckpt["state"]["delivered"] < len(data.keys)
    _run([_cmd(kind, data, run2, workers=1, resume=ckpt_path)])
    _exactly_once(before + _epoch(_keys(run2), 1), data)


# -------------------------------------------------------------- 2. distributed: keep and drop


def _two_ranks(kind: str, data: Data, outs: list[Path], **options: Any) -> list[list[str]]:
    port = free_port()
    return [_cmd(kind, data, outs[r], rank=r, world=2, port=port, **options) for r in range(2)]


@pytest.mark.slow
@pytest.mark.parametrize("kind", DIST)
def test_two_ranks_keep_and_drop(data: Data, tmp_path: Path, kind: str) -> None:
    """2 ranks x 2 workers, 7 unequal shards. ``keep``: every sample once across the ranks,
    which are uneven. ``drop`` (run at the same time, for two epochs, checkpointing - a
    collective - every 3 steps): every rank the same number of batches, nothing hangs, and
    each rank's batches are exactly its first ``keep`` batches up to the shorter rank's end
    (the documented rule: every rank stops when the first runs out)."""
    keep = [tmp_path / "keep0", tmp_path / "keep1"]
    drop = [tmp_path / "drop0", tmp_path / "drop1"]
    _run(_two_ranks(kind, data, keep, workers=2, uneven="keep", epochs=2)
         + _two_ranks(kind, data, drop, workers=2, uneven="drop", epochs=2, every=3,
                      ckpt=tmp_path / "ckpt.json"))
    for epoch in range(2):
        per_rank = [_epoch(_keys(keep[r], r), epoch) for r in range(2)]
        assert len(per_rank[0]) != len(per_rank[1])  # the ranks really were uneven
        _exactly_once(per_rank[0] + per_rank[1], data)

    batches = [_done(drop[r], r)["batches"] for r in range(2)]
    assert batches[0] == batches[1]
    for epoch in range(2):
        # "drop" stops every rank when the first runs out: each rank yields the batches it
        # yields with "keep", up to the step where the shorter rank's end
        kept = [_batch_log(keep[r], r, epoch) for r in range(2)]
        steps = min(len(kept[0]), len(kept[1]))
        assert batches[0][epoch] == steps
        for r in range(2):
            assert _batch_log(drop[r], r, epoch) == kept[r][:steps], (epoch, r)
    # and says so, once an epoch, on rank 0: how many each rank dropped (issue #37; not
    # DataLoader2, whose reading service stops the ranks itself)
    if kind == "dl2":
        return
    warned = "".join(log.read_text() for log in drop[0].glob("stderr-*.txt"))
    for epoch in range(2):
        every = sum(len(_epoch(_keys(keep[r], r), epoch)) for r in range(2))
        trained = sum(len(_epoch(_keys(drop[r], r), epoch)) for r in range(2))
        assert f"epoch {epoch} ended when the first of the 2 ranks" in warned, warned[-2000:]
        assert f"{every - trained} in all" in warned, warned[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("kind", DIST)
def test_resume_across_rank_counts(data: Data, tmp_path: Path, kind: str) -> None:
    """A 2-rank job crashes after a mid-epoch checkpoint and resumes on 1 rank, from the merged
    state and from the list of per-rank states; a 1-rank job crashes and resumes on 2 ranks (all
    at once): every sample exactly once across the runs. gather_state gave every rank the same
    merged state."""
    two, one = tmp_path / "two-to-one", tmp_path / "one-to-two"
    two_ranks = [two / "r0", two / "r1"]
    one_rank = one / "single"
    _run([*_two_ranks(kind, data, two_ranks, workers=2, uneven="keep", every=2, ckpt_until=4,
                      stop_after=5, ckpt=two / "ckpt.json"),
          _cmd(kind, data, one_rank, workers=2, every=3, ckpt_until=6, stop_after=7,
               ckpt=one / "ckpt.json")], expect=3)
    ckpt_two = json.loads((two / "ckpt.json").read_text())
    ckpt_one = json.loads((one / "ckpt.json").read_text())
    assert (ckpt_two["step"], ckpt_one["step"]) == (4, 6)
    gathered = [json.loads((out / f"gathered-rank{r}.json").read_text())
                for r, out in enumerate(two_ranks)]
    assert gathered[0] == gathered[1] == {"state": ckpt_two["state"], "step": 4}
    assert len(ckpt_two["ranks"]) == 2 and ckpt_two["ranks"][0] != ckpt_two["ranks"][1]
    resumed_one, from_list = two / "single", two / "single-from-list"
    resumed_two = [one / "r0", one / "r1"]
    _run([_cmd(kind, data, resumed_one, workers=2, resume=two / "ckpt.json"),
          [*_cmd(kind, data, from_list, workers=1, resume=two / "ckpt.json"), "--resume-ranks"],
          *_two_ranks(kind, data, resumed_two, workers=2, uneven="keep",
                      resume=one / "ckpt.json")])
    _exactly_once(_checkpointed(two_ranks, ckpt_two) + _epoch(_keys(resumed_one), 0), data)
    _exactly_once(_checkpointed(two_ranks, ckpt_two) + _epoch(_keys(from_list), 0), data)
    _exactly_once(_checkpointed([one_rank], ckpt_one) + _epoch(_keys(resumed_two[0], 0), 0)
                  + _epoch(_keys(resumed_two[1], 1), 0), data)


@pytest.mark.slow
@pytest.mark.parametrize("kind", DIST)
def test_keep_checkpoints_after_a_rank_has_finished(data: Data, tmp_path: Path,
                                                    kind: str) -> None:
    """2 uneven ranks (``keep``) call gather_state at every step; the short rank runs out and
    leaves its loop (it calls nothing more, and waits at a barrier), the long one goes on
    checkpointing. Before: the long rank's next gather_state was a collective the short one
    never joined, and the job failed. A checkpoint taken after the short rank finished resumes
    on one rank: every sample exactly once."""
    ranks = [tmp_path / "r0", tmp_path / "r1"]
    _run(_two_ranks(kind, data, ranks, workers=2, uneven="keep", every=1, ckpt_by_file=True,
                    ckpt=tmp_path / "ckpt-{step}.json"))
    steps = [_done(ranks[r], r)["batches"][0] for r in range(2)]
    short, step = min(range(2), key=lambda r: steps[r]), min(steps) + 1
    assert steps[0] != steps[1]  # the ranks really were uneven
    ckpt = json.loads((tmp_path / f"ckpt-{step}.json").read_text())
    counts = [json.loads((out / f"counts-rank{r}.json").read_text()) for r, out in
              enumerate(ranks)]
    assert str(step) not in counts[short] and str(step) in counts[1 - short]
    ckpt["counts"] = [counts[r].get(str(step), len(_keys(ranks[r], r))) for r in range(2)]
    before = _checkpointed(ranks, ckpt)
    assert ckpt["state"]["delivered"] == len(before) < len(data.keys)
    resumed = tmp_path / "resumed"
    _run([_cmd(kind, data, resumed, workers=2, resume=tmp_path / f"ckpt-{step}.json")])
    _exactly_once(before + _epoch(_keys(resumed), 0), data)


# ------------------------------------------------------------------ 4. bytes read on resume


@pytest.mark.slow
@pytest.mark.parametrize("kind", ALL)
def test_resume_reads_partial_shards_from_their_offset(data: Data, tmp_path: Path,
                                                       kind: str) -> None:
    """A shard in progress at the checkpoint is read again from its first undelivered sample
    (``Range: bytes=<offset>-``), a finished shard not at all. Prints what was read again."""
    ckpt_path, run1, run2 = tmp_path / "ckpt.json", tmp_path / "run1", tmp_path / "run2"
    with _proxy(data.endpoint) as first:
        _run([_cmd(kind, data, run1, endpoint=first.endpoint, workers=2, every=15,
                   ckpt_until=15, stop_after=16, ckpt=ckpt_path)], expect=3)
    ckpt = json.loads(ckpt_path.read_text())
    state = ckpt["state"]
    partial = {int(s): v for s, v in state["partial"].items()}
    done = {i for lo, hi in state["done"] for i in range(lo, hi + 1)}
    assert done, f"the checkpoint should come after a shard was finished: {state}"
    assert any(offset > 0 for _, offset, _, _ in partial.values()), (
        f"the checkpoint should catch a shard part-read: {state}")
    with _proxy(data.endpoint) as second:
        _run([_cmd(kind, data, run2, endpoint=second.endpoint, workers=2, resume=ckpt_path)])
    _exactly_once(_checkpointed([run1], ckpt) + _epoch(_keys(run2), 0), data)

    gets: dict[str, list[dict[str, Any]]] = {}
    for record in second.recorded_gets():
        gets.setdefault(record["object"], []).append(record)
    for shard in done:
        assert data.names[shard] not in gets, f"finished shard {shard} was read again"
    reread = remainder = naive = 0
    for shard, (lo, offset, above, _total) in partial.items():
        size, spans = data.spans(shard)
        assert offset == (spans[lo - 1][1] if lo else 0)  # a sample boundary
        for ordinal, end in above:
            assert end == spans[ordinal][1]
        requests = gets.get(data.names[shard], [])
        assert requests, f"shard {shard} in progress was not read"
        first_get = requests[0]
        if lo > 0:
            assert offset > 0
            assert first_get["range"] == f"bytes={offset}-", (shard, first_get["range"])
        else:
            assert first_get["range"] in (None, "bytes=0-")
        assert len(requests) == 1
        assert first_get["bytes"] == size - offset
        reread += sum(spans[o][1] - spans[o][0] for o, _ in above)
        remainder += size - offset
        naive += offset + sum(spans[o][1] - spans[o][0] for o, _ in above)

    delivered = sum(data.spans(s)[0] for s in done) + sum(
        p[1] + sum(data.spans(s)[1][o][1] - data.spans(s)[1][o][0] for o, _ in p[2])
        for s, p in partial.items())
    fetched_by_ckpt = sum(n for r in first.recorded_gets() for t, n in r["writes"]
                          if t <= ckpt["time"])
    fetched_total = sum(r["bytes"] for r in first.recorded_gets())
    print(f"\n[{kind}] checkpoint at step {ckpt['step']}: {state['delivered']} samples "
          f"delivered, {len(done)} shard(s) done, {len(partial)} in progress; "
          f"bytes of delivered samples {delivered}")
    print(f"[{kind}] resume: GET bytes for shards in progress {remainder} "
          f"(from their checkpointed offsets); of these, re-read (samples delivered beyond the "
          f"offset, read again and skipped) {reread}; a restart from byte 0 would re-read "
          f"{naive}")
    print(f"[{kind}] in flight at the checkpoint: fetched by the first job before the "
          f"checkpoint {fetched_by_ckpt} - delivered {delivered} = "
          f"{fetched_by_ckpt - delivered} bytes (the first job fetched {fetched_total} in all "
          f"before its crash one step later)")


class _proxy:
    def __init__(self, upstream: str) -> None:
        self.proxy = RecordingProxy(upstream)

    def __enter__(self) -> RecordingProxy:
        return self.proxy.start()

    def __exit__(self, *exc: object) -> None:
        self.proxy.stop()
