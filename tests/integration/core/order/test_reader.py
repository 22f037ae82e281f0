"""The deterministic order's core against the real AIStore: a resume on another topology
refills each stream's buffer with ``Range`` GETs at the offsets the state recorded (seen by a
recording proxy) and yields exactly the rest of the uninterrupted sequence.

Topologies are simulated in one process by running the per-reader code the loaders will run
(see tests/unit/core/order/test_streams.py); the bytes come from AIStore through :class:`Fetcher`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aisio.core.order.reader import reader_rounds
from aisio.core.order.reorder import Reorderer
from aisio.core.order.streams import OrderPlan, merge_order_states
from aisio.core.pipeline.fetch import Fetcher
from aisio.core.store.client import Client
from aisio.core.store.config import AISConfig
from aisio.core.store.sources import objects, resolve_one
from aisio.core.store.urls import Bucket
from tests.conftest import write_shards
from tests.integration._recording_proxy import RecordingProxy


def _ranks(plan: OrderPlan, fetcher: Fetcher, ranks: int, workers: int,
           state: dict[str, Any] | None) -> list[tuple[Reorderer, Iterator[list[Any]]]]:
    out = []
    for rank in range(ranks):
        reorderer = Reorderer(plan, rank, ranks, state=state)
        readers = [reader_rounds(plan, plan.reader_streams(rank, ranks, w, workers),
                                 fetcher.open, state=state) for w in range(max(workers, 1))]
        out.append((reorderer, reorderer.batches(_round_robin(readers))))
    return out


def _round_robin(readers: list[Iterator[Any]]) -> Iterator[Any]:
    live = list(readers)
    while live:
        for reader in list(live):
            item = next(reader, None)
            if item is None:
                live.remove(reader)
            else:
                yield item


def _run(ranks: list[tuple[Reorderer, Iterator[list[Any]]]], steps: int | None
         ) -> list[tuple[int, int, str]]:
    got: list[tuple[int, int, str]] = []
    step = 0
    while steps is None or step < steps:
        alive = False
        for rank, (reorderer, batches) in enumerate(ranks):
            batch = next(batches, None)
            if batch is not None:
                alive = True
                got.extend((reorderer.round, rank, s["__key__"]) for s in batch)
        if not alive:
            return got
        step += 1
    return got


def _global(got: list[tuple[int, int, str]]) -> list[str]:
    return [key for _, _, key in sorted(got, key=lambda x: (x[0], x[1]))]


def test_resume_refills_buffers_with_range_gets_at_recorded_offsets(
        ais_client: Client, ais_config: AISConfig, bucket: Bucket, tmp_path: Path) -> None:
    template, keys = write_shards(ais_client, bucket, tmp_path, shards=6, per_shard=40,
                                  payload=700)
    refs = [ref for source in resolve_one(template) for ref in objects(source)]
    plan = OrderPlan(refs, seed=11, epoch=3, streams=4, batch=8, buffer=24)
    direct = Fetcher(ais_config)

    whole = _global(_run(_ranks(plan, direct, 1, 2, None), None))
    assert sorted(whole) == sorted(keys)
    assert _global(_run(_ranks(plan, direct, 2, 1, None), None)) == whole

    first = _ranks(plan, direct, 2, 1, None)
    before = _global(_run(first, 5))  # 10 delivered + 24 buffered < 40 read per stream
    state = merge_order_states([json.loads(json.dumps(r.state_dict())) for r, _ in first])

    proxy = RecordingProxy(ais_config.endpoint).start()
    try:
        via_proxy = Fetcher(AISConfig(endpoint=proxy.endpoint))
        after = _global(_run(_ranks(plan, via_proxy, 1, 3, state), None))
        gets = proxy.recorded_gets()
    finally:
        proxy.stop()
    assert before + after == whole

    names = [ref.path.obj for ref in refs]
    spans, cursors = set(), set()
    for s, entry in state["state"].items():
        assert entry != "done"
        _, _, place, offset, _, stream_spans = entry[:6]
        spans |= {(names[span[0]], span[2]) for span in stream_spans}
        cursors.add((names[plan.stream_shards(int(s))[place]], offset))
    assert len(spans) >= plan.streams and all(offset > 0 for _, offset in cursors)
    asked = [(g["object"], g["range"]) for g in gets]
    # every buffered span is read again from its recorded start, with a Range GET (the last
    # span of a shard in progress by the same GET that goes on past the recorded byte), never
    # the shard from byte 0; the streams' shards in progress are read on from there
    for name, start in spans:
        assert (name, f"bytes={start}-" if start else None) in asked, (name, start)
    for name, offset in cursors:
        assert any(n == name and (r == f"bytes={offset}-" or (n, s) in spans)
                   for n, r in asked for s in [int(r[6:-1]) if r else 0])
    assert len(gets) == len(spans) + (len(refs) - len({n for n, _ in spans | cursors}))
    started = {name for name, _ in spans | cursors}
    for name, range_ in asked:
        if name in started and range_ is None:
            assert (name, 0) in spans  # a buffered sample that is the shard's first
    print(f"\nresume: {len(gets)} GETs, {len(spans)} span(s) refilled, "
          f"{sum(g['bytes'] for g in gets)} bytes sent by the proxy")
