"""Unit tests open no network connection: any attempt fails the test loudly (a loader's worker
processes may still hand torch's shared memory over a local Unix socket). Loaders read from
a :class:`~aisio.MemoryStore` instead of a cluster (``store=``): the fixtures ``store`` and
``bucket`` stand for the integration tests' cluster and bucket.

Under ``make mutate`` (``scripts/mutate.py`` sets ``AISIO_MUTATION_EXAMPLES``) each property
test draws at most that many examples, the same ones on every run (``derandomize``): a mutant's
tests run thousands of times there, and a mutant's verdict must not depend on the draw.

A parametrized test's id holds no backslash or bracket (``pytest_make_parametrize_id``): the
mutation run selects each test again by its id, which pytest cannot match back when the id
escapes a byte (it then refuses the whole run, and every mutant those tests reach went
without a verdict).
"""

from __future__ import annotations

import os
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


def pytest_make_parametrize_id(config: pytest.Config, val: object, argname: str) -> str | None:
    """The id of a text or bytes parameter, where pytest's own would escape a character: the
    value's printable characters, any other as ``_`` (see the module's doc)."""
    text = val.decode("latin-1") if isinstance(val, bytes) else val
    if not isinstance(text, str):
        return None
    plain = "".join(ch if ch.isascii() and ch.isprintable() and ch not in "\\[]" else "_"
                    for ch in text)
    return None if plain == text else plain


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    cap = int(os.environ.get("AISIO_MUTATION_EXAMPLES") or 0)
    if not cap:
        return
    from hypothesis import settings

    for item in items:
        test = getattr(item, "obj", None)
        given = getattr(test, "_hypothesis_internal_use_settings", None)
        if given is not None:
            test._hypothesis_internal_use_settings = settings(
                given, max_examples=min(given.max_examples, cap), derandomize=True,
                database=None)
