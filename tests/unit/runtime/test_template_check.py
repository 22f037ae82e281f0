"""A template's names are checked when a loader opens its first epoch (issue #29, item 1): one
listing, every absent name in ``.missing``, the nearest template that exists in the message;
before any batch, on every loader, and by AISFileLister, over a MemoryStore."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import aisio
from aisio.core.store.memory import MemoryStore
from aisio.core.store.urls import Bucket
from tests.conftest import LOADERS, write_shards

OPTIONS = {"tuple_fields": ("__key__", "cls"), "batch_size": 2, "shuffle_buffer": 0,
           "shuffle_shards": False}


@pytest.fixture
def shapes(store: MemoryStore, bucket: Bucket, tmp_path: Path) -> Bucket:
    """A bucket of five shards, shapes-0000.tar .. shapes-0004.tar."""
    write_shards(store, bucket, tmp_path, shards=5, per_shard=2, prefix="shapes")
    return bucket


@pytest.mark.parametrize("kind", sorted(LOADERS))
@pytest.mark.parametrize(("template", "absent"), [
    ("shapes-{000..004}.tar", [f"shapes-{i:03d}.tar" for i in range(5)]),
    ("shapes-{0000..0009}.tar", [f"shapes-{i:04d}.tar" for i in range(5, 10)]),
])
def test_a_template_that_misses_fails_before_the_first_batch_naming_what_exists(
        kind: str, template: str, absent: list[str], store: MemoryStore, shapes: Bucket) -> None:
    # shards read in order by the training process: without the check, the five that exist
    # would yield their batches before the first missing one raised
    loader = LOADERS[kind](shapes.uri(template), store=store, num_workers=0, **OPTIONS)
    batches: list[Any] = []
    try:
        with pytest.raises(aisio.ObjectNotFoundError) as info:
            batches.extend(loader)
    finally:
        loader.shutdown()
    assert batches == []
    assert info.value.missing == tuple(shapes.uri(name) for name in absent)
    assert f"did you mean {shapes.uri('shapes-{0000..0004}.tar')}" in str(info.value)


def test_the_file_lister_lists_no_name_that_does_not_exist(store: MemoryStore,
                                                           shapes: Bucket) -> None:
    with pytest.raises(aisio.ObjectNotFoundError) as info:
        list(aisio.AISFileLister(shapes.uri("shapes-{000..004}.tar"), store=store))
    assert len(info.value.missing) == 5
    assert shapes.uri("shapes-{0000..0004}.tar") in str(info.value)
    unchecked = aisio.AISFileLister(shapes.uri("shapes-{000..001}.tar"), store=store,
                                    check_templates=False)
    assert list(unchecked) == [shapes.uri("shapes-000.tar"), shapes.uri("shapes-001.tar")]
