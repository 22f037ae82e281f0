"""Listing speed: objects/s listing 10,000+ objects, aisio's AISFileLister against the SDK.

Run: ``.venv/bin/python benchmarks/bench_listing.py [--objects N] [--repeat R]`` (uses
AIS_ENDPOINT, else starts a local AIStore). Prints a table; not a timed test.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from aistore.sdk import Client as SDKClient

import aisio
from aisio.core.store.client import client_for
from aisio.core.store.urls import AISPath, Bucket


def timed(fn: Callable[[], int], repeat: int) -> tuple[float, int]:
    """Returns (median seconds, count) of ``repeat`` runs after one warm-up."""
    fn()
    runs = []
    count = 0
    for _ in range(repeat):
        start = time.perf_counter()
        count = fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs), count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with aisio.playground.cluster_endpoint() as endpoint:
        run(endpoint, args.objects, args.repeat)
    return 0


def run(endpoint: str, objects: int, repeat: int) -> None:
    """Uploads ``objects`` empty objects, lists them with each arm, prints the table."""
    client = client_for(aisio.AISConfig(endpoint=endpoint))
    bucket = Bucket(f"aisio-list-{uuid.uuid4().hex[:8]}")
    client.create_bucket(bucket)
    try:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: client.put_object(AISPath(bucket, f"o/{i:07d}"), b""),
                          range(objects)))
        sdk_bucket = SDKClient(endpoint).bucket(bucket.name)
        arms: dict[str, Callable[[], int]] = {
            "aisio AISFileLister (server page size)": lambda: sum(
                1 for _ in aisio.AISFileLister(bucket.uri("o/"), endpoint=endpoint)),
            "aisio AISFileLister (page_size=1000)": lambda: sum(
                1 for _ in aisio.AISFileLister(bucket.uri("o/"), endpoint=endpoint,
                                               page_size=1000)),
            "SDK list_all_objects_iter": lambda: sum(
                1 for _ in sdk_bucket.list_all_objects_iter(prefix="o/")),
        }
        print(f"listing {objects:,} objects at {endpoint}, median of {repeat}")
        print(f"{'arm':42} {'seconds':>8} {'objects/s':>12}")
        for name, fn in arms.items():
            seconds, count = timed(fn, repeat)
            assert count == objects, (name, count)
            print(f"{name:42} {seconds:8.3f} {count / seconds:12,.0f}")
    finally:
        client.destroy_bucket(bucket)


if __name__ == "__main__":
    raise SystemExit(main())
