"""The ranks of a real 2-rank gloo job agree on what the epoch is (issue #31, item 5): a bucket
is listed once, by rank 0, and every rank splits that one list, whatever its own listing would
have been; ranks given different shards stop at once, on every rank, with a ConfigError naming
the difference. One job (``_shards_job.py``) per loader runs every scenario."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aisio.core.store.client import Client
from aisio.core.store.urls import Bucket
from aisio.core.system.ports import free_port
from tests.conftest import HAS_DATALOADER2, HAS_NODES, write_shards

HERE = Path(__file__).parents[1]  # the integration tests' helper scripts
JOB_TIMEOUT = 180
SHARDS = 6

KINDS = [kind for kind, present in [("dl2", HAS_DATALOADER2), ("dataloader", True),
                                    ("stateful", True), ("nodes", HAS_NODES)] if present]


@pytest.fixture(scope="module")
def data(ais_client: Client, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[tuple[Bucket, list[str]]]:
    """A bucket of 6 shards of 3..8 samples; its keys."""
    bucket = Bucket(f"aisio-agree-{uuid.uuid4().hex[:8]}")
    ais_client.create_bucket(bucket)
    try:
        _, keys = write_shards(ais_client, bucket, tmp_path_factory.mktemp("shards"),
                               shards=SHARDS, per_shard=3)
        yield bucket, keys
    finally:
        ais_client.destroy_bucket(bucket)


@pytest.fixture(scope="module", params=KINDS)
def ranks(request: pytest.FixtureRequest, ais_endpoint: str, data: tuple[Bucket, list[str]],
          tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Runs both ranks of the job with one kind of loader; returns what each wrote."""
    bucket, _ = data
    out = tmp_path_factory.mktemp(f"agree-{request.param}")
    port = free_port()
    procs = [subprocess.Popen(
        [sys.executable, str(HERE / "_shards_job.py"), "--kind", request.param, "--rank",
         str(rank), "--world", "2", "--port", str(port), "--endpoint", ais_endpoint,
         "--bucket", bucket.uri(""), "--shards", str(SHARDS), "--out",
         str(out / f"rank{rank}.json")], stderr=subprocess.PIPE, text=True) for rank in range(2)]
    try:
        for proc in procs:
            _, err = proc.communicate(timeout=JOB_TIMEOUT)
            assert proc.returncode == 0, err[-3000:]
    finally:
        for proc in procs:  # (waited for: a rank left running warns in a later test)
            proc.kill()
            proc.wait()
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(2)]


@pytest.mark.parametrize("scenario", ["listed", "listed-deterministic"])
def test_rank_zero_lists_the_bucket_once_and_every_rank_splits_its_list(
        ranks: list[dict[str, Any]], data: tuple[Bucket, list[str]], scenario: str) -> None:
    """Rank 1's own listing would miss the last shard (listed a moment apart, as an upload
    went in): before, each rank listed and split its own list, so the ranks cut their shares
    from two lists (some shards read twice, some never). Now rank 0 lists once, for both."""
    bucket, keys = data
    got = [rank[scenario] for rank in ranks]
    assert all("error" not in rank for rank in got), got
    names = [bucket.uri(f"shard-{i:04d}.tar") for i in range(SHARDS)]
    assert got[0]["shards"] == got[1]["shards"] == names
    assert [rank["listings"] for rank in got] == [1, 0]
    read = Counter(got[0]["keys"] + got[1]["keys"])
    assert sorted(read) == sorted(keys) and set(read.values()) == {1}  # every sample once


def test_ranks_given_other_shards_stop_with_an_error_naming_them(
        ranks: list[dict[str, Any]], data: tuple[Bucket, list[str]]) -> None:
    """Rank 1 is given a template of one shard fewer than rank 0's: before, each rank read its
    share of its own list and nothing said so; now both stop before reading, and rank 1 names
    the shard it lacks."""
    bucket, _ = data
    got = [rank["other-shards"] for rank in ranks]
    assert [rank.get("error", "").split(":")[0] for rank in got] == ["ConfigError"] * 2, got
    assert f"rank 1 was given other shards than rank 0 ({SHARDS} shard(s))" in got[0]["error"]
    assert (f"rank 1's shards are not rank 0's: 1 only on rank 0 "
            f"({bucket.uri(f'shard-{SHARDS - 1:04d}.tar')})") in got[1]["error"]
    assert [rank["listings"] for rank in got] == [0, 0]
