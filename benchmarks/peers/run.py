"""``python -m benchmarks.suite --peers``: aisio beside litdata, MosaicML streaming,
s3torchconnector and the aistore SDK's ``AISShardReader`` on the same local AIStore.

The suite side: starts (or joins) the cluster, turns on AIStore's ``S3-Reverse-Proxy`` feature
(the proxy serves S3 requests itself instead of answering 307, which the S3 clients do not
follow), creates each peer's environment (:mod:`benchmarks.peers.envs`), generates the workloads'
tar shards and uploads them, converts them once into litdata's and MDS's formats with the peers'
own writers (:mod:`benchmarks.peers.convert`) and uploads those, then runs every system on every
workload and worker count, round after round (systems alternated), and writes ``table.md``,
``results.json`` and ``results.png`` (:mod:`benchmarks.peers.report`).

Each throughput run is a child forked from a server of the system's environment
(:mod:`benchmarks.peers.side` ``--serve``, torch and the system imported once); a fresh job and
the two halves of a resume are new interpreters, timed from before their start.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from benchmarks.net.netns import ShapingError
from benchmarks.net.shaped import describe_probe, probe_path, shaped
from benchmarks.net.spec import Network
from benchmarks.net.toxiproxy import ToxiproxyError
from benchmarks.peers.envs import cache_dir, peer_python
from benchmarks.suite import run as suite_run

SYSTEMS = ("aisio", "litdata", "streaming", "s3torch", "sdk")
ENVS = {"litdata": "litdata", "streaming": "streaming", "s3torch": "s3torch", "sdk": "sdk"}
"""The environment of each peer (aisio runs in the suite's own)."""
FORMATS = {"litdata": "litdata", "streaming": "mds"}
"""The peers that read their own format (converted once by their own writer)."""
S3_REVERSE_PROXY = 1 << 13
"""AIStore's ``S3-Reverse-Proxy`` feature bit (cmn/feat: the 14th cluster feature)."""

# option: (full, --quick)
PEER_SIZES: dict[str, tuple[int, int]] = {
    "large_shards": (4, 2), "large_per_shard": (500, 60),
    "small_shards": (2, 2), "small_per_shard": (50_000, 3_000),
    "jpegs": (2048, 256), "jpegs_per_shard": (256, 64), "jpeg_px": (256, 128),
    "repeat": (3, 1), "fresh_repeat": (3, 1), "probe_mb": (64, 16),
    "objects": (50_000, 1_000), "object_min_kib": (10, 10), "object_max_kib": (110, 110),
}
WORKERS = (0, 2)
OBJECT_ARMS: dict[str, tuple[str, dict[str, Any]]] = {
    "aisio-getbatch": ("aisio", {"batch_get": 64}),
    "aisio-threads": ("aisio", {"concurrency": 16}),
    "sdk-iter": ("sdk", {"dataset": "iter"}),
    "sdk-getbatch": ("sdk", {"dataset": "batch", "max_batch_size": 64}),
    "s3torch-map": ("s3torch", {"dataset": "map"}),
    "s3torch-iter": ("s3torch", {"dataset": "iterable"}),
    "s3torch-uris": ("s3torch", {"dataset": "uris"}),
}
"""The ``objects`` workload's arms: ``arm: (system, its options)`` (litdata and MosaicML
streaming read their own formats, not a bucket of objects)."""
CACHE_ARM = ("aisio-cache", ("aisio", {"shard_cache": True}))
"""aisio with a ShardCache (later epochs from local disk): run on networks of 1 gbit or less."""
CACHE_RATE = 1_000_000_000
BATCH = 64

NOTES = [
    "Every system reads the same samples from the same AIStore (one proxy, one target on "
    "127.0.0.1): aisio, s3torchconnector and the SDK the tar shards, litdata and MosaicML "
    "streaming their own format converted once from them by their own writers (litdata "
    "`optimize`, `MDSWriter`; 64 MiB chunks).",
    "S3 access: AIStore's S3 API at <endpoint>/s3 with the cluster feature S3-Reverse-Proxy on "
    "(the proxy serves the request instead of answering 307); dummy keys, us-east-1, "
    "path-style. litdata reads its index with boto3 and its chunks with obstore, MosaicML "
    "streaming uses boto3, s3torchconnector the AWS CRT. "
    "aisio and the SDK use AIStore's native API.",
    "A batch is 64 samples as keys, payloads (a list of bytes; decode: a uint8 tensor "
    "stacked, JPEG decoded with PIL in every peer, by aisio with simplejpeg, its jpeg extra: "
    "the same pixels) and a label tensor. No shuffle (each "
    "system in its stored order).",
    "Throughput: each round a fresh process (forked from a server of the system's "
    "environment that imported torch and the system once) builds the loader and reads two "
    "epochs; epoch 1 is timed from the loader's construction, so it includes the first "
    "batch; epoch 2 is the steady state (litdata and streaming then read their local chunk "
    "cache); gap: from the last batch of epoch 1 to the first of epoch 2. Medians over the "
    "rounds, systems alternated within each round.",
    "Fresh job: a new interpreter, timed from before its start to its first batch (imports "
    "included), with an empty cache. Resume: a new interpreter reads half an epoch, saves "
    "the loader's state (what `state_dict()` gives) and exits; another starts, loads it, and "
    "reads to the end; lost/repeated count the sample keys of the two against the epoch's. "
    "'GET MB' is what AIStore served during the second process (its target's get.size). "
    "Systems without a loader state start the epoch over.",
    "Peak memory: the process's RSS plus its workers' private pages (polled every 20 ms). "
    "Cache: bytes left in the system's cache directory after the run.",
    "Client CPU s/GB: user + system seconds of the job's process tree (the process, its "
    "reaped children, its live DataLoader workers) over both epochs, over twice the data.",
    "Objects: plain objects of 10-110 KiB, one per sample, the label from the name; litdata "
    "and MosaicML streaming read their own formats and are not in this workload. "
    "s3torchconnector's from_prefix datasets list the prefix through AIStore's S3 API, "
    "which the AWS CRT fails to parse (an empty ETag); from_objects takes the names.",
    "Networks: 'loopback' is the machine's own; a shaped network runs the clients in a "
    "network namespace behind toxiproxy (the round trip, half each way) and tc tbf on a "
    "veth pair (the bandwidth); the line above each network's tables is what the path "
    "measured just before. aisio + ShardCache runs on networks of 1 Gbit/s or less.",
]


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def sizes(quick: bool, overrides: dict[str, int | None] | None = None) -> dict[str, int]:
    """Returns the run's sizes: the full (or ``--quick``) defaults with ``overrides`` applied."""
    chosen = {k: (q if quick else f) for k, (f, q) in PEER_SIZES.items()}
    chosen.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return chosen


# ---- the cluster ----------------------------------------------------------------------------
def _request(method: str, url: str) -> bytes:
    with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=30) as r:
        return bytes(r.read())


