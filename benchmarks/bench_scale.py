"""Costs at scale without a cluster of that scale: a checkpoint's state at 1,024 ranks x 8
workers, and a listing of a million objects.

``state``: builds, in one process, the state each rank's loader would hold at a checkpoint half
way through an epoch (no 8,192 processes: each rank's progress is made as its readers would have
left it) and measures what the job does with them: each rank's state (bytes), the gather
(pickled bytes, as ``all_gather_object`` sends them; the time to pickle and unpickle), the merge
at rank 0, the merged state (bytes), and the load on a reader (the JSON state read, its rank's
share of what is left dealt). It runs the same at fewer ranks too, and prints how each figure grows.

``listing``: puts ``--objects`` empty objects in a bucket (or lists ``--bucket``), then, in a new
process each time, lists it as a loader does (rank 0 alone) and measures the time, the requests,
the memory of the shard list, and the message rank 0 broadcasts to the other ranks.

Run::

    .venv/bin/python -m benchmarks.bench_scale state                # 1,024 x 8, 1,000,000 shards
    .venv/bin/python -m benchmarks.bench_scale state --ranks 64 256 1024 --shards 100000
    .venv/bin/python -m benchmarks.bench_scale listing --objects 1000000   # AIS_ENDPOINT, or a
                                                                           # playground of its own

Prints tables; not a timed test. Results and what they mean: benchmarks/README.md ("At scale").
"""

from __future__ import annotations

import argparse
import json
import pickle
import random
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aisio.core.epochs.progress import EpochProgress, _Partial, merge_states, state_size
from aisio.core.epochs.split import Deal
from aisio.core.store.sources import ObjectRef
from aisio.core.store.urls import AISPath, Bucket


def timed(fn: Callable[[], Any], repeat: int = 3) -> tuple[float, Any]:
    """Returns (median seconds, last result) of ``repeat`` runs."""
    runs, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs), result


# ------------------------------------------------------------------------------------- state


def shard_refs(count: int) -> list[ObjectRef]:
    bucket = Bucket("train")
    return [ObjectRef(AISPath(bucket, f"shard-{i:07d}.tar")) for i in range(count)]


