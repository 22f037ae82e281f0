"""Smoke tests of the real AIStore node that the session fixture runs."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest

from aisio import BucketNotFoundError, ObjectNotFoundError
from aisio.core.store.client import Client
from aisio.core.store.urls import AISPath, Bucket


def test_cluster_is_ready(ais_endpoint: str) -> None:
    with urllib.request.urlopen(f"{ais_endpoint}/v1/health?prr=true", timeout=5) as resp:
        assert resp.status == 200


def test_put_list_get_range(ais_client: Client, bucket: Bucket) -> None:
    for i in range(25):
        ais_client.put_object(AISPath(bucket, f"dir/obj-{i:03d}"), f"payload-{i}".encode())
    ais_client.put_object(AISPath(bucket, "other"), b"x")
    pages = list(ais_client.list_pages(bucket, "dir/", page_size=10))
    assert len(pages) == 3
    names = [e["name"] for page in pages for e in page]
    assert names == [f"dir/obj-{i:03d}" for i in range(25)]
    assert ais_client.get_bytes(AISPath(bucket, "dir/obj-007")) == b"payload-7"
    assert ais_client.get_bytes(AISPath(bucket, "dir/obj-007"), byte_range=(2, 4)) == b"ylo"
    assert ais_client.head_object(AISPath(bucket, "dir/obj-007"))["size"] == "9"


def test_missing_bucket_and_object_are_404(ais_client: Client, bucket: Bucket) -> None:
    with pytest.raises(BucketNotFoundError) as info:
        list(ais_client.list_objects(Bucket("aisio-no-such-bucket")))
    assert info.value.status == 404
    with pytest.raises(ObjectNotFoundError) as info2:
        ais_client.get_bytes(AISPath(bucket, "nope"))
    assert info2.value.status == 404
    assert "nope" in str(info2.value)


def test_three_targets(tmp_path: Path) -> None:
    from aisio import AISConfig, AISFileLoader
    from aisio.core.store.client import client_for
    from aisio.playground import Playground

    playground = Playground(tmp_path / "pg3", ntargets=3)
    endpoint = playground.up()
    try:
        status = playground.status()
        assert status["ready"] and len(status["nodes"]) == 4
        client = client_for(AISConfig(endpoint=endpoint))
        bucket = Bucket("three")
        client.create_bucket(bucket)
        for i in range(30):
            client.put_object(AISPath(bucket, f"o{i:02d}"), bytes([i]) * 100)
        homes = {client.head_object(AISPath(bucket, f"o{i:02d}"))["location"].split(":")[0]
                 for i in range(30)}
        assert len(homes) >= 2  # objects live on different targets
        got = {u: s.read() for u, s in AISFileLoader(bucket.uri("o{00..29}"), url=endpoint)}
        assert got == {bucket.uri(f"o{i:02d}"): bytes([i]) * 100 for i in range(30)}
    finally:
        playground.down(wipe=True, quiet=True)
    assert not playground.status()["running"]
