"""The transport arm: what one worker process can hand to the training process, no network.

A worker yields prepared deliveries of ``--batch`` x ``--member-kib`` (64 x 100 KiB: distinct
``bytes`` objects, or a fresh uint8 tensor each) through torch's ``DataLoader`` (``--loader dl``) or
DataLoader2 (``--loader dl2``, torchdata <= 0.9); the training process unpacks each one, as
:class:`aisio.ResumableLoader` does. Two arms, alternated ``--repeat`` times in one run:

* ``pickle``: the payload pickled through the worker's queue (aisio's shared-memory transport
  switched off, as before it existed);
* ``shm``: the payload through aisio's ring of reused shared-memory slots
  (:mod:`aisio.core.transport.ring`).

Run: ``.venv/bin/python -m benchmarks.suite.transport`` (prints MB/s per arm and the ratio).

``--aistore BASELINE_CHECKOUT`` measures instead what the transport is for: 1 worker against
the same loader in one process, ``aisio.webdataset_dataloader`` over 100 KiB samples from a
local AIStore (``AIS_ENDPOINT``, else a playground started here), this checkout alternated
with another one (e.g. a ``git worktree`` of main), each pass in a fresh process that imports
aisio from its checkout. It prints the 1-worker / in-process ratio of each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from aisio.core.transport.delivery import Delivery
from aisio.runtime.workers import prepare_process


class Prepared(IterableDataset):
    """Yields ``count`` deliveries of the same prepared payload (built once per worker)."""

    def __init__(self, *, count: int, batch: int, member: int, kind: str, shm: bool) -> None:
        self.count, self.batch, self.member, self.kind, self.shm = count, batch, member, kind, shm

    def __iter__(self) -> Iterator[Delivery]:
        os.environ["AISIO_SHM"] = "1" if self.shm else "0"  # this is the worker process
        prepare_process()  # as aisio's workers do as they start
        if self.kind == "bytes":
            value: Any = [os.urandom(16) + bytes(self.member - 16) for _ in range(self.batch)]
        else:
            value = torch.randint(0, 255, (self.batch, self.member), dtype=torch.uint8)
        positions = [(0, k, (k + 1) * self.member, False) for k in range(self.batch)]
        for _ in range(self.count):  # a fresh tensor per batch, as a collate makes
            yield Delivery(value if self.kind == "bytes" else value.clone(), positions)


def _first(item: Any) -> Any:
    return item


def _loader(dataset: Prepared, name: str, prefetch: int) -> Any:
    if name == "dl":
        return DataLoader(dataset, batch_size=None, num_workers=1, prefetch_factor=prefetch,
                          collate_fn=_first)
    from torchdata.dataloader2 import DataLoader2, MultiProcessingReadingService
    from torchdata.datapipes.iter import IterableWrapper

    return DataLoader2(IterableWrapper(dataset, deepcopy=False),
                       reading_service=MultiProcessingReadingService(num_workers=1))


def one_pass(*, shm: bool, kind: str, loader: str, count: int, batch: int, member: int,
             prefetch: int) -> float:
    """Returns MB/s of one pass (the first few deliveries, while the worker starts, untimed)."""
    dataset = Prepared(count=count + 5, batch=batch, member=member, kind=kind, shm=shm)
    dl = _loader(dataset, loader, prefetch)
    received = 0
    start = 0.0
    try:
        for step, item in enumerate(dl):
            if step == 5:
                start = time.perf_counter()
                received = 0
            value = item.unpack()
            received += (sum(map(len, value)) if isinstance(value, list)
                         else value.numel() * value.element_size())
        elapsed = time.perf_counter() - start
    finally:
        if hasattr(dl, "shutdown"):
            dl.shutdown()
    return received / elapsed / 1e6


PASS = """
import sys, time, aisio
names, endpoint, workers, epochs = sys.argv[1].split(","), sys.argv[2], int(sys.argv[3]), 3
loader = aisio.webdataset_dataloader(names, url=endpoint, shuffle_shards=False,
                                     num_workers=workers, batch_size=64, collate=False, seed=0)
sum(len(b) for b in loader)  # warm-up epoch
count = steady = 0
elapsed = after_first = 0.0
for _ in range(epochs):
    start = first = time.perf_counter()
    for i, b in enumerate(loader):
        count += len(b)
        if i == 0:
            first = time.perf_counter()
        else:
            steady += len(b)
    end = time.perf_counter()
    elapsed += end - start
    after_first += end - first
