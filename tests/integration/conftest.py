"""Fixtures of the integration tests beside those of tests/conftest.py (the cluster, buckets)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aisio.playground import Playground


@pytest.fixture(scope="session")
def own_playground(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Playground]:
    """A playground apart from the session's AIStore, for the tests that kill and restart its
    nodes (core/store/test_faults.py, test_client.py): started once, on first use; each test
    leaves every node running."""
    playground = Playground(tmp_path_factory.mktemp("pg-faults"))
    playground.up()
    try:
        yield playground
    finally:
        playground.down(wipe=True, quiet=True)
