"""Shards -> samples -> batches through DataLoader2, against the real node: what only a cluster
shows (HTTP URLs read by webdataset, ranks in processes of their own, a cache that saves GETs).
The pipeline's logic over a MemoryStore: tests/unit/datapipes/test_pipeline_loaders.py."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest
import webdataset as wds

import aisio
from aisio.core.store.client import Client
from aisio.core.store.urls import Bucket
from aisio.core.system.ports import free_port
from tests.conftest import needs_dataloader2, sample_keys, write_shards
from tests.faultproxy import fault_proxy
from tests.integration.jobs import popen

pytestmark = needs_dataloader2

HERE = Path(__file__).parents[1]  # the integration tests' helper scripts


@pytest.fixture
def shards(ais_client: Client, bucket: Bucket, tmp_path: Path) -> tuple[str, list[str]]:
    return write_shards(ais_client, bucket, tmp_path, shards=5, per_shard=20)


def test_source_lister_urls_feed_webdataset(ais_endpoint: str,
                                            shards: tuple[str, list[str]]) -> None:
    template, keys = shards
    urls = list(aisio.AISSourceLister(template, url=ais_endpoint))
    dataset = wds.WebDataset(urls, shardshuffle=False)
    ours = list(aisio.AISFileLoader(urls).ais_parse_webdataset())
    theirs = list(dataset)
    assert [s["__key__"] for s in theirs] == [s["__key__"] for s in ours] == keys
    for a, b in zip(ours, theirs, strict=True):
        assert (a["bin"], a["cls"]) == (b["bin"], b["cls"])
    loader = wds.WebLoader(dataset, num_workers=0, batch_size=None)
    assert sum(1 for _ in loader) == len(keys)


@pytest.mark.parametrize(("shards_n", "uneven"), [(4, "drop"), (5, "drop"), (5, "keep")])
def test_two_ranks_two_workers(ais_endpoint: str, ais_client: Client, bucket: Bucket,
                               tmp_path: Path, shards_n: int, uneven: str) -> None:
    template, keys = write_shards(ais_client, bucket, tmp_path, shards=shards_n, per_shard=10)
    port = free_port()
    outs = [tmp_path / f"rank{r}.json" for r in range(2)]
    logs = [tmp_path / f"stderr-{r}.txt" for r in range(2)]
    procs = [popen([sys.executable, str(HERE / "_dist_job.py"), str(r), "2", str(port),
                    ais_endpoint, template, uneven, "2", str(outs[r])], logs[r])
             for r in range(2)]
    for p, log in zip(procs, logs, strict=True):
        assert p.wait(timeout=120) == 0, log.read_text()[-3000:]  # no rank hangs
    per_rank = [json.loads(o.read_text()) for o in outs]
    union = per_rank[0] + per_rank[1]
    assert len(set(union)) == len(union)  # never a sample twice
    if uneven == "keep":
        assert sorted(union) == sorted(keys)  # every sample exactly once
    else:
        # Every rank yields the same number of samples; the surplus of the longer rank is
        # dropped for this epoch (shards are 10+i samples, so the split is rarely exact). The
        # rank that ran out first yielded its whole share: every sample of its shards, and
        # nothing else is dropped but the other rank's samples past that count.
        assert len(per_rank[0]) == len(per_rank[1])
        assert set(union) <= set(keys)
        by_shard = Counter(k.split("/")[0] for k in keys)
        shares = [Counter(k.split("/")[0] for k in rank) for rank in per_rank]
        assert any(share == {s: by_shard[s] for s in share} and
                   len(share) in (shards_n // 2, (shards_n + 1) // 2) for share in shares), shares


def test_shard_cache_serves_later_epochs_and_stays_under_its_limit(
        ais_endpoint: str, ais_client: Client, bucket: Bucket, tmp_path: Path) -> None:
    template, keys = write_shards(ais_client, bucket, tmp_path, shards=4, per_shard=20,
                                  payload=1000)
    cache = aisio.ShardCache(tmp_path / "cache", max_bytes=10**9)
    with fault_proxy(ais_endpoint) as proxy:  # counts the GETs of later epochs
        loader = aisio.webdataset_loader(template, url=ais_endpoint, num_workers=2, cache=cache)
        try:
            assert sorted(sample_keys(loader)) == sorted(keys)
            assert len(list((tmp_path / "cache").glob("*.shard"))) == 4
            again = aisio.webdataset_loader(template, url=proxy.endpoint, num_workers=2,
                                            cache=cache)
            assert sorted(sample_keys(again)) == sorted(keys)
            again.shutdown()
        finally:
            loader.shutdown()
        concurrent = aisio.AISFileLoader(template, url=proxy.endpoint, concurrency=3,
                                         cache=cache)
        assert len(list(concurrent.ais_parse_webdataset())) == len(keys)
        assert proxy.object_gets == 0  # only HEADs (the version): the bytes came from the cache
    small = aisio.ShardCache(tmp_path / "small", max_bytes=int(cache.size() / 2))
    for url in aisio.AISSourceLister(template, url=ais_endpoint):
        small.store(url, b"x" * (cache.size() // 5), version="1")
    assert small.size() <= small.max_bytes
