"""Shared fixtures: a real AIStore for the session, and a fresh bucket per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from aisio import AISConfig, Playground
from aisio._client import Client, client_for
from aisio._urls import Bucket

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if (HERE / "integration") in Path(item.fspath).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def ais_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The endpoint of a real AIStore: AIS_ENDPOINT if set, else a playground for this session."""
    explicit = os.environ.get("AIS_ENDPOINT")
    if explicit:
        yield explicit.rstrip("/")
        return
    playground = Playground(tmp_path_factory.mktemp("ais-playground"), ntargets=1)
    endpoint = playground.up()
    try:
        yield endpoint
    finally:
        playground.down(wipe=True, quiet=True)


@pytest.fixture(scope="session")
def ais_config(ais_endpoint: str) -> AISConfig:
    return AISConfig(endpoint=ais_endpoint)


@pytest.fixture(scope="session")
def ais_client(ais_config: AISConfig) -> Client:
    return client_for(ais_config)


@pytest.fixture
def bucket(ais_client: Client) -> Iterator[Bucket]:
    """A uniquely named, empty ais:// bucket, destroyed after the test."""
    bck = Bucket(f"aisio-test-{uuid.uuid4().hex[:10]}")
    ais_client.create_bucket(bck)
    try:
        yield bck
    finally:
        ais_client.destroy_bucket(bck)