print(count, elapsed, steady, after_first, aisio.__file__)
"""


def _upload(endpoint: str, shards: int, per_shard: int, member: int) -> list[str]:
    import io
    import tarfile

    from aisio.core.store.client import Client
    from aisio.core.store.config import AISConfig
    from aisio.core.store.urls import AISPath, Bucket

    client = Client(AISConfig(endpoint=endpoint))
    bucket = Bucket("aisio-transport-bench")
    client.create_bucket(bucket, exist_ok=True)
    names = []
    for s in range(shards):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for i in range(per_shard):
                info = tarfile.TarInfo(f"s{s:03d}/{i:06d}.bin")
                info.size = member
                tar.addfile(info, io.BytesIO(os.urandom(member)))
        name = f"shard-{s:03d}.tar"
        client.put_object(AISPath(bucket, name), buf.getvalue())
        names.append(f"ais://{bucket.name}/{name}")
    return names


def aistore_arms(baseline: str, *, repeat: int, shards: int, per_shard: int,
                 member: int) -> None:
    """Prints 1 worker vs in-process, this checkout vs ``baseline``, alternated."""
    import contextlib
    import subprocess
    import tempfile
    from pathlib import Path

    here = str(Path(__file__).resolve().parents[2])
    with contextlib.ExitStack() as stack:
        endpoint = os.environ.get("AIS_ENDPOINT", "")
        if not endpoint:
            from aisio.playground import Playground

            root = stack.enter_context(tempfile.TemporaryDirectory())
            endpoint = str(stack.enter_context(Playground(Path(root) / "pg")).endpoint)
        names = _upload(endpoint, shards, per_shard, member)
        total = shards * per_shard * member
        print(f"{shards} shards x {per_shard} x {member // 1024} KiB ({total / 1e6:,.0f} MB), "
              f"3 epochs a pass, median of {repeat}, arms alternated")
        rates: dict[tuple[str, int, str], list[float]] = {}
        for _ in range(repeat):
            for label, checkout in (("baseline", baseline), ("this", here)):
                for workers in (0, 1):
                    out = subprocess.run(
                        [sys.executable, "-c", PASS, ",".join(names), endpoint, str(workers)],
                        capture_output=True, text=True, check=True, cwd=checkout,
                        env={**os.environ, "PYTHONPATH": checkout, "PYTHONWARNINGS": "ignore"})
                    count, seconds, steady, after_first, where = out.stdout.split()
                    assert where.startswith(checkout), (where, checkout)
                    rates.setdefault((label, workers, "epoch"), []).append(
                        int(count) * member / float(seconds) / 1e6)
                    rates.setdefault((label, workers, "steady"), []).append(
                        int(steady) * member / float(after_first) / 1e6)
        for label in ("baseline", "this"):
            for what in ("epoch", "steady"):
                inproc = statistics.median(rates[(label, 0, what)])
                one = statistics.median(rates[(label, 1, what)])
                print(f"{label:8} {what:6} in-process {inproc:7,.0f} MB/s   1 worker {one:7,.0f} "
                      f"MB/s   ratio {one / inproc:4.2f}x")
        print("(epoch: whole epochs, a worker started in each; steady: after each epoch's "
              "first batch)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--member-kib", type=int, default=100)
    parser.add_argument("--prefetch", type=int, default=4)
    parser.add_argument("--kind", choices=["bytes", "tensor"], nargs="+",
                        default=["bytes", "tensor"])
    parser.add_argument("--loader", choices=["dl", "dl2"], nargs="+", default=["dl"])
    parser.add_argument("--aistore", metavar="BASELINE_CHECKOUT",
                        help="measure 1 worker vs in-process over a local AIStore instead, "
                        "this checkout alternated with BASELINE_CHECKOUT")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--per-shard", type=int, default=300)
    args = parser.parse_args(argv)
    if args.aistore:
        aistore_arms(args.aistore, repeat=args.repeat, shards=args.shards,
                     per_shard=args.per_shard, member=args.member_kib * 1024)
        return 0
    print(f"1 worker, {args.batches} deliveries of {args.batch} x {args.member_kib} KiB, "
          f"median of {args.repeat} (arms alternated)")
    for loader in args.loader:
        for kind in args.kind:
            rates: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.repeat):
                for shm in (False, True):
                    rates[shm].append(one_pass(
                        shm=shm, kind=kind, loader=loader, count=args.batches,
                        batch=args.batch, member=args.member_kib * 1024,
                        prefetch=args.prefetch))
            old, new = statistics.median(rates[False]), statistics.median(rates[True])
            each = "; ".join(f"{arm} " + ", ".join(f"{r:,.0f}" for r in rates[shm])
                             for arm, shm in (("pickle", False), ("shm", True)))
            print(f"{loader:4} {kind:7} pickle {old:8,.0f} MB/s   shm {new:8,.0f} MB/s   "
                  f"ratio {new / old:5.2f}x   ({each})")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
