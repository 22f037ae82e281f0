"""What only a cluster shows about bad input: an unreachable one is never skipped as a bad
shard (bad shards themselves, over a MemoryStore: tests/unit/core/faults/test_bad_shards.py)."""

from __future__ import annotations

import pytest

import aisio
from aisio.core.store.urls import Bucket


def test_an_unreachable_cluster_is_never_skipped(bucket: Bucket) -> None:
    import socket

    with socket.socket() as probe:  # a port on loopback that nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    config = aisio.AISConfig(endpoint=dead, max_retries=1, backoff=0.01)
    for on_error in ("skip", "warn"):
        with pytest.raises(aisio.AISConnectionError, match="retries ran out"):
            list(aisio.webdataset_pipe(bucket.uri("s-{0..2}.tar"), config=config,
                                       on_error=on_error))  # type: ignore[arg-type]
