"""Unit tests open no sockets: any attempt to connect fails the test loudly.

Under ``make mutate`` (``scripts/mutate.py`` sets ``AISIO_MUTATION_EXAMPLES``) each property
test draws at most that many examples, the same ones on every run (``derandomize``): a mutant's
tests run thousands of times there, and a mutant's verdict must not depend on the draw.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def _no_sockets(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: socket.socket, *args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"a unit test tried to open a connection to {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)


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
