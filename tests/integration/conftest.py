"""Fixtures of the integration tests beside those of tests/conftest.py (the cluster, buckets)."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
import webdataset as wds
from PIL import Image

from aisio.core.store.client import Client
from aisio.core.store.urls import AISPath, Bucket
from aisio.playground import Playground


def jpeg(value: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (value, 0, 0)).save(out, "JPEG")
    return out.getvalue()


@pytest.fixture
def jpeg_shards(ais_client: Client, bucket: Bucket) -> str:
    """Two shards of 10 (jpg, json, cls) samples; sample s1/0003's JPEG is cut short."""
    for s in range(2):
        out = io.BytesIO()
        with wds.TarWriter(out) as sink:
            for i in range(10):
                image = jpeg(i)
                if (s, i) == (1, 3):
                    image = image[:40]
                sink.write({"__key__": f"s{s}/{i:04d}", "jpg": image, "json": {"i": i},
                            "cls": i})
        ais_client.put_object(AISPath(bucket, f"train-{s}.tar"), out.getvalue())
    return bucket.uri("train-{0..1}.tar")


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
