"""ETL arm: the same JPEG shards read plainly, through a local ETL server, and transformed in the
loader, in one run.

Arms, alternated in each round so that a busy machine slows them alike:

* ``plain``: ``AISFileLoader(shards)`` -> ``WebDatasetParser`` (no ETL);
* ``local ETL, identity``: the same through :mod:`aisio.localetl` serving an SDK
  ``HTTPMultiThreadedServer`` that returns each shard as it is (the cost of the extra hop);
* ``local ETL, resize``: the server runs ``examples/etl_resize.py``'s ``ResizeShards``;
* ``resize in the loader``: the plain read, with the same ``resize_shard`` applied to each shard
  in the loader (``.map`` before the parser), i.e. the transform done client-side.

Usage::

    python -m benchmarks.suite.etl                       # 8 shards x 64 JPEGs 128x128, 3 rounds
    python -m benchmarks.suite.etl --shards 4 --rounds 1 # quicker

Uses ``--endpoint`` / ``AIS_ENDPOINT``, else starts a playground and stops it at the end.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import io
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from aistore.sdk.etl.webserver.http_multi_threaded_server import HTTPMultiThreadedServer

RESIZE_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "etl_resize.py"


class Identity(HTTPMultiThreadedServer):
    """An AIStore ETL that returns each object as it is (served by the identity arm)."""

    def transform(self, data: bytes, path: str, etl_args: str) -> bytes:
        return data


def _resize_module() -> Any:
    spec = importlib.util.spec_from_file_location("etl_resize", RESIZE_EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    return module


def upload(endpoint: str, bucket: str, shards: int, samples: int, side: int) -> tuple[str, int]:
    """Uploads seeded JPEG shards; returns their template and total bytes."""
    import numpy as np
    import webdataset as wds
    from PIL import Image

    from aisio.core.store.client import client_for
    from aisio.core.store.config import AISConfig
    from aisio.core.store.urls import AISPath, Bucket

    client = client_for(AISConfig(endpoint=endpoint))
    client.create_bucket(Bucket(bucket))
    rng = np.random.default_rng(0)
    total = 0
    for s in range(shards):
        buf = io.BytesIO()
        with wds.TarWriter(buf) as writer:
            for i in range(samples):
                base = np.linspace(0, 255, side * side * 3).reshape(side, side, 3)
                pixels = (base + rng.normal(0, 24, base.shape)).clip(0, 255).astype(np.uint8)
                jpg = io.BytesIO()
                Image.fromarray(pixels).save(jpg, format="JPEG", quality=90)
                writer.write({"__key__": f"s{s:03d}/{i:05d}", "jpg": jpg.getvalue(), "cls": i % 10})
        total += len(buf.getvalue())
        client.put_object(AISPath(Bucket(bucket), f"shard-{s:04d}.tar"), buf.getvalue())
    return f"ais://{bucket}/shard-{{0000..{shards - 1:04d}}}.tar", total


def count(samples: Iterator[dict[str, Any]]) -> tuple[int, int]:
    """Returns (samples, bytes of their fields) of a stream of samples."""
    n = size = 0
    for sample in samples:
        n += 1
        size += sum(len(v) for k, v in sample.items() if not k.startswith("__"))
    return n, size


def _transform_item(transform: Callable[[bytes, int], bytes], size: int,
                    item: tuple[str, Any]) -> tuple[str, io.BytesIO]:
    """Returns ``(name, stream)`` with the whole shard transformed (the client-side arm)."""
    name, stream = item
    try:
        return name, io.BytesIO(transform(stream.read(), size))
    finally:
        stream.close()


def arms(template: str, endpoint: str, size: int) -> dict[str, Callable[[], Any]]:
    """Returns each arm: a function that builds its sample pipe."""
    import aisio

    resized = functools.partial(_transform_item, _resize_module().resize_shard, size)

    return {
        "plain": lambda: aisio.AISFileLoader(template, endpoint=endpoint).ais_parse_webdataset(),
        "local ETL, identity": lambda: aisio.AISFileLoader(
            template, endpoint=endpoint, etl="bench-identity").ais_parse_webdataset(),
        "local ETL, resize": lambda: aisio.AISFileLoader(
            template, endpoint=endpoint, etl=aisio.ETL("bench-resize", {"size": size})
        ).ais_parse_webdataset(),
        "resize in the loader": lambda: aisio.AISFileLoader(template, endpoint=endpoint)
        .map(resized).ais_parse_webdataset(),
    }


def run(endpoint: str, *, shards: int, samples: int, side: int, size: int,
        rounds: int) -> dict[str, dict[str, float]]:
    """Runs every arm ``rounds`` times, rotating their order; returns median rates per arm."""
    from aisio import localetl
    from aisio.core.store.client import client_for
    from aisio.core.store.config import AISConfig
    from aisio.core.store.urls import Bucket

    bucket = f"aisio-bench-etl-{uuid.uuid4().hex[:8]}"
    template, total = upload(endpoint, bucket, shards, samples, side)
    print(f"{shards} shards x {samples} JPEGs {side}x{side} ({total / 1e6:.1f} MB) in "
          f"ais://{bucket}; resize to {size}x{size}; {rounds} round(s)")
    times: dict[str, list[float]] = {}
    got: dict[str, tuple[int, int]] = {}
    try:
        with localetl.running(f"{Path(__file__).resolve()}:Identity", "bench-identity",
                             endpoint, replace=True), \
                localetl.running(f"{RESIZE_EXAMPLE}:ResizeShards", "bench-resize", endpoint,
                                 replace=True):
            pipes = arms(template, endpoint, size)
            names = list(pipes)
            count(pipes["plain"]())  # warm the connections and the target's page cache
            for r in range(rounds):
                for name in names[r % len(names):] + names[: r % len(names)]:
                    started = time.perf_counter()
                    got[name] = count(pipes[name]())
                    times.setdefault(name, []).append(time.perf_counter() - started)
    finally:
        client_for(AISConfig(endpoint=endpoint)).destroy_bucket(Bucket(bucket))
    plain = statistics.median(times["plain"])
    results = {}
    for name, spent in times.items():
        median = statistics.median(spent)
        n, size_out = got[name]
        results[name] = {"samples": n, "samples_per_s": n / median, "input_mb_per_s":
                         total / median / 1e6, "output_bytes": size_out,
                         "time_vs_plain": median / plain}
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", default=os.environ.get("AIS_ENDPOINT"))
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--samples", type=int, default=64, help="JPEGs per shard")
    parser.add_argument("--side", type=int, default=128, help="pixels a side of each JPEG")
    parser.add_argument("--size", type=int, default=32, help="pixels a side after the resize")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    from aisio.playground import cluster_endpoint

    if args.endpoint:
        os.environ["AIS_ENDPOINT"] = args.endpoint
    with cluster_endpoint() as endpoint:
        results = run(endpoint, shards=args.shards, samples=args.samples, side=args.side,
                      size=args.size, rounds=args.rounds)
    print("\n| arm | samples/s | input MB/s | time vs plain | output bytes |")
    print("|---|---:|---:|---:|---:|")
    for name, r in results.items():
        print(f"| {name} | {r['samples_per_s']:,.0f} | {r['input_mb_per_s']:,.1f} | "
              f"{r['time_vs_plain']:.2f}x | {r['output_bytes']:,} |")
    command = " ".join(["python -m benchmarks.suite.etl", *sys.argv[1:]])
    print(f"\n(medians of {args.rounds} round(s); `{command}`)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
