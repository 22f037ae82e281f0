"""Tests for aisio.core.pipeline.spec: the pipeline's options, their defaults, and the docs
``help()`` shows for every entry point."""

from __future__ import annotations

import pydoc

import pytest

import aisio
from aisio.core.pipeline.spec import PipelineSpec
from tests.conftest import LOADERS


def test_the_loaders_shuffle_by_default() -> None:
    from aisio.core.pipeline.spec import DEFAULT_SHUFFLE_BUFFER

    assert PipelineSpec.build(endpoint="http://h:1").shuffle_buffer == DEFAULT_SHUFFLE_BUFFER > 0
    assert PipelineSpec.build(endpoint="http://h:1", shuffle_buffer=0).shuffle_buffer == 0


ENTRY_POINTS = ["webdataset_pipe", *(f.__name__ for f in LOADERS.values())]


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_help_shows_every_option_of_an_entry_point(name: str) -> None:
    text = pydoc.render_doc(getattr(aisio, name), renderer=pydoc.plaintext)
    for option in ("shards", "num_workers" if name != "webdataset_pipe" else "resampled",
                   "shuffle_buffer", "decode", "tuple_fields", "batch_size", "on_error",
                   "cache", "timings"):
        assert f"{option}:" in text, (name, option)
    assert "default 1000" in text and "0: shard order" in text  # the default and its cost
    assert "100 MB" in text


def test_a_store_is_kept_and_anything_else_refused_by_name() -> None:
    store = aisio.MemoryStore({"b": {}})
    assert PipelineSpec.build(store=store).store is store
    assert PipelineSpec.build().store is None  # the cluster of the endpoint, made when read
    with pytest.raises(aisio.ConfigError, match=r"store=\{\} is not an object store"):
        PipelineSpec.build(store={})
