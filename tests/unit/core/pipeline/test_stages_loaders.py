"""The per-sample stage in real pipes and loaders, over a MemoryStore: a corrupt JPEG ends the
epoch, or is skipped and reported (also from worker processes), and every stage's time is
counted, per epoch."""

from __future__ import annotations

import pytest

import aisio
from aisio.core.store.memory import MemoryStore
from tests.conftest import LOADERS, default_loader


def test_corrupt_jpeg_ends_the_epoch_by_default(store: MemoryStore, jpeg_shards: str) -> None:
    pipe = aisio.webdataset_pipe(jpeg_shards, store=store, decode="rgb8", shuffle_shards=False,
                                 shuffle_buffer=0)
    with pytest.raises(aisio.DecodeError, match=r"'s1/0003'.*train-1\.tar"):
        list(pipe)


@pytest.mark.parametrize("policy", ["skip", "warn"])
def test_decode_policy_skips_only_the_bad_sample(store: MemoryStore, jpeg_shards: str,
                                                 policy: str) -> None:
    pipe = aisio.webdataset_pipe(jpeg_shards, store=store, decode="rgb8", shuffle_shards=False,
                                 shuffle_buffer=0, tuple_fields="jpg;png json cls",
                                 on_error=policy)
    if policy == "warn":
        with pytest.warns(UserWarning, match="s1/0003"):
            got = list(pipe)
    else:
        got = list(pipe)
    assert len(got) == 19
    image, meta, label = got[0]
    assert image.shape == (8, 8, 3) and meta == {"i": 0} and label == 0
    (record,) = pipe.report.records()
    assert record["shard"].endswith("train-1.tar")
    assert record["member"] == "s1/0003.jpg"


@pytest.mark.torchdata
def test_workers_record_skipped_samples_and_stage_times(store: MemoryStore,
                                                        jpeg_shards: str) -> None:
    loader = default_loader(jpeg_shards, store=store, decode="rgb8", on_error="skip",
                            tuple_fields="jpg cls", num_workers=2, timings=True)
    try:
        got = list(loader.timings.wait_on(loader))
    finally:
        loader.shutdown()
    assert len(got) == 19
    assert [r["member"] for r in loader.report.records()] == ["s1/0003.jpg"]
    totals = loader.timings.totals()
    assert totals["decode_n"] == 20 and totals["parse_n"] == 60 and totals["wait_n"] == 19
    assert totals["read"] > 0 and totals["decode"] > 0
    assert "training loop waited" in loader.timings.summary()


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_timings_cover_the_current_epoch(name: str, store: MemoryStore, jpeg_shards: str) -> None:
    loader = LOADERS[name](jpeg_shards, store=store, decode="rgb8", on_error="skip",
                           tuple_fields="jpg cls", num_workers=2, timings=True)
    try:
        for _ in range(2):
            got = list(loader.timings.wait_on(loader))
            totals = loader.timings.totals()
            assert len(got) == 19
            assert totals["decode_n"] == 20 and totals["parse_n"] == 60, totals
            assert totals["wait_n"] == 19
    finally:
        loader.shutdown()
