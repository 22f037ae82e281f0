"""The options ``order="deterministic"`` keeps (docs/guide/order.md) run in that order, against
the real AIStore: ``etl`` (a resume reads each buffered span's shard from byte 0), ``cache``,
``map``, ``pin_memory``, ``in_order=False`` and ``timings``, all at once on DataLoader."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import aisio
from aisio import localetl
from aisio.core.store.client import Client
from aisio.core.store.urls import Bucket
from tests.conftest import write_shards

CLASSES = Path(__file__).parents[2] / "etl_classes.py"
ETL_NAME = "upper-order"
OPTS: dict[str, Any] = dict(order="deterministic", streams=4, batch_size=8, shuffle_buffer=6,
                            seed=5, tuple_fields=("__key__", "cls"),
                            decode=aisio.Decoder(image=None))


def _marked(sample: tuple[str, int]) -> tuple[str, int]:
    """map=: runs in the workers, on each (key, label)."""
    key, label = sample
    return f"mapped:{key}", label


def _keys(loader: Any, stop: int | None = None) -> list[list[str]]:
    out: list[list[str]] = []
    for keys, labels in loader:
        assert isinstance(labels, torch.Tensor) and len(labels) == len(keys)
        out.append(list(keys))
        if len(out) == stop:
            break
    return out


@pytest.fixture
def etl_calls(ais_endpoint: str, tmp_path: Path,
              monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A local ETL (UpperText: the ``bin``/``cls`` members pass as they are) that logs each
    object it transforms to the file this fixture yields."""
    log = tmp_path / "etl-calls.log"
    monkeypatch.setenv("AISIO_TEST_ETL_CALLS", str(log))
    with localetl.running(f"{CLASSES}:UpperText", ETL_NAME, ais_endpoint, replace=True):
        yield log


def _pinned(asked: bool) -> Any:
    """torch warns that it cannot pin without an accelerator; with one it pins, silently."""
    accelerator = getattr(torch, "accelerator", None)
    pins = accelerator.is_available() if accelerator is not None else torch.cuda.is_available()
    if pins or not asked:
        return contextlib.nullcontext()
    return pytest.warns(UserWarning, match="pin_memory")


def _interrupted(template: str, endpoint: str, stop: int, **kept: Any) -> tuple[
        list[list[str]], list[list[str]], Any]:
    """Runs ``stop`` batches, then a new loader resumed from the state: (before, after, state)."""
    first = aisio.webdataset_dataloader(template, url=endpoint, num_workers=2, **kept)
    try:
        with _pinned(kept.get("pin_memory", False)):
            got = _keys(first, stop=stop)
        state = json.loads(json.dumps(first.state_dict()))
        timings = first.timings
    finally:
        first.shutdown()
    second = aisio.webdataset_dataloader(template, url=endpoint, num_workers=2, **kept)
    try:
        second.load_state_dict(state)
        with _pinned(kept.get("pin_memory", False)):
            rest = _keys(second)
    finally:
        second.shutdown()
    return got, rest, timings


def test_the_kept_options_run_in_the_deterministic_order(
        ais_client: Client, bucket: Bucket, tmp_path: Path, ais_endpoint: str,
        etl_calls: Path) -> None:
    template, keys = write_shards(ais_client, bucket, tmp_path, shards=4, per_shard=12)
    # the reference: one worker, map= and a cache filled by this whole epoch
    cache = aisio.ShardCache(tmp_path / "cache", max_bytes=10**9)
    plain = aisio.webdataset_dataloader(template, url=ais_endpoint, num_workers=1, cache=cache,
                                        map=_marked, **OPTS)
    try:
        whole = _keys(plain)
    finally:
        plain.shutdown()
    assert sorted(k for b in whole for k in b) == sorted(f"mapped:{k}" for k in keys)
    assert len(list(cache.directory.glob("*.shard"))) == 4  # every shard, read to the end

    # etl (its resume reads the shard from byte 0), map, pin_memory, in_order=False, timings
    got, rest, timings = _interrupted(template, ais_endpoint, 3, etl=ETL_NAME, map=_marked,
                                      pin_memory=True, in_order=False, timings=True, **OPTS)
    assert got + rest == whole
    transformed = etl_calls.read_text().split()
    assert len(transformed) > 4, transformed  # every shard, and again those resumed
    totals = timings.totals()  # recorded in the workers
    assert totals["parse_n"] > 0 and totals["decode_n"] > 0, totals


def test_etl_with_a_cache_resumes_in_the_deterministic_order(
        ais_client: Client, bucket: Bucket, tmp_path: Path, ais_endpoint: str,
        etl_calls: Path) -> None:
    template, keys = write_shards(ais_client, bucket, tmp_path, shards=4, per_shard=12)
    cache = aisio.ShardCache(tmp_path / "cache", max_bytes=10**9)
    got, rest, _ = _interrupted(template, ais_endpoint, 3, etl=ETL_NAME, cache=cache, **OPTS)
    assert sorted(k for b in got + rest for k in b) == sorted(keys)
