"""Fixtures of the integration tests beside those of tests/conftest.py (the cluster, buckets)."""

from __future__ import annotations

import io

import pytest
import webdataset as wds
from PIL import Image

from aisio.core.store.client import Client
from aisio.core.store.urls import AISPath, Bucket


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
