"""The aisio benchmark suite: aisio against the raw HTTP limit and its neighbours, in one run.

Generates seeded data, uploads it to a bucket of its own (``ais://aisio-bench-<hex>``) on the
local AIStore (or ``--endpoint`` / ``AIS_ENDPOINT``; without either it starts a playground and
stops it at the end), reads it with every arm in a fresh process, and writes ``table.md``,
``results.json`` and ``results.png`` to ``--out``. Workloads:

* ``large``: ~100 MB tars of ~100 KB members (image + class), several shards;
* ``small``: tars of ~2 KB members (+ class);
* ``objects``: 10,000 objects of ~10 KB, listed and loaded one by one;
* ``decode``: JPEGs decoded to tensors through DataLoader2 with 0, 1 and 2 workers;
* ``memory``: peak memory of the aisio pipeline over a 10 MB and a ~1 GB shard;
* ``keepup``: time per 100 loader iterations against time per 100 training steps.

Usage::

    python -m benchmarks.suite                     # the full suite (several minutes)
    python -m benchmarks.suite --quick --out /tmp/b  # small sizes, well under a minute
    python -m benchmarks.suite --only large small --repeat 5
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import tempfile
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aisio.core.faults.errors import AISIOError
from aisio.core.store.client import client_for
from aisio.core.store.config import AISConfig
from aisio.core.store.urls import Bucket
from benchmarks.suite.data import Uploader
from benchmarks.suite.machine import aistore_version, machine_info
from benchmarks.suite.report import markdown, plot, targets, write_json
from benchmarks.suite.suite import KINDS, Suite, cluster

WORKLOADS = ("large", "small", "objects", "decode", "epochs", "memory", "keepup")

# option: (default, --quick default, help)
SIZES: dict[str, tuple[int, int, str]] = {
    "large_shards": (4, 2, "large: number of shards"),
    "large_shard_mb": (100, 4, "large: MiB per shard"),
    "large_member_kb": (100, 100, "large: KiB per image member"),
    "small_shards": (2, 2, "small: number of shards"),
    "small_members": (50_000, 2_000, "small: samples (one 2 KiB member + class) per shard"),
    "small_member_kb": (2, 2, "small: KiB per member"),
    "objects": (10_000, 300, "objects: number of objects"),
    "object_kb": (10, 10, "objects: KiB per object"),
    "jpegs": (4096, 128, "decode: number of JPEGs"),
    "jpeg_px": (256, 128, "decode: JPEG width and height"),
    "jpegs_per_shard": (256, 32, "decode: JPEGs per shard"),
    "epoch_shards": (4, 2, "epochs: number of shards (2 KiB members)"),
    "epoch_members": (2_500, 500, "epochs: samples per shard (a short epoch)"),
    "mem_small_mb": (10, 2, "memory: MB of the small shard"),
    "mem_big_mb": (1024, 32, "memory: MB of the big shard"),
    "keepup_images": (4096, 512, "keepup: number of 64x64 JPEGs"),
    "keepup_window": (100, 10, "keepup: iterations per timed window"),
    "keepup_windows": (5, 3, "keepup: timed windows (after one warm-up window)"),
    "repeat": (3, 1, "rounds; each rate is the median over them"),
}

NOTES = [
    "Each arm runs in a fresh process forked from a clean forkserver that has imported torch, "
    "aisio, the aistore SDK and webdataset, so all arms share one baseline RSS; 'Δ mem' is the "
    "peak above the RSS measured after the arm's set-up. Peak memory is the arm process's RSS "
    "(polled every 20 ms) plus the private pages of its child processes (DataLoader2 workers, "
    "curl; read from smaps_rollup every 250 ms), so pages a worker shares copy-on-write with "
    "its parent are not counted twice.",
    "MB/s counts the objects' bytes (whole tar shards); for the raw reads, samples/s is the "
    "sample count of the bytes they read. × limit and × webdataset are ratios of rates on the "
    "same objects within this run.",
    "webdataset opens http URLs through a `curl -s -L` subprocess (its default gopen) and parses "
    "with tarfile: its real-world behaviour.",
    "The AIStore node (one proxy, one target on 127.0.0.1) shares the machine's cores; every GET "
    "goes to the proxy and follows its redirect to the target.",
    "Objects: every arm lists the prefix, then reads each object; 'sequential GETs' is the "
    "requests arm. Get-Batch (/v1/ml/moss) returns the named objects as one tar, in order; "
    "aisio uses it with AISFileLoader(batch_get=N).",
    "aisio under DataLoader2 batches in the workers (64 raw samples, or 32 decoded images "
    "collated); every batch is pickled to the main process. Decode: aisio's Decoder with the "
    "--decode spec (torchrgb8: uint8 C x H x W tensors, the usual way to feed a GPU that "
    "normalises; torchrgb sends float32, 4x the bytes).",
]


def build_parser() -> argparse.ArgumentParser:
    """Returns the suite's argument parser (``python -m benchmarks.suite --help``)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.suite",
        description="Benchmark aisio against the raw HTTP read, the aistore SDK and webdataset "
        "on the same shards from one AIStore; writes table.md, results.json, results.png.")
    add = parser.add_argument
    add("--endpoint", help="AIStore endpoint (default: AIS_ENDPOINT, else a temporary playground)")
    add("--out", type=Path, default=Path("bench-results"), help="output directory (%(default)s)")
    add("--quick", action="store_true", help="small sizes and one pass: well under a minute")
    add("--only", nargs="+", choices=WORKLOADS, metavar="WORKLOAD",
        help=f"run only these workloads ({', '.join(WORKLOADS)}; --peers: large, small, "
        "decode, objects)")
    add("--arms", nargs="+", metavar="ARM", help="run only these arms (e.g. aisio requests; "
        "--peers: the objects workload's, e.g. aisio-getbatch sdk-getbatch)")
    add("--seed", type=int, default=0, help="seed of the generated data (%(default)s)")
    add("--warmup", type=int, default=1, help="untimed passes before the timed ones (1)")
    add("--concurrency", type=int, default=8, help="aisio loader threads for objects (8)")
    add("--batch-objects", type=int, default=512, help="names per Get-Batch request (512)")
    add("--decode", default="torchrgb8", help="image spec of the decode workload (torchrgb8: "
        "uint8 tensors; torchrgb: float32, 4x the bytes per batch)")
    add("--arm-timeout", type=float, default=1800.0, help="seconds before an arm is stopped")
    add("--peers", action="store_true", help="instead of the suite: aisio beside litdata, "
        "MosaicML streaming, s3torchconnector and the SDK's AISShardReader, each in an "
        "environment of its own made from benchmarks/peers/locks (benchmarks/peers)")
    add("--systems", nargs="+", metavar="SYSTEM", help="--peers: only these systems (aisio "
        "litdata streaming s3torch sdk)")
    add("--network", nargs="+", default=None, metavar="SPEC",
        help="--peers: read over each of these networks in turn: none (loopback) or "
        "rtt=<n>ms,rate=<n>gbit|mbit (toxiproxy delay and tc tbf, the client in a network "
        "namespace of its own; needs root and Go), e.g. --network none rtt=1ms,rate=10gbit "
        "rtt=5ms,rate=10gbit, or sweep: none, 1 and 5 ms at 10gbit, 5 ms at 1gbit (default: "
        "none)")
    for name, (full, quick, what) in SIZES.items():
        add("--" + name.replace("_", "-"), type=int, default=None, metavar="N",
            help=f"{what} ({full:,}; --quick: {quick:,})")
    return parser


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    chosen = {name: getattr(args, name) for name in SIZES}
    for name, (full, quick, _) in SIZES.items():
        if chosen[name] is None:
            chosen[name] = quick if args.quick else full
    return {**chosen, "warmup": args.warmup, "concurrency": args.concurrency,
            "batch_objects": args.batch_objects, "decode": args.decode, "seed": args.seed}


