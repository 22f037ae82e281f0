"""Cache keys: object and ETL, never host and port."""

from __future__ import annotations

from pathlib import Path

from aisio import ETL, ShardCache
from aisio.core.store.urls import AISPath, Bucket, object_url


def test_keys_name_object_and_etl_not_host_and_port(tmp_path: Path) -> None:
    cache = ShardCache(tmp_path, max_bytes=1)
    path = AISPath(Bucket("b"), "s.tar")
    here, moved = object_url("http://127.0.0.1:1", path), object_url("http://127.0.0.1:2", path)
    assert cache.path_for(here, "v=1") == cache.path_for(moved, "v=1")
    assert cache.path_for(here, "v=1") != cache.path_for(here, "v=2")
    etl = object_url("http://127.0.0.1:1", path, ETL("resize", {"w": 64}))
    other = object_url("http://127.0.0.1:1", path, ETL("resize", {"w": 32}))
    assert len({cache.path_for(u, "v=1") for u in (here, etl, other)}) == 3