def rank_states(ranks: int, workers: int, shards: list[ObjectRef], *, samples: int,
                above: int, seed: int = 0) -> list[dict[str, Any]]:
    """Returns each rank's state half way through an epoch: reader ``g`` (rank x workers +
    worker) reads shards ``g, g + readers, ...``; each has finished the first half of its
    shards and is inside the next, ``samples // 2`` delivered in order and ``above`` more
    beyond them (what a sample shuffle buffer leaves out of order)."""
    readers = ranks * workers
    template = EpochProgress(shards, seed, epoch=0)
    rng = random.Random(seed)
    states = []
    for rank in range(ranks):
        progress = EpochProgress.__new__(EpochProgress)
        progress.__dict__.update(template.__dict__)
        progress.done, progress.partial, progress.versions = set(), {}, {}
        for reader in range(rank * workers, (rank + 1) * workers):
            mine = range(reader, len(shards), readers)
            half = len(mine) // 2
            progress.done.update(mine[:half])
            if half < len(mine):
                lo = samples // 2
                beyond = rng.sample(range(lo + 1, samples), min(above, samples - lo - 1))
                progress.partial[mine[half]] = _Partial(
                    lo, lo * 4096, {o: (o + 1) * 4096 for o in sorted(beyond)})
                progress.versions[mine[half]] = f"v=1;xxh={reader:016x};size={samples * 4096}"
        progress.delivered = len(progress.done) * samples + len(progress.partial) * (
            samples // 2 + above)
        states.append(progress.state_dict())
    return states


def measure_state(ranks: int, workers: int, shards: list[ObjectRef], *, samples: int,
                  above: int) -> dict[str, float]:
    states = rank_states(ranks, workers, shards, samples=samples, above=above)
    gathered = pickle.dumps(states, protocol=pickle.HIGHEST_PROTOCOL)
    pickling, _ = timed(lambda: pickle.loads(pickle.dumps(states, pickle.HIGHEST_PROTOCOL)))
    merging, merged = timed(lambda: merge_states(states))
    text = json.dumps(merged)
    # what each reader does when the epoch resumes: read the state, take its rank's share
    loading, mine = timed(lambda: Deal(shards, 0, 0, shuffle=True, world=ranks,
                                       resume=json.loads(text)).tasks(0))
    assert merged["delivered"] == sum(s["delivered"] for s in states)
    return {"ranks": ranks, "rank_state_kb": statistics.median(map(state_size, states)) / 1e3,
            "gathered_mb": len(gathered) / 1e6, "pickle_s": pickling, "merge_s": merging,
            "merged_kb": state_size(merged) / 1e3, "load_s": loading, "rank_tasks": len(mine)}


def run_state(args: argparse.Namespace) -> None:
    shards = shard_refs(args.shards)
    print(f"state at a checkpoint half way through an epoch: {args.shards:,} shards of "
          f"{args.samples} samples, {args.workers} workers a rank, {args.above} samples out of "
          "order in each reader's shard in progress; medians of 3")
    columns = ("ranks", "rank_state_kb", "gathered_mb", "pickle_s", "merge_s", "merged_kb",
               "load_s", "rank_tasks")
    print(" ".join(f"{c:>13}" for c in columns))
    rows = []
    for ranks in args.ranks:
        row = measure_state(ranks, args.workers, shards, samples=args.samples, above=args.above)
        rows.append(row)
        print(" ".join(f"{row[c]:>13,.3f}" if isinstance(row[c], float) else f"{row[c]:>13,}"
                       for c in columns), flush=True)
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        grew = last["ranks"] / first["ranks"]
        print(f"from {first['ranks']} to {last['ranks']} ranks ({grew:.0f}x): " + ", ".join(
            f"{c} {last[c] / first[c]:.1f}x" for c in columns[2:7] if first[c]))


# ----------------------------------------------------------------------------------- listing

_LIST_CHILD = r"""
import json, pickle, resource, sys, time
import aisio
from aisio.core.store import client as client_module
from aisio.core.epochs.progress import shard_list_id
from aisio.runtime.setup import _RankZero, list_shards
from aisio.core.store.sources import resolve
sent = []
real_send = client_module.Client._send
def counting(self, method, url, **kw):
    sent.append(method)
    return real_send(self, method, url, **kw)
client_module.Client._send = counting
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
shards = list_shards(sys.argv[1], aisio.AISConfig(endpoint=sys.argv[2]))
listed = time.perf_counter() - start
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
message = _RankZero(resolve(sys.argv[1]), shards, shard_list_id(shards), None)
start = time.perf_counter()
wire = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
pickle.loads(wire)
crossing = time.perf_counter() - start
print(json.dumps({"objects": len(shards), "seconds": listed, "requests": len(sent),
                  "maxrss_growth_mb": grown / 1024, "broadcast_mb": len(wire) / 1e6,
                  "broadcast_pickle_s": crossing}))
"""


def run_listing(args: argparse.Namespace) -> None:
    from aisio.core.store.client import client_for
    from aisio.core.store.config import AISConfig
    from aisio.playground import cluster_endpoint

    with cluster_endpoint() as endpoint:
        client = client_for(AISConfig(endpoint=endpoint))
        bucket = Bucket(args.bucket or f"aisio-scale-{uuid.uuid4().hex[:8]}")
        if not args.bucket:
            client.create_bucket(bucket)
            start = time.perf_counter()
            with ThreadPoolExecutor(16) as pool:
                for _ in pool.map(lambda i: client.put_object(
                        AISPath(bucket, f"o/{i:07d}"), b""), range(args.objects)):
                    pass
            print(f"put {args.objects:,} empty objects in {time.perf_counter() - start:.0f} s")
        try:
            print(f"listing {bucket.uri('o/')} as a loader does (rank 0), a new process each "
                  f"time, {args.repeat} times")
            runs = []
            for _ in range(args.repeat):
                out = subprocess.run([sys.executable, "-c", _LIST_CHILD, bucket.uri("o/"),
                                      endpoint], capture_output=True, text=True, check=True)
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            row = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            for key, value in row.items():
                print(f"  {key:20} {value:>14,.3f}")
            print(f"  {'objects/s':20} {row['objects'] / row['seconds']:>14,.0f}")
            per_object = row["maxrss_growth_mb"] * 1e6 / row["objects"]
            print(f"  {'bytes per object':20} {per_object:>14,.0f} (memory of the shard list)")
            sent = row["broadcast_mb"] * 1e6 / row["objects"]
            print(f"  {'broadcast bytes/obj':20} {sent:>14,.0f}")
        finally:
            if not args.bucket and not args.keep:
                client.destroy_bucket(bucket)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="part", required=True)
    state = sub.add_parser("state", help="a checkpoint's state at many ranks and workers")
    state.add_argument("--ranks", type=int, nargs="+", default=[64, 256, 1024])
    state.add_argument("--workers", type=int, default=8)
    state.add_argument("--shards", type=int, default=1_000_000)
    state.add_argument("--samples", type=int, default=1000, help="samples a shard")
    state.add_argument("--above", type=int, default=64,
                       help="samples delivered out of order in each reader's shard in progress")
    listing = sub.add_parser("listing", help="a listing of many objects, as rank 0 does it")
    listing.add_argument("--objects", type=int, default=1_000_000)
    listing.add_argument("--bucket", help="list this bucket's o/ prefix instead of making one")
    listing.add_argument("--keep", action="store_true", help="keep the bucket made")
    listing.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    (run_state if args.part == "state" else run_listing)(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
