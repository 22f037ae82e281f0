"""The deterministic order's reader against today's path, in one process, on the same shards.

Run: ``.venv/bin/python -m benchmarks.bench_order [--repeat R] [--ais]``. Shards are built in
memory (``--ais``: also uploaded to AIS_ENDPOINT, else a local AIStore, and read through
:class:`Fetcher`). Arms, alternated in each round, medians reported with their ratio to the
first:

* ``default``: today's per-worker path: :func:`task_samples` over each shard, then the sample
  shuffle buffer (:func:`shuffle_buffer`), as ``epoch_pipe`` runs it in a worker;
* ``ordered reader``: :func:`reader_rounds` over all K streams (the workers' side);
* ``ordered + loop``: the same, fed through :class:`Reorderer` (the training side's reorder and
  shadow replay, in the same process).

It also prints the state's size for 10,000 shards with 1,000-sample buffers, for K = 1, 8, 64.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import statistics
import time
import uuid
from collections.abc import Callable
from typing import IO, Any

from aisio.core.epochs.progress import ShardTask
from aisio.core.order.reader import reader_rounds
from aisio.core.order.reorder import Reorderer, StreamShadow
from aisio.core.order.streams import OrderPlan
from aisio.core.pipeline.parse import task_samples
from aisio.core.pipeline.shuffle import shuffle_buffer
from aisio.core.store.sources import ObjectRef
from aisio.core.store.urls import parse_ais_url


def make_shards(count: int, samples: int, payload: int, seed: int = 0) -> list[bytes]:
    import tarfile

    rng = random.Random(seed)
    out = []
    for s in range(count):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for k in range(samples):
                for suffix, data in (("bin", rng.randbytes(payload)), ("cls", b"%d" % k)):
                    info = tarfile.TarInfo(f"s{s}/k{k:06d}.{suffix}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        out.append(buf.getvalue())
    return out


class MemoryObject(io.RawIOBase):
    """An object in memory read from ``start`` without copying it whole (as a stream is)."""

    def __init__(self, data: bytes, start: int) -> None:
        super().__init__()
        self.view, self.pos = memoryview(data), start

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        end = len(self.view) if size is None or size < 0 else self.pos + size
        chunk = bytes(self.view[self.pos:end])
        self.pos += len(chunk)
        return chunk


def arms(refs: list[ObjectRef], open_: Callable[..., IO[bytes]], streams: int, batch: int,
         buffer: int) -> dict[str, Callable[[], int]]:
    plan = OrderPlan(refs, seed=0, epoch=0, streams=streams, batch=batch, buffer=buffer)

    def default() -> int:
        def samples() -> Any:
            for i, ref in enumerate(refs):
                yield from task_samples(ShardTask(i, ref), open_(ref, start=0))
        shuffled = shuffle_buffer(samples(), buffer, random.Random(0)) if buffer else samples()
        return sum(1 for _ in shuffled)

    def reader() -> int:
        return sum(len(c.values) for pack in reader_rounds(plan, range(streams), open_)
                   for c in pack)

    def loop() -> int:
        reorderer = Reorderer(plan)
        return sum(len(b) for b in reorderer.batches(reader_rounds(plan, range(streams), open_)))

    return {"default": default, "ordered reader": reader, "ordered + loop": loop}


def measure(name: str, table: dict[str, Callable[[], int]], repeat: int) -> None:
    runs: dict[str, list[float]] = {k: [] for k in table}
    counts = {k: fn() for k, fn in table.items()}  # warm-up
    assert len(set(counts.values())) == 1, counts
    for _ in range(repeat):
        for k, fn in table.items():
            start = time.perf_counter()
            fn()
            runs[k].append(time.perf_counter() - start)
    base = statistics.median(runs["default"])
    print(f"\n{name}: {next(iter(counts.values())):,} samples, median of {repeat}")
    for k, r in runs.items():
        med = statistics.median(r)
        print(f"  {k:16s} {next(iter(counts.values())) / med:>12,.0f} samples/s  "
              f"{base / med:5.2f}x default")


def state_size(streams: int, buffer: int = 1000, shards: int = 10_000) -> int:
    """The state after each stream read 2.35 shards of 2,000 samples of ~100 KiB."""
    refs = [ObjectRef(parse_ais_url(f"ais://b/t-{i:05d}.tar")) for i in range(shards)]
    plan = OrderPlan(refs, seed=0, epoch=0, streams=streams, batch=streams * 8, buffer=buffer)
    state = {**plan.header(), "state": {}}
    size = 102_912
    for s in range(streams):
        shadow, reader = StreamShadow(plan, s), plan.buffer_of(s)
        order = plan.stream_shards(s)
        log: list[Any] = []
        n = 0
        for place, count in enumerate((2000, 2000, 700)):
            for o in range(count):
                position = (order[place], o, o * size, (o + 1) * size, o == 1999, n)
                n += 1
                log.append(position)
                out = reader.push(n - 1, position)
                if out is not None:
                    shadow.deliver((out, log))
                    log = []
        state["state"][str(s)] = shadow.entry()
    return len(json.dumps(state, separators=(",", ":")))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--ais", action="store_true", help="also read through AIStore")
    parser.add_argument("--loaders", action="store_true",
                        help="only: webdataset_dataloader, fast vs deterministic, via AIStore")
    args = parser.parse_args()
    if args.loaders:
        return measure_loaders(args.repeat)
    workloads = [("2 KiB samples, 8 shards x 4,000", 8, 4000, 2048, 8, 64, 1000),
                 ("100 KiB samples, 8 shards x 200", 8, 200, 102_400, 8, 64, 100)]
    for name, count, samples, payload, streams, batch, buffer in workloads:
        data = make_shards(count, samples, payload)
        refs = [ObjectRef(parse_ais_url(f"ais://b/s-{i}.tar")) for i in range(count)]
        blobs = {ref.uri(): blob for ref, blob in zip(refs, data, strict=True)}

        def open_mem(ref: ObjectRef, *, start: int = 0, expect: str | None = None,
                     blobs: dict[str, bytes] = blobs) -> IO[bytes]:
            return MemoryObject(blobs[ref.uri()], start)  # type: ignore[return-value]

        measure(f"{name}, in memory, K={streams}, buffer {buffer}",
                arms(refs, open_mem, streams, batch, buffer), args.repeat)
        if args.ais:
            measure_ais(name, data, streams, batch, buffer, args.repeat)
    for k in (1, 8, 64):
        print(f"state, 10,000 shards, K={k}, 1,000-sample buffers: {state_size(k):,} bytes")
    return 0


def measure_ais(name: str, data: list[bytes], streams: int, batch: int, buffer: int,
                repeat: int) -> None:
    from aisio.core.pipeline.fetch import Fetcher
    from aisio.core.store.client import client_for
    from aisio.core.store.config import AISConfig
    from aisio.core.store.urls import AISPath, Bucket
    from aisio.playground import cluster_endpoint

    with cluster_endpoint() as endpoint:
        config = AISConfig(endpoint=endpoint)
        client = client_for(config)
        bucket = Bucket(f"bench-order-{uuid.uuid4().hex[:8]}")
        client.create_bucket(bucket)
        try:
            refs = []
            for i, blob in enumerate(data):
                path = AISPath(bucket, f"s-{i}.tar")
                client.put_object(path, blob)
                refs.append(ObjectRef(path))
            measure(f"{name}, AIStore, K={streams}, buffer {buffer}",
                    arms(refs, Fetcher(config).open, streams, batch, buffer), repeat)
        finally:
            client.destroy_bucket(bucket)


def measure_loaders(repeat: int, workers: int = 2) -> int:
    """Today's resumable DataLoader against the ordered one, same shards, same run."""
    import aisio
    from aisio.core.store.client import client_for
    from aisio.core.store.config import AISConfig
    from aisio.core.store.urls import AISPath, Bucket
    from aisio.playground import cluster_endpoint

    with cluster_endpoint() as endpoint:
        client = client_for(AISConfig(endpoint=endpoint))
        # the same samples held in all: workers x default buffer = K x ordered buffer
        for name, count, samples, payload, held in [("2 KiB", 8, 4000, 2048, 1000),
                                                    ("100 KiB", 8, 200, 102_400, 200)]:
            bucket = Bucket(f"bench-order-{uuid.uuid4().hex[:8]}")
            client.create_bucket(bucket)
            try:
                for i, blob in enumerate(make_shards(count, samples, payload)):
                    client.put_object(AISPath(bucket, f"s-{i}.tar"), blob)
                shards = [bucket.uri(f"s-{i}.tar") for i in range(count)]
                opts = dict(endpoint=endpoint, batch_size=64, num_workers=workers, seed=0,
                            collate=False)

                def default(opts: dict[str, Any] = opts, shards: list[str] = shards,
                            buffer: int = held // workers) -> int:
                    loader = aisio.webdataset_dataloader(shards, shuffle_buffer=buffer, **opts)
                    return sum(len(b) for b in loader)

                def ordered(opts: dict[str, Any] = opts, shards: list[str] = shards,
                            buffer: int = held // 8) -> int:
                    loader = aisio.webdataset_dataloader(shards, order="deterministic", streams=8,
                                                         shuffle_buffer=buffer, **opts)
                    return sum(len(b) for b in loader)

                measure(f"{name} samples, {count} x {samples}, DataLoader {workers} workers, "
                        f"batch 64 (buffers: {held // workers} per worker; ordered: K=8, "
                        f"{held // 8} per stream)",
                        {"default": default, "ordered": ordered}, repeat)
            finally:
                client.destroy_bucket(bucket)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
