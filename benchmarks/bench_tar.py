"""Benchmark aisio's streaming tar reader against Python's tarfile in streaming mode.

Builds two shards in a temporary directory (large members, small members), then reads each one
with ``tarfile.open(fileobj=..., mode="r|")`` (every member's bytes read) and with
:func:`aisio.core.format.tar.iter_tar`, and prints the median of several timed runs after a warm-up.

Run from the repository root::

    .venv/bin/python benchmarks/bench_tar.py
    .venv/bin/python benchmarks/bench_tar.py --small-count 20000 --repeats 5
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aisio.core.format.tar import iter_tar

Reader = Callable[[Path], tuple[int, int]]


def build_shard(path: Path, count: int, member_size: int) -> None:
    """Writes a tar of ``count`` members of ``member_size`` bytes each (WebDataset-like names)."""
    pool = os.urandom(member_size + 4096)
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for i in range(count):
            info = tarfile.TarInfo(f"train/{i // 2:08d}.{'jpg' if i % 2 == 0 else 'cls'}")
            info.size = member_size
            start = i % 4096
            tar.addfile(info, io.BytesIO(pool[start : start + member_size]))


def read_with_tarfile(path: Path) -> tuple[int, int]:
    """Returns (members, data bytes) read with tarfile in streaming mode (buffered file)."""
    members = total = 0
    with open(path, "rb") as stream, tarfile.open(fileobj=stream, mode="r|") as tar:
        for info in tar:
            if info.isreg():
                handle = tar.extractfile(info)
                assert handle is not None
                total += len(handle.read())
                members += 1
    return members, total


def reader_for_iter_tar(bufsize: int) -> Reader:
    """Returns a reader using iter_tar on an unbuffered file."""

    def read_with_iter_tar(path: Path) -> tuple[int, int]:
        members = total = 0
        with open(path, "rb", buffering=0) as stream:
            for member in iter_tar(stream, bufsize=bufsize):
                total += len(member.data)
                members += 1
        return members, total

    return read_with_iter_tar


def median_seconds(read: Reader, path: Path, repeats: int) -> tuple[float, tuple[int, int]]:
    """Returns the median wall time of ``repeats`` runs after one warm-up, and the run's counts."""
    counts = read(path)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        again = read(path)
        times.append(time.perf_counter() - start)
        assert again == counts
    return statistics.median(times), counts


def main(argv: list[str] | None = None) -> None:
    """Builds the shards, runs both readers on each and prints a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big-mb", type=int, default=100, help="size of the large-member shard")
    parser.add_argument("--big-kb", type=int, default=100, help="member size in the large shard")
    parser.add_argument("--small-count", type=int, default=50_000, help="members in small shard")
    parser.add_argument("--small-kb", type=float, default=2, help="member size in small shard")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs (median reported)")
    parser.add_argument("--bufsize", type=int, default=1 << 20, help="iter_tar read size")
    args = parser.parse_args(argv)

    big_size = args.big_kb * 1024
    shards = [
        ("big", args.big_mb * 1024 * 1024 // big_size, big_size),
        ("small", args.small_count, int(args.small_kb * 1024)),
    ]
    readers: list[tuple[str, Reader]] = [
        ("tarfile r|", read_with_tarfile),
        ("iter_tar", reader_for_iter_tar(args.bufsize)),
    ]
    header = f"{'shard':<22}{'reader':<12}{'median s':>10}{'MB/s':>10}{'members/s':>13}"
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory() as tmp:
        for label, count, size in shards:
            path = Path(tmp) / f"{label}.tar"
            build_shard(path, count, size)
            mb = path.stat().st_size / 1e6
            name = f"{count} x {size / 1024:g} KB"
            rates = []
            for reader_name, read in readers:
                seconds, (members, _) = median_seconds(read, path, args.repeats)
                rates.append(members / seconds)
                print(
                    f"{name:<22}{reader_name:<12}{seconds:>10.3f}{mb / seconds:>10.0f}"
                    f"{members / seconds:>13,.0f}"
                )
            print(f"{'':<22}{'ratio':<12}{'':>10}{'':>10}{rates[1] / rates[0]:>12.1f}x")


if __name__ == "__main__":
    main()