def _order_state() -> str:
    """The deterministic order's state size for 10,000 shards and 1,000-sample buffers."""
    from benchmarks.bench_order import state_size

    one, eight = state_size(1), state_size(8)
    return (f"order=\"deterministic\": its state (JSON) for 10,000 shards with 1,000-sample "
            f"buffers, each stream 2.35 shards in, is {one:,} bytes with 1 stream and {eight:,} "
            "with 8 (the default); it grows with streams x buffer, not with the shard count.")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    """Returns the full report of one run of the suite (see the module doc)."""
    cfg = {**_settings(args), "quick": args.quick, "arm_timeout": args.arm_timeout}
    selected = args.only or list(WORKLOADS)
    report: dict[str, Any] = {
        "command": " ".join(["python -m benchmarks.suite", *map(shlex.quote, argv)]).strip(),
        "argv": sys.argv, "config": cfg, "workloads": {}, "notes": [*NOTES, _order_state()],
    }
    with cluster(args.endpoint) as (endpoint, describe):
        report["machine"] = {**machine_info(), "aistore": aistore_version(endpoint),
                             "cluster": describe}
        client = client_for(AISConfig(endpoint=endpoint))
        bucket = Bucket(f"aisio-bench-{uuid.uuid4().hex[:8]}")
        client.create_bucket(bucket)
        try:
            with tempfile.TemporaryDirectory(prefix="aisio-bench-data-") as tmp:
                suite = Suite(endpoint, bucket, Uploader(client, bucket, Path(tmp), cfg["seed"],
                                                        _log), cfg, args.arms)
                for name in (w for w in KINDS if w in selected):
                    report["workloads"][name] = suite.workload(name)
                if "memory" in selected:
                    report["memory"] = suite.memory()
                if "keepup" in selected:
                    report["keepup"] = suite.keepup()
        finally:
            client.destroy_bucket(bucket)
    report["targets"] = targets(report)
    return report


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the suite, prints the table, writes the outputs; returns 0, 1 if an arm failed.

    A cluster that cannot be reached (or set up) ends in one line on stderr and exit code 2.
    """
    args = build_parser().parse_args(argv)
    argv = list(sys.argv[1:] if argv is None else argv)
    if threading.current_thread() is threading.main_thread():
        # `kill` (SIGTERM) ends a run as Ctrl-C does: through the clean-ups that stop its
        # playground, toxiproxy and network namespace (they were left running)
        signal.signal(signal.SIGTERM, _interrupt)
    if args.peers:
        return peers(args, argv)
    try:
        report = run(args, argv)
    except AISIOError as exc:
        print(f"aisio bench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    args.out.mkdir(parents=True, exist_ok=True)
    table = markdown(report)
    (args.out / "table.md").write_text(table)
    write_json(report, args.out / "results.json")
    plot(report, args.out / "results.png")
    print(table)
    _log(f"aisio bench: wrote {args.out / 'table.md'}, results.json and results.png")
    failed = [a["label"] for w in report["workloads"].values() for a in w["arms"] if not a["ok"]]
    failed += [k for k in ("keepup",) if k in report and not report[k].get("ok")]
    failed += [f"memory {row['arm']} {k}" for row in report.get("memory", {}).get("arms", [])
               for k in ("small", "big") if not row[f"{k}_ok"]]
    return 1 if failed else 0


def peers(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """``--peers``: runs :mod:`benchmarks.peers.run`, writes its outputs; 0, 1 if a system
    failed somewhere, 2 if the cluster cannot be reached."""
    from benchmarks.net.spec import NetworkSpecError, parse_networks
    from benchmarks.peers import report as peers_report
    from benchmarks.peers.run import SYSTEMS, run_peers, sizes

    try:
        parse_networks(args.network or [])
    except NetworkSpecError as exc:
        print(f"aisio bench: error: {exc}", file=sys.stderr)
        return 2

    overrides = {"repeat": args.repeat, "objects": args.objects, "large_shards": args.large_shards,
                 "small_shards": args.small_shards, "small_per_shard": args.small_members}
    cfg = {**sizes(args.quick, overrides), "seed": args.seed, "quick": args.quick,
           "only": args.only, "arms": args.arms}
    systems = tuple(s for s in SYSTEMS if not args.systems or s in args.systems)
    try:
        # --arm-timeout left at its default: a job of the peers' sizes that takes longer hangs
        timeout = args.arm_timeout if args.arm_timeout != 1800.0 else (120.0 if args.quick
                                                                         else 600.0)
        networks = tuple(parse_networks(args.network or ["none"]))
        report = run_peers(args.endpoint, cfg, systems, timeout, networks)
    except AISIOError as exc:
        print(f"aisio bench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    report["command"] = " ".join(["python -m benchmarks.suite", *map(shlex.quote, argv)])
    args.out.mkdir(parents=True, exist_ok=True)
    table = peers_report.markdown(report)
    (args.out / "table.md").write_text(table)
    peers_report.write_json(report, args.out / "results.json")
    peers_report.plot(report, args.out / "results.png")
    peers_report.plot_networks(report, args.out / "networks.png")
    print(table)
    _log(f"aisio bench: wrote {args.out / 'table.md'}, results.json and results.png")
    rows = [*report["throughput"], *report["fresh"], *report["resume"],
            *({"ok": False} for net in report.get("networks", []) if "error" in net)]
    return 1 if any(not row["ok"] for row in rows) else 0


__all__ = ["WORKLOADS", "build_parser", "main", "peers", "run"]

if __name__ == "__main__":
    sys.exit(main())
