"""An ETL name no ETL runs under, against a real AIStore node built with ETL support (``-tags
etl``; the playground's node has none and answers 501): the node's own 404 becomes
``ETLNotFoundError`` naming the ETL and the object.

Marked ``long`` (not in ``make test``): the first run builds that node (minutes; cached after),
and each run starts one (``pytest -m long tests/integration/core/store/test_etl_node.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import aisio
from aisio.core.store.client import Client
from aisio.core.store.urls import AISPath, Bucket
from aisio.playground import BUILD_TAGS, Playground, build_node

pytestmark = pytest.mark.long


@pytest.fixture(scope="module")
def etl_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The endpoint of a one-target playground whose node is built with ETL support."""
    binary = build_node(tags=(*BUILD_TAGS, "etl"))
    playground = Playground(tmp_path_factory.mktemp("ais-etl"), ntargets=1, binary=binary)
    endpoint = playground.up()
    try:
        yield endpoint
    finally:
        playground.down(wipe=True, quiet=True)


def test_an_etl_the_cluster_does_not_run_is_etl_not_found(etl_node: str) -> None:
    client = Client(aisio.AISConfig(endpoint=etl_node))
    bucket = Bucket("etl-missing")
    client.create_bucket(bucket, exist_ok=True)
    client.put_object(AISPath(bucket, "s.tar"), b"x" * 512)
    shard = bucket.uri("s.tar")
    with pytest.raises(aisio.ETLNotFoundError) as info:
        list(aisio.AISFileLoader(shard, endpoint=etl_node, etl="no-such-etl"))
    message = str(info.value)
    assert "'no-such-etl'" in message and shard in message and "aisio etl init" in message
    assert info.value.status == 404 and not isinstance(info.value, aisio.ObjectNotFoundError)
    # the object itself is there: without etl= it reads
    assert [s.read() for _, s in aisio.AISFileLoader(shard, endpoint=etl_node)] == [b"x" * 512]


def test_the_node_under_test_has_etl_support(etl_node: str) -> None:
    """What makes the test above one: this node answers 404, not 501, for an unknown ETL."""
    import requests

    client = Client(aisio.AISConfig(endpoint=etl_node))
    client.create_bucket(Bucket("etl-support"), exist_ok=True)
    client.put_object(AISPath(Bucket("etl-support"), "o"), b"x")
    resp = requests.get(f"{etl_node}/v1/objects/etl-support/o", params={"etl_name": "nope"},
                        timeout=30)
    assert resp.status_code == 404 and "nope does not exist" in resp.text, resp.text
    assert Path(build_node(tags=(*BUILD_TAGS, "etl"))).exists()
