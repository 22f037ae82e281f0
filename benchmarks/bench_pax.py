"""Shards as webdataset's TarWriter writes them (a pax mtime header before every member): what
a 2 KiB sample costs the parser, member by member with the per-sample stage and in runs.

No network: one shard of ``--samples`` samples (a 2 KiB ``.jpg`` and a ``.cls``) written by
``webdataset.TarWriter`` into memory, parsed by ``iter_samples`` as the resumable loaders'
pipeline parses it, CPU time per sample, ``--rounds`` alternated rounds::

    .venv/bin/python -m benchmarks.bench_pax
"""

from __future__ import annotations

import argparse
import io
import random
import time

import webdataset as wds

import aisio
from aisio.core.decode.runs import run_plan
from aisio.core.format.samples import iter_samples
from aisio.core.format.tar.runs import Columns, RunPlan
from aisio.core.pipeline.stages import SampleStage

FIELDS = ("__key__", "jpg", "cls")


def shard(samples: int) -> bytes:
    """Returns a shard written by webdataset's TarWriter."""
    rng = random.Random(0)
    out = io.BytesIO()
    with wds.TarWriter(out) as sink:
        for i in range(samples):
            sink.write({"__key__": f"sample{i:08d}", "jpg": rng.randbytes(2048), "cls": i % 1000})
    return out.getvalue()


def parse(data: bytes, runs: RunPlan | None) -> int:
    """Parses ``data`` into the picked tuples (in runs when ``runs``); returns the count."""
    stage = SampleStage(aisio.Decoder(None, only=["cls"]), FIELDS)
    count = 0
    for item in iter_samples(io.BytesIO(data), url="ais://b/s.tar",
                             tag=("__pos__", 0, 0, frozenset(), {}), runs=runs):
        if type(item) is Columns:
            count += len(item.values)
        else:
            item.pop("__pos__")
            stage(item)
            count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=25_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    data = shard(args.samples)
    plan = run_plan(aisio.Decoder(None, only=["cls"]), FIELDS)
    best: dict[str, float] = {}
    for _ in range(args.rounds):
        for name, runs in (("member by member", None), ("runs", plan)):
            start = time.process_time()
            assert parse(data, runs) == args.samples
            seconds = time.process_time() - start
            best[name] = min(best.get(name, seconds), seconds)
    for name, seconds in best.items():
        print(f"{name}: {seconds / args.samples * 1e6:.2f} us of CPU a sample "
              f"({args.samples / seconds:,.0f} samples per CPU second)")


if __name__ == "__main__":
    main()
