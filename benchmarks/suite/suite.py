"""The benchmark suite's engine: the cluster, each workload's data, its arms in rounds.

:class:`Suite` generates a workload's data (:mod:`benchmarks.suite.data`), runs every arm of it
in fresh processes (:mod:`benchmarks.suite.run`), round after round so that the arms share the
machine's drifts, and returns summarised results (:mod:`benchmarks.suite.report`).
:mod:`benchmarks.suite.main` is the command line around it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from typing import Any

from aisio.core.store.config import AISConfig
from aisio.core.store.urls import Bucket
from benchmarks.suite.arms import ARMS, Job
from benchmarks.suite.data import TAR_OVERHEAD, Dataset, Uploader
from benchmarks.suite.keepup import KeepUpJob, run_keepup
from benchmarks.suite.report import add_ratios, summarise
from benchmarks.suite.run import run_arm, run_isolated

KiB, MiB = 1 << 10, 1 << 20
KINDS = {"large": "shards", "small": "shards", "objects": "objects", "decode": "decode",
         "epochs": "epochs"}
MEMORY_ARMS = ("aisio", "sdk-tarfile", "webdataset")
"""Arms whose peak memory is measured over a small and a big shard (the target is aisio's)."""


@contextlib.contextmanager
def cluster(endpoint: str | None) -> Iterator[tuple[str, str]]:
    """Yields ``(endpoint, description)``: the given one, AIS_ENDPOINT, or a new playground."""
    explicit = endpoint or AISConfig.from_env().endpoint
    if explicit:
        yield explicit, f"{explicit}"
        return
    from aisio.playground import AISTORE_VERSION, Playground

    with tempfile.TemporaryDirectory(prefix="aisio-bench-pg-") as tmp:
        playground = Playground(tmp, ntargets=1, log=_log)
        try:
            yield playground.up(), f"playground {AISTORE_VERSION}: 1 proxy + 1 target, 127.0.0.1"
        finally:
            playground.down(wipe=True, quiet=True)


class Suite:
    """One run of the suite: generates each workload's data, runs its arms, collects results."""

    def __init__(self, endpoint: str, bucket: Bucket, up: Uploader, cfg: dict[str, Any],
                 arms: Sequence[str] | None) -> None:
        self.endpoint = endpoint
        self.bucket = bucket
        self.up = up
        self.cfg = cfg
        self.only_arms = set(arms) if arms else None
        self.timeout = float(cfg.get("arm_timeout", 1800.0))

    def job(self, kind: str, workload: str, arm: str, data: Dataset, *, repeat: int,
            warmup: int, options: dict[str, Any]) -> Job:
        """Returns the Job of one arm over ``data`` (picklable, for the arm's process)."""
        return Job(kind, workload, arm, self.endpoint, self.bucket.name, data.prefix,
                   tuple(data.names), data.nbytes, data.samples, repeat, warmup, options)

    def run_arm(self, job: Job, rounds: int = 1) -> dict[str, Any]:
        """Returns one arm's summarised result: ``rounds`` fresh processes of one timed pass each.

        Use :meth:`run_rounds` to interleave the rounds of several arms.
        """
        return self.run_rounds([job], rounds)[0]

    def run_rounds(self, jobs: list[Job], rounds: int) -> list[dict[str, Any]]:
        """Returns the results of ``jobs``, run round-robin ``rounds`` times (arm A, B, ..., A, B).

        Interleaving spreads slow drifts of the machine (other processes, caches) over every arm
        instead of loading them onto whichever arm ran at the time. Each round of each arm is a
        fresh process doing ``job.warmup`` untimed passes and ``job.repeat`` (1) timed ones;
        the peak memory is the highest of its rounds.
        """
        runs: list[list[dict[str, Any]]] = [[] for _ in jobs]
        for turn in range(rounds):
            for job, done in zip(jobs, runs, strict=True):
                if done and not done[-1]["ok"]:
                    continue  # it failed: do not fail again in every round
                started = time.monotonic()
                done.append(run_arm(job, timeout=self.timeout))
                self._progress(job, done[-1], turn, rounds, time.monotonic() - started)
        return [self._merge(job, done) for job, done in zip(jobs, runs, strict=True)]

    @staticmethod
    def _merge(job: Job, done: list[dict[str, Any]]) -> dict[str, Any]:
        spec = ARMS[job.kind][job.arm]
        ok = all(r["ok"] for r in done)
        result: dict[str, Any] = {
            "ok": ok, "times": [t for r in done for t in r.get("times", [])],
            "peak_rss": max(r.get("peak_rss", 0) for r in done),
            "base_rss": min((r["base_rss"] for r in done if r.get("base_rss")), default=None),
            "rounds": [{k: v for k, v in r.items() if k != "traceback"} for r in done],
            "epoch_times": [e for r in done for e in r.get("epoch_times", []) if e],
        }
        if not ok:
            failed = next(r for r in done if not r["ok"])
            result.update(error=failed["error"], traceback=failed.get("traceback"))
        summarise(result, job.nbytes, job.samples)
        epochs = int(job.options.get("epochs", 1))
        if ok and job.kind == "epochs" and not job.options.get("long"):
            per_epoch = job.samples / epochs
            result["epoch_rates"] = [
                per_epoch / statistics.median(times[i] for times in result["epoch_times"])
                for i in range(epochs)]
        result.update(arm=job.arm, label=spec.label.format(**job.options),
                      note=spec.note.format(**job.options), options=job.options)
        return result

    @staticmethod
    def _progress(job: Job, result: dict[str, Any], turn: int, rounds: int, took: float) -> None:
        label = ARMS[job.kind][job.arm].label.format(**job.options)
        if result["ok"]:
            rate = job.samples / statistics.median(result["times"])
            status = (f"{job.nbytes / 1e6 * rate / job.samples:,.0f} MB/s, {rate:,.0f}/s, "
                      f"peak {result['peak_rss'] / 1e6:,.0f} MB")
        else:
            status = f"FAILED: {result['error']}"
        _log(f"aisio bench: {job.workload:<8} [{turn + 1}/{rounds}] {label:<36} {status} "
             f"({took:.0f} s)")

    def dataset(self, workload: str) -> Dataset:
        """Returns the data of ``large``, ``small``, ``objects`` or ``decode``, uploaded."""
        c, up = self.cfg, self.up
        if workload == "large":
            member = int(c["large_member_kb"] * KiB)
            per = max(1, int(c["large_shard_mb"] * MiB) // (member + TAR_OVERHEAD))
            return up.random_shards("large", int(c["large_shards"]), per, member, salt=1)
        if workload == "small":
            return up.random_shards("small", int(c["small_shards"]), int(c["small_members"]),
                                    int(c["small_member_kb"] * KiB), salt=2)
        if workload == "objects":
            return up.objects("objects", int(c["objects"]), int(c["object_kb"] * KiB), salt=3)
        if workload == "epochs":
            return up.random_shards("epochs", int(c["epoch_shards"]), int(c["epoch_members"]),
                                    int(c["small_member_kb"] * KiB), salt=8)
        return up.jpeg_shards("decode", int(c["jpegs"]), int(c["jpegs_per_shard"]),
                              int(c["jpeg_px"]), salt=4)

    def workload(self, name: str) -> dict[str, Any]:
        """Returns the results of every arm of one workload, with ratios."""
        data = self.dataset(name)
        kind = KINDS[name]
        jobs = []
        for arm, spec in ARMS[kind].items():
            if self.only_arms and arm not in self.only_arms:
                continue
            options = {**spec.options, **{k: self.cfg[k] for k in spec.options
                                         if k in ("concurrency", "batch_objects", "decode")}}
            jobs.append(self.job(kind, name, arm, data, repeat=1,
                                 warmup=int(self.cfg["warmup"]), options=options))
        if kind == "epochs":  # a pass is several epochs (or one as long)
            jobs = [dataclasses.replace(job, nbytes=job.nbytes * job.options["epochs"],
                                        samples=job.samples * job.options["epochs"])
                    for job in jobs]
        results = self.run_rounds(jobs, int(self.cfg["repeat"]))
        add_ratios(results)
        return {"describe": data.describe, "kind": kind, "nbytes": data.nbytes,
                "samples": data.samples, "objects": len(data.names), "arms": results}

    def memory(self) -> dict[str, Any]:
        """Returns the peak memory of aisio (and of the tarfile readers) over a small/big shard."""
        member = 100 * KiB
        shards = {}
        for key, salt in (("small", 6), ("big", 7)):
            per = max(1, int(self.cfg[f"mem_{key}_mb"]) * 1_000_000 // (member + TAR_OVERHEAD))
            shards[key] = self.up.random_shards(f"mem-{key}", 1, per, member, salt=salt)
        out: dict[str, Any] = {f"{k}_mb": round(d.nbytes / 1e6) for k, d in shards.items()}
        out["arms"] = []
        for arm in MEMORY_ARMS:
            if self.only_arms and arm not in self.only_arms:
                continue
            row: dict[str, Any] = {"arm": arm, "label": ARMS["shards"][arm].label}
            for key, data in shards.items():
                job = self.job("shards", f"mem-{key}", arm, data, repeat=1, warmup=0,
                               options={})
                result = self.run_arm(job)
                base = result.get("base_rss_mb")
                row.update({f"{key}_ok": result["ok"], f"{key}_mb_per_s": result["mb_per_s"],
                            f"{key}_peak_mb": result["peak_rss_mb"] if result["ok"] else None,
                            f"{key}_delta_mb": result["peak_rss_mb"] - base if base else None})
            out["arms"].append(row)
            if arm == "aisio":
                out.update({k: v for k, v in row.items() if k.startswith(("small_", "big_"))})
        return out

    def keepup(self) -> dict[str, Any]:
        """Returns the loader-versus-training window statistics."""
        c = self.cfg
        images = int(c["keepup_images"])
        data = self.up.jpeg_shards("keepup", images, max(64, images // 8), 64, salt=5)
        job = KeepUpJob(self.endpoint, tuple(f"ais://{self.bucket.name}/{n}" for n in data.names),
                        window=int(c["keepup_window"]), windows=int(c["keepup_windows"]))
        result = run_isolated(run_keepup, job, timeout=self.timeout)
        result.update(window=job.window, describe=data.describe)
        if result["ok"]:
            for workers, stats in result["loaders"].items():
                _log(f"aisio bench: keepup   loader, {workers} workers: {stats['mean']:.3f} s / "
                     f"{job.window} it; training {result['train']['mean']:.3f} s / {job.window}")
        else:
            _log(f"aisio bench: keepup FAILED: {result['error']}")
        return result


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


__all__ = ["KINDS", "MEMORY_ARMS", "Suite", "cluster"]