def features(endpoint: str) -> int:
    """Returns the cluster's feature flags (the proxy's config)."""
    config = json.loads(_request("GET", f"{endpoint}/v1/daemon?what=config"))
    return int(config.get("features") or 0)


def set_features(endpoint: str, flags: int) -> None:
    """Sets the cluster's feature flags."""
    _request("PUT", f"{endpoint}/v1/cluster/set-config?features={flags}")


def get_bytes(endpoint: str) -> int:
    """Returns the bytes every target has served to GETs so far (``get.size``)."""
    stats = json.loads(_request("GET", f"{endpoint}/v1/cluster?what=node_stats"))
    return sum(int(t.get("tracker", {}).get("get.size", 0)) for t in stats["target"].values())


# ---- processes ------------------------------------------------------------------------------
class _Server(suite_run._Server):
    """``python -m benchmarks.peers.side --serve SYSTEM`` in a system's environment."""

    def __init__(self, python: str, system: str, prefix: list[str]) -> None:
        root = Path(__file__).resolve().parents[2]
        env = {**os.environ, "PYTHONPATH": str(root)}
        self.proc = subprocess.Popen(
            [*prefix, python, "-m", "benchmarks.peers.side", "--serve", system], cwd=root,
            env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


class Runner:
    """Runs jobs of each system: forked from its server, or in a new interpreter; each
    started under ``prefix`` (``ip netns exec <name>``: inside a shaped network), if given."""

    def __init__(self, pythons: dict[str, str], timeout: float,
                 prefix: list[str] | None = None) -> None:
        self.pythons = pythons
        self.timeout = timeout
        self.prefix = list(prefix or [])
        self.servers: dict[str, _Server] = {}

    def close(self) -> None:
        for server in self.servers.values():
            server.close()

    def forked(self, job: dict[str, Any]) -> dict[str, Any]:
        """Returns the result of ``job`` run in a child of its system's server."""
        system = job["system"]
        server = self.servers.get(system)
        if server is None or server.proc.poll() is not None:
            server = self.servers[system] = _Server(self.pythons[system], system, self.prefix)
        with tempfile.TemporaryDirectory(prefix="aisio-peer-") as tmp:
            spec, out = Path(tmp, "job.json"), Path(tmp, "result.json")
            progress = Path(tmp, "progress.json")
            spec.write_text(json.dumps({**job, "progress": str(progress)}))
            pid = server.start(spec, out)
            if pid is None:
                return {"ok": False, "error": "the system's server is gone", "peak_rss": 0}
            exit_file = Path(f"{out}.exit")

            def poll() -> int | None:
                try:
                    return int(exit_file.read_text())
                except (OSError, ValueError):
                    return None

            def kill() -> None:
                with contextlib.suppress(OSError):
                    os.kill(pid, 9)

            result = suite_run._watch(pid, poll, kill, out, self.timeout)
            if not result["ok"] and "timed out" in result.get("error", ""):
                with contextlib.suppress(OSError, ValueError):
                    where = json.loads(progress.read_text())
                    result["error"] += (f" in epoch {where['epoch']}, {where['samples']:,} "
                                        "samples into it")
            return result

    def fresh(self, job: dict[str, Any]) -> dict[str, Any]:
        """Returns the result of ``job`` in a new interpreter, with ``started_at`` (the wall
        time just before it was started)."""
        root = Path(__file__).resolve().parents[2]
        with tempfile.TemporaryDirectory(prefix="aisio-peer-") as tmp:
            spec, out = Path(tmp, "job.json"), Path(tmp, "result.json")
            spec.write_text(json.dumps({**job, "progress": str(Path(tmp, "progress.json"))}))
            env = {**os.environ, "PYTHONPATH": str(root)}
            started = time.time()
            proc = subprocess.Popen([*self.prefix, self.pythons[job["system"]], "-m",
                                     "benchmarks.peers.side",
                                     str(spec), str(out)], cwd=root, env=env,
                                    stdout=subprocess.DEVNULL)
            result = suite_run._watch(proc.pid, proc.poll, proc.kill, out, self.timeout)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
            result["started_at"] = started
            return result


# ---- one run --------------------------------------------------------------------------------
class PeersRun:
    """One run of the peers' benchmark on one cluster and bucket."""

    def __init__(self, endpoint: str, bucket: str, client: Any, uploader: Any,
                 cfg: dict[str, Any], systems: tuple[str, ...], runner: Runner,
                 scratch: Path) -> None:
        self.endpoint, self.bucket, self.client, self.up = endpoint, bucket, client, uploader
        self.cfg, self.systems, self.runner, self.scratch = cfg, systems, runner, scratch
        self.data: dict[str, Any] = {}
        self.prefixes: dict[tuple[str, str], str] = {}

    def prepare(self) -> None:
        """Generates, uploads and converts every workload's data."""
        c = self.cfg
        only = set(c.get("only") or ("large", "small", "decode", "objects"))
        if "large" in only:
            self.data["large"] = self.up.random_shards("peers-large", c["large_shards"],
                                                       c["large_per_shard"], 100 * 1024, salt=11)
        if "small" in only:
            self.data["small"] = self.up.random_shards("peers-small", c["small_shards"],
                                                       c["small_per_shard"], 2 * 1024, salt=12)
        if "decode" in only:
            self.data["decode"] = self.up.jpeg_shards("peers-decode", c["jpegs"],
                                                      c["jpegs_per_shard"], c["jpeg_px"],
                                                      salt=13)
        if c["objects"] and "objects" in only:
            self.data["objects"] = put_objects(self.up, "peers-objects", c["objects"],
                                               c["object_min_kib"], c["object_max_kib"], 14)
        for system in self.systems:
            if system in FORMATS:
                for workload, data in self.data.items():
                    if workload == "objects":
                        continue
                    self.prefixes[(system, workload)] = self._convert(system, workload, data)

    def _convert(self, system: str, workload: str, data: Any) -> str:
        from aisio.core.store.urls import AISPath, Bucket

        out = self.scratch / f"{system}-{workload}"
        job = {"system": system, "endpoint": self.endpoint, "bucket": self.bucket,
               "tars": list(data.names), "out": str(out)}
        spec = self.scratch / f"convert-{system}-{workload}.json"
        spec.write_text(json.dumps(job))
        root = Path(__file__).resolve().parents[2]
        started = time.monotonic()
        done = subprocess.run([self.runner.pythons[system], "-m", "benchmarks.peers.convert",
                               str(spec)], cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                              capture_output=True, text=True, timeout=3600)
        if done.returncode:
            raise RuntimeError(f"converting {workload} for {system} failed:\n{done.stderr[-3000:]}")
        samples = json.loads(done.stdout.strip().splitlines()[-1])["samples"]
        if samples != data.samples:
            raise RuntimeError(f"{system} wrote {samples} samples of {workload}, not "
                               f"{data.samples}")
        prefix = f"{FORMATS[system]}/{workload}"
        total = 0
        for path in sorted(p for p in out.rglob("*") if p.is_file()):
            with open(path, "rb") as fh:
                self.client.put_object(AISPath(Bucket(self.bucket),
                                               f"{prefix}/{path.relative_to(out)}"), fh)
            total += path.stat().st_size
        shutil.rmtree(out, ignore_errors=True)
        _log(f"aisio bench: converted {workload} for {system} ({total / 1e6:,.0f} MB, "
             f"{time.monotonic() - started:.0f} s)")
        return prefix

    def job(self, system: str, workload: str, workers: int, mode: str, **extra: Any
            ) -> dict[str, Any]:
        """Returns the job of one system on one workload (a fresh cache directory)."""
        data = self.data[workload]
        cache = self.scratch / "cache" / uuid.uuid4().hex[:10]
        prefix = data.prefix if workload == "objects" else self.prefixes.get((system, workload),
                                                                               "")
        return {"system": system, "workload": workload, "workers": workers, "mode": mode,
                "batch": BATCH, "endpoint": self.endpoint, "bucket": self.bucket,
                "tars": [] if workload == "objects" else list(data.names), "prefix": prefix,
                "objects": list(data.names) if workload == "objects" else [],
                "cache": str(cache), **extra}

    def arms(self, workload: str, network: Network | None) -> list[tuple[str, str, dict[str, Any]]]:
        """Returns ``(arm, system, options)`` of each arm run on ``workload`` over
        ``network``: every system on shards (and aisio with a ShardCache over a link of
        ``CACHE_RATE`` or less), the object readers on ``objects``."""
        chosen = self.cfg.get("arms")
        if workload == "objects":
            return [(arm, system, options) for arm, (system, options) in OBJECT_ARMS.items()
                    if system in self.systems and (not chosen or arm in chosen)]
        arms: list[tuple[str, str, dict[str, Any]]] = [(system, system, {})
                                                       for system in self.systems]
        slow = network is not None and network.rate_bit is not None \
            and network.rate_bit <= CACHE_RATE
        if slow and "aisio" in self.systems:
            arms.append((CACHE_ARM[0], *CACHE_ARM[1]))
        return arms

    def throughput(self, network: Network | None = None) -> list[dict[str, Any]]:
        """Returns one row per (workload, workers, arm): medians over the rounds, each row
        naming the network it was read over."""
        label = network.label if network is not None else "loopback"
        rows: list[dict[str, Any]] = []
        for workload, data in self.data.items():
            arms = self.arms(workload, network)
            for workers in WORKERS:
                runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm, _, _ in arms}
                for turn in range(self.cfg["repeat"]):
                    for arm, system, options in arms:
                        if runs[arm] and not runs[arm][-1]["ok"]:
                            continue
                        job = self.job(system, workload, workers, "epochs", options=options)
                        result = self.runner.forked(job)
                        shutil.rmtree(job["cache"], ignore_errors=True)
                        if result["ok"] and result["epoch_samples"] != [data.samples] * 2:
                            result = {**result, "ok": False, "error":
                                      f"read {result['epoch_samples']} samples, the epoch has "
                                      f"{data.samples}"}
                        runs[arm].append(result)
                        _log(f"aisio bench: peers [{label}] {workload:<7} w={workers} "
                             f"[{turn + 1}/{self.cfg['repeat']}] {arm:<14} "
                             f"{_status(result, data.samples)}")
                rows.extend({**_merge(workload, workers, arm, done, data.samples, data.nbytes),
                             "network": label} for arm, done in runs.items())
        return rows

    def fresh_jobs(self) -> list[dict[str, Any]]:
        """Returns, per system, the median time from a new process's start to its first batch
        (``small``, 2 workers, empty cache)."""
        runs: dict[str, list[dict[str, Any]]] = {s: [] for s in self.systems}
        for round_ in range(self.cfg["fresh_repeat"]):
            turn = round_ % len(self.systems)  # each system first in turn (the first job after
            for system in self.systems[turn:] + self.systems[:turn]:  # the throughput runs is slow)
                job = self.job(system, "small", 2, "fresh")
                result = self.runner.fresh(job)
                shutil.rmtree(job["cache"], ignore_errors=True)
                runs[system].append(result)
        rows: list[dict[str, Any]] = []
        for system, done in runs.items():
            ok = [r for r in done if r["ok"]]
            rows.append({"system": system, "ok": bool(ok) and len(ok) == len(done),
                         "error": next((r["error"] for r in done if not r["ok"]), None),
                         "first_s": _median([r["first_at"] - r["started_at"] for r in ok]),
                         "build_to_first_s": _median([r["first_s"] for r in ok]),
                         "peak_mb": max((r.get("peak_rss", 0) for r in done), default=0) / 1e6})
            _log(f"aisio bench: peers fresh job {system:<9} first batch "
                 f"{_fmt_s(rows[-1]['first_s'])} from process start")
        return rows

    def resume(self) -> list[dict[str, Any]]:
        """Returns, per system, a mid-epoch resume of ``small`` with 2 workers: the new
        process's time to its first batch, the bytes AIStore served it, lost/repeated keys."""
        data = self.data["small"]
        batches = math.ceil(data.samples / BATCH)
        rows = []
        for system in self.systems:
            row: dict[str, Any] = {"system": system, "ok": False}
            cache = self.scratch / "cache" / uuid.uuid4().hex[:10]
            state = self.scratch / f"state-{system}.pkl"
            common = {"cache": str(cache), "state": str(state), "stop_after": batches // 2}
            first = self.runner.fresh({**self.job(system, "small", 2, "resume-a"), **common})
            if not first["ok"]:
                rows.append({**row, "error": first["error"]})
                continue
            time.sleep(1.0)  # (the target's counters settle)
            before = get_bytes(self.endpoint)
            second = self.runner.fresh({**self.job(system, "small", 2, "resume-b"), **common})
            time.sleep(1.0)
            after = get_bytes(self.endpoint)
            shutil.rmtree(cache, ignore_errors=True)
            if not second["ok"]:
                rows.append({**row, "error": second["error"]})
                continue
            second_first = (second["first_at"] - second["started_at"]
                            if second["first_at"] else None)
            row.update(ok=True, resumable=second["resumable"], first_s=second_first,
                       restored_to_first_s=(second["first_at"] - second["restored_at"]
                                            if second["first_at"] else None),
                       get_mb=(after - before) / 1e6, epoch_mb=data.nbytes / 1e6,
                       read_before=len(first["keys"]), read_after=len(second["keys"]),
                       peak_mb=second.get("peak_rss", 0) / 1e6,
                       cache_mb=second.get("cache_bytes", 0) / 1e6,
                       **exactly_once(first["keys"], second["keys"], data.samples))
            rows.append(row)
            _log(f"aisio bench: peers resume {system:<9} first batch {_fmt_s(second_first)}, "
                 f"lost {row['lost']}, repeated {row['repeated']}, GET {row['get_mb']:,.1f} MB")
        return rows


def exactly_once(before: list[str], after: list[str], expected: int) -> dict[str, int]:
    """Returns ``lost`` (of ``expected`` distinct keys, never read) and ``repeated`` (reads
    beyond the first of a key) over the keys read before and after a resume."""
    seen = before + after
    distinct = len(set(seen))
    return {"lost": expected - distinct, "repeated": len(seen) - distinct}


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _fmt_s(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f} s"


def _status(result: dict[str, Any], samples: int) -> str:
    if not result["ok"]:
        return f"FAILED: {result['error'][:300]}"
    e1, e2 = result["epoch_s"]
    return (f"epoch 1 {samples / e1:,.0f}/s, epoch 2 {samples / e2:,.0f}/s, first "
            f"{result['first_s']:.2f} s, gap {result['gap_s'][0]:.3f} s, peak "
            f"{result['peak_rss'] / 1e6:,.0f} MB")


def _merge(workload: str, workers: int, system: str, done: list[dict[str, Any]],
           samples: int, nbytes: int = 0) -> dict[str, Any]:
    ok = bool(done) and all(r["ok"] for r in done)
    row: dict[str, Any] = {"workload": workload, "workers": workers, "system": system, "ok": ok,
                           "rounds": [{k: v for k, v in r.items() if k != "traceback"}
                                      for r in done]}
    if not ok:
        failed = next((r for r in done if not r["ok"]), {"error": "not run"})
        row.update(error=failed["error"], traceback=failed.get("traceback"))
        return row
    row.update(
        epoch1_per_s=samples / statistics.median(r["epoch_s"][0] for r in done),
        epoch2_per_s=samples / statistics.median(r["epoch_s"][1] for r in done),
        first_s=statistics.median(r["first_s"] for r in done),
        gap_s=statistics.median(r["gap_s"][0] for r in done),
        peak_mb=max(r["peak_rss"] for r in done) / 1e6,
        cpu_s_per_gb=(statistics.median(r["cpu_s"] for r in done) / (2 * nbytes / 1e9)
                      if nbytes and all("cpu_s" in r for r in done) else None),
        cache_mb=max(r.get("cache_bytes", 0) for r in done) / 1e6)
    return row


def run_peers(endpoint_arg: str | None, cfg: dict[str, Any], systems: tuple[str, ...],
              timeout: float, networks: tuple[Network | None, ...] = (None,)
              ) -> dict[str, Any]:
    """Returns the report of one peers run (see the module doc): the throughput over each of
    ``networks`` (None: loopback), each probed first; the fresh jobs and the resume over the
    first."""
    from aisio.core.store.client import client_for
    from aisio.core.store.config import AISConfig
    from aisio.core.store.urls import Bucket
    from benchmarks.suite.data import Uploader
    from benchmarks.suite.machine import aistore_version, machine_info
    from benchmarks.suite.suite import cluster

    pythons = {"aisio": sys.executable}
    for system in systems:
        if system in ENVS:
            pythons[system] = peer_python(ENVS[system], log=_log)
    report: dict[str, Any] = {"config": cfg, "systems": list(systems), "notes": NOTES,
                              "versions": {s: _versions(pythons[s], s) for s in systems}}
    with cluster(endpoint_arg) as (endpoint, describe):
        report["machine"] = {**machine_info(), "aistore": aistore_version(endpoint),
                             "cluster": describe}
        flags = features(endpoint)
        set_features(endpoint, flags | S3_REVERSE_PROXY)
        client = client_for(AISConfig(endpoint=endpoint))
        bucket = Bucket(f"aisio-peers-{uuid.uuid4().hex[:8]}")
        client.create_bucket(bucket)
        runner = Runner(pythons, timeout)
        scratch = Path(tempfile.mkdtemp(prefix="aisio-peers-", dir=cache_dir()))
        try:
            up = Uploader(client, bucket, scratch, int(cfg.get("seed", 0)), _log)
            peers = PeersRun(endpoint, bucket.name, client, up, cfg, systems, runner, scratch)
            peers.prepare()
            report["data"] = {k: {"describe": d.describe, "samples": d.samples,
                                  "mb": d.nbytes / 1e6} for k, d in peers.data.items()}
            probe = _put_probe(client, bucket, cfg["probe_mb"])
            report.update(networks=[], throughput=[], fresh=[], resume=[])
            for index, network in enumerate(networks):
                label = network.label if network is not None else "loopback"
                try:
                    with shaped(network, endpoint) as prefix:
                        runner.close()
                        runner = peers.runner = Runner(pythons, timeout, prefix)
                        measured = probe_path(prefix, endpoint, probe)
                        _log(f"aisio bench: network {label}: measured "
                             f"{describe_probe(measured)}")
                        report["networks"].append({"network": label, "probe": measured})
                        report["throughput"] += peers.throughput(network)
                        if index == 0 and "small" in peers.data:
                            report["fresh"] = peers.fresh_jobs()
                            report["resume"] = peers.resume()
                        runner.close()
                except (ShapingError, ToxiproxyError) as exc:  # the next network may work
                    _log(f"aisio bench: network {label} could not be made: {exc}")
                    report["networks"].append({"network": label, "error": str(exc)})
        finally:
            runner.close()
            shutil.rmtree(scratch, ignore_errors=True)
            client.destroy_bucket(bucket)
            set_features(endpoint, flags)
    return report


def put_objects(up: Any, name: str, count: int, min_kib: int, max_kib: int, salt: int) -> Any:
    """Returns the ``objects`` workload: ``count`` plain objects of ``min_kib``-``max_kib``
    KiB (uniform, JPEG-like sizes), ``<name>/obj-<i>.bin``, uploaded 8 at a time."""
    from concurrent.futures import ThreadPoolExecutor

    from aisio.core.store.urls import AISPath
    from benchmarks.suite.data import Dataset

    rng = up.rng(salt)
    pool = rng.bytes(4 << 20)
    sizes = rng.integers(min_kib << 10, (max_kib << 10) + 1, count).tolist()
    starts = rng.integers(0, (4 << 20) - (max_kib << 10), count).tolist()
    data = Dataset(name, f"{name}/", describe=f"{count:,} objects of {min_kib}-{max_kib} KiB, "
                   "one per sample (label from the name)")
    data.names = [f"{name}/obj-{i:06d}.bin" for i in range(count)]
    with ThreadPoolExecutor(8) as threads:
        list(threads.map(lambda i: up.client.put_object(
            AISPath(up.bucket, data.names[i]), pool[starts[i]:starts[i] + sizes[i]]),
            range(count)))
    data.nbytes, data.samples = int(sum(sizes)), count
    _log(f"aisio bench: uploaded {name}: {data.describe}")
    return data


def _put_probe(client: Any, bucket: Any, mb: int) -> str:
    """Puts ``mb`` MiB of random bytes for the network probe; returns its ``ais://`` name."""
    from aisio.core.store.urls import AISPath

    client.put_object(AISPath(bucket, "probe/bandwidth.bin"), os.urandom(mb << 20))
    return f"ais://{bucket.name}/probe/bandwidth.bin"


def _versions(python: str, system: str) -> dict[str, str]:
    packages = {"aisio": ["aisio", "torch", "torchdata", "aistore"],
                "litdata": ["litdata", "torch", "boto3", "numpy"],
                "streaming": ["mosaicml-streaming", "torch", "boto3", "numpy"],
                "s3torch": ["s3torchconnector", "torch"], "sdk": ["aistore", "torch"]}[system]
    code = ("import importlib.metadata as m, json, sys\n"
            "print(json.dumps({p: m.version(p) for p in sys.argv[1:]}))")
    done = subprocess.run([python, "-c", code, *packages], capture_output=True, text=True)
    return json.loads(done.stdout) if done.returncode == 0 else {}


__all__ = ["PEER_SIZES", "SYSTEMS", "exactly_once", "run_peers", "sizes"]
