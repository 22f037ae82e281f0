"""A batch of images of different sizes, on every loader over a MemoryStore: a typed error
naming the shard and the sample (collate alone: tests/unit/core/transport/test_collate.py)."""

from __future__ import annotations

import io
from typing import Any

import pytest
import webdataset as wds
from PIL import Image

import aisio
from aisio.core.store.memory import MemoryStore
from aisio.core.store.urls import AISPath, Bucket
from tests.conftest import LOADERS


@pytest.mark.parametrize("name", [*sorted(LOADERS), "pipe"])
def test_images_of_different_sizes_name_their_shard_and_sample(
        name: str, store: MemoryStore, bucket: Bucket) -> None:
    out = io.BytesIO()
    with wds.TarWriter(out) as sink:
        for i in range(4):
            image = io.BytesIO()
            Image.new("RGB", (8, 8) if i != 2 else (12, 10)).save(image, "PNG")
            sink.write({"__key__": f"k{i}", "png": image.getvalue(), "cls": i})
    store.put(AISPath(bucket, "mixed.tar"), out.getvalue())
    options: dict[str, Any] = dict(store=store, decode="torchrgb", tuple_fields="png cls",
                                   batch_size=4, shuffle_buffer=0)
    make = LOADERS.get(name, aisio.webdataset_pipe)
    loader = make(bucket.uri("mixed.tar"), **options)
    try:
        with pytest.raises(aisio.DecodeError) as info:
            list(loader)
    finally:
        if hasattr(loader, "shutdown"):
            loader.shutdown()
    message = str(info.value)
    assert "differ in shape" in message and "3x10x12 in 1" in message and "3x8x8 in 3" in message
    if name != "pipe":  # the loaders know each sample's shard and place in it
        assert f"sample #2 of {bucket.uri('mixed.tar')}" in message
