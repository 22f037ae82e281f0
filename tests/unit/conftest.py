"""Unit tests open no network connection: any attempt fails the test loudly (a loader's worker
processes may still hand torch's shared memory over a local Unix socket). Loaders read from
a :class:`~aisio.MemoryStore` instead of a cluster (``store=``): the fixtures ``store`` and
``bucket`` stand for the integration tests' cluster and bucket."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from aisio.core.store.memory import MemoryStore
from aisio.core.store.urls import Bucket
from tests.conftest import write_jpeg_shards


@pytest.fixture(autouse=True)
def _no_sockets(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(connect: Any) -> Any:
        def refuse(self: socket.socket, *args: Any, **kwargs: Any) -> Any:
            if self.family in (socket.AF_INET, socket.AF_INET6):
                raise AssertionError(f"a unit test tried to open a connection to {args!r}")
            return connect(self, *args, **kwargs)

        return refuse

    monkeypatch.setattr(socket.socket, "connect", refused(socket.socket.connect))
    monkeypatch.setattr(socket.socket, "connect_ex", refused(socket.socket.connect_ex))


@pytest.fixture
def bucket() -> Bucket:
    """The bucket of ``store``."""
    return Bucket("test")


@pytest.fixture
def store(bucket: Bucket) -> MemoryStore:
    """An empty bucket in memory: the loaders read it with ``store=store``."""
    return MemoryStore({bucket.uri(): {}})


@pytest.fixture
def jpeg_shards(store: MemoryStore, bucket: Bucket) -> str:
    """Two shards of 10 (jpg, json, cls) samples; sample s1/0003's JPEG is cut short."""
    return write_jpeg_shards(store, bucket)
