"""Benchmark aisio's streaming tar reader against Python's tarfile in streaming mode.

Builds two shards in a temporary directory (large members, small members), then reads each one
with ``tarfile.open(fileobj=..., mode="r|")`` (every member's bytes read) and with
:func:`aisio.core.format.tar.iter_tar`, and prints the median of several timed runs after a
warm-up, wall clock and CPU.

``--compare DIR ...`` instead times ``iter_tar`` of this checkout and of other checkouts of
aisio (e.g. ``git worktree add --detach /tmp/old main``), each imported with
``PYTHONPATH=DIR`` in a fresh process, the checkouts alternated round by round, and prints
each one's CPU microseconds per member and its ratio to this checkout's, taken round by round.

Run from the repository root::

    .venv/bin/python benchmarks/bench_tar.py
    .venv/bin/python benchmarks/bench_tar.py --small-count 20000 --repeats 5
    .venv/bin/python benchmarks/bench_tar.py --compare /tmp/old --rounds 5
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

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

    from aisio.core.format.tar import iter_tar

    def read_with_iter_tar(path: Path) -> tuple[int, int]:
        members = total = 0
        with open(path, "rb", buffering=0) as stream:
            for member in iter_tar(stream, bufsize=bufsize):
                total += len(member.data)
                members += 1
        return members, total

    return read_with_iter_tar


def median_seconds(read: Reader, path: Path, repeats: int
                   ) -> tuple[float, float, tuple[int, int]]:
    """Returns the median wall and CPU times of ``repeats`` runs after one warm-up, and the
    run's counts."""
    counts = read(path)
    times, cpu = [], []
    for _ in range(repeats):
        start, cpu_start = time.perf_counter(), time.process_time()
        again = read(path)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu_start)
        assert again == counts
    return statistics.median(times), statistics.median(cpu), counts


def shards(args: argparse.Namespace, tmp: str) -> list[tuple[str, Path, int]]:
    """Writes the two shards into ``tmp``; returns ``(label, path, members)`` for each."""
    big_size = args.big_kb * 1024
    made = []
    for label, count, size in [("big", args.big_mb * 1024 * 1024 // big_size, big_size),
                               ("small", args.small_count, int(args.small_kb * 1024))]:
        path = Path(tmp) / f"{label}.tar"
        build_shard(path, count, size)
        made.append((f"{count} x {size / 1024:g} KB", path, count))
    return made


def child(args: argparse.Namespace) -> None:
    """Times iter_tar of the aisio PYTHONPATH names on each shard; prints JSON: CPU seconds
    per member, by shard."""
    # Import aisio from PYTHONPATH only: the venv's editable finder would otherwise serve the
    # modules an older checkout lacks from the venv's own checkout.
    sys.meta_path[:] = [f for f in sys.meta_path
                        if not str(getattr(f, "__module__", "")).startswith("__editable__")]
    read = reader_for_iter_tar(args.bufsize)
    result = {}
    for path in args.child:
        _, cpu, (members, _) = median_seconds(read, Path(path), args.repeats)
        result[path] = cpu / members
    print(json.dumps(result))


def compare(args: argparse.Namespace) -> None:
    """Alternates this checkout's iter_tar and the others' round by round; prints a table of
    CPU microseconds per member and each checkout's ratio to this one."""
    trees = [HERE, *(Path(p).resolve() for p in args.compare)]
    per: dict[tuple[str, int], list[float]] = {}
    ratios: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        made = shards(args, tmp)
        for r in range(args.rounds):
            order = list(range(len(trees)))
            got = {}
            for index in order if r % 2 == 0 else order[::-1]:
                cmd = [sys.executable, str(Path(__file__).resolve()), "--repeats",
                       str(args.repeats), "--bufsize", str(args.bufsize), "--child",
                       *(str(path) for _, path, _ in made)]
                out = subprocess.run(cmd, env=dict(os.environ, PYTHONPATH=str(trees[index])),
                                     cwd=HERE, capture_output=True, text=True, check=True)
                got[index] = json.loads(out.stdout.strip().splitlines()[-1])
            for index, result in got.items():
                for label, path, _ in made:
                    per.setdefault((label, index), []).append(result[str(path)])
                    if index:
                        ratios.setdefault((label, index), []).append(
                            result[str(path)] / got[0][str(path)])
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    names = [f"{tree.name}" for tree in trees]
    print(f"\niter_tar, CPU us per member (medians of {args.rounds} rounds, each the median of "
          f"{args.repeats} reads in a fresh process)\n")
    print("| shard | " + " | ".join(names) + "".join(f" | {n} / {names[0]}" for n in names[1:])
          + " |")
    print("| --- |" + " ---: |" * (2 * len(trees) - 1))
    for label, _, _ in made:
        cells = [f"{statistics.median(per[(label, i)]) * 1e6:.2f}" for i in range(len(trees))]
        cells += [f"{statistics.median(ratios[(label, i)]):.3f}" for i in range(1, len(trees))]
        print(f"| {label} | " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> None:
    """Builds the shards, runs both readers on each and prints a table (or, with
    ``--compare``, compares checkouts)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big-mb", type=int, default=100, help="size of the large-member shard")
    parser.add_argument("--big-kb", type=int, default=100, help="member size in the large shard")
    parser.add_argument("--small-count", type=int, default=50_000, help="members in small shard")
    parser.add_argument("--small-kb", type=float, default=2, help="member size in small shard")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs (median reported)")
    parser.add_argument("--bufsize", type=int, default=1 << 20, help="iter_tar read size")
    parser.add_argument("--compare", nargs="*", default=[], metavar="DIR",
                        help="other aisio checkouts to alternate with this one")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of --compare")
    parser.add_argument("--child", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return
    if args.compare:
        compare(args)
        return
    sys.path.insert(0, str(HERE))
    readers: list[tuple[str, Reader]] = [
        ("tarfile r|", read_with_tarfile),
        ("iter_tar", reader_for_iter_tar(args.bufsize)),
    ]
    header = (f"{'shard':<22}{'reader':<12}{'median s':>10}{'MB/s':>10}{'members/s':>13}"
              f"{'CPU us/member':>15}")
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory() as tmp:
        for name, path, _ in shards(args, tmp):
            mb = path.stat().st_size / 1e6
            rates = []
            for reader_name, read in readers:
                seconds, cpu, (members, _) = median_seconds(read, path, args.repeats)
                rates.append(members / seconds)
                print(
                    f"{name:<22}{reader_name:<12}{seconds:>10.3f}{mb / seconds:>10.0f}"
                    f"{members / seconds:>13,.0f}{cpu / members * 1e6:>15.2f}"
                )
            print(f"{'':<22}{'ratio':<12}{'':>10}{'':>10}{rates[1] / rates[0]:>12.1f}x")


if __name__ == "__main__":
    main()
