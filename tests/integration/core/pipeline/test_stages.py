"""What a newcomer tries, against the real AIStore: a corrupt JPEG, webdataset's string spellings,
a lambda in post=, and per-stage timings."""

from __future__ import annotations

import io
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import webdataset as wds
from PIL import Image

import aisio
from aisio.core.store.client import Client
from aisio.core.store.urls import AISPath, Bucket
from tests.conftest import LOADERS, default_loader, needs_dataloader2, tar_bytes


def jpeg(value: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (value, 0, 0)).save(out, "JPEG")
    return out.getvalue()


@pytest.fixture
def shards(ais_client: Client, bucket: Bucket) -> str:
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


def test_corrupt_jpeg_ends_the_epoch_by_default(ais_endpoint: str, shards: str) -> None:
    pipe = aisio.webdataset_pipe(shards, url=ais_endpoint, decode="rgb8", shuffle_shards=False,
                                 shuffle_buffer=0)
    with pytest.raises(aisio.DecodeError, match=r"'s1/0003'.*train-1\.tar"):
        list(pipe)


@pytest.mark.parametrize("policy", ["skip", "warn"])
def test_decode_policy_skips_only_the_bad_sample(ais_endpoint: str, shards: str,
                                                 policy: str) -> None:
    pipe = aisio.webdataset_pipe(shards, url=ais_endpoint, decode="rgb8", shuffle_shards=False,
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


def test_workers_record_skipped_samples_and_stage_times(ais_endpoint: str, shards: str) -> None:
    loader = default_loader(shards, url=ais_endpoint, decode="rgb8", on_error="skip",
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


def test_resampled_shards_from_one_template_string(ais_endpoint: str, shards: str) -> None:
    names = aisio.ResampledShards(shards, seed=1)
    assert sorted(set(names.names)) == [shards.replace("{0..1}", str(i)) for i in range(2)]
    four = list(itertools.islice(iter(names), 4))
    pipe = aisio.AISFileLoader(four, url=ais_endpoint).ais_parse_webdataset()
    assert len(list(pipe)) == 40


def _label(sample: tuple[Any, ...]) -> int:
    return int(sample[1])


def _post(pipe: Any) -> Any:
    return pipe.map(_label)


# torch's map() warns about lambdas when the pipe is built; the error then came much later.
@needs_dataloader2
@pytest.mark.filterwarnings("ignore:.*function is not supported by pickle:UserWarning")
def test_lambda_in_post_is_named_when_the_loader_is_built(ais_endpoint: str,
                                                          shards: str) -> None:
    with pytest.raises(aisio.ConfigError) as info:
        aisio.webdataset_loader(shards, url=ais_endpoint, tuple_fields="jpg cls", num_workers=2,
                                post=lambda p: p.map(lambda s: s[1]))
    message = str(info.value)
    assert "\n" not in message
    assert "<lambda>" in message and "test_newcomer_pipeline.py" in message
    assert "module level" in message
    loader = aisio.webdataset_loader(shards, url=ais_endpoint, tuple_fields="jpg cls",
                                     num_workers=2, post=_post)
    try:
        assert sorted(_labels(loader)) == sorted(list(range(10)) * 2)
    finally:
        loader.shutdown()


def _labels(loader: Any) -> Iterator[int]:
    yield from loader


@pytest.mark.parametrize("name", [*sorted(LOADERS), "pipe"])
def test_images_of_different_sizes_name_their_shard_and_sample(
        name: str, ais_endpoint: str, ais_client: Client, bucket: Bucket) -> None:
    out = io.BytesIO()
    with wds.TarWriter(out) as sink:
        for i in range(4):
            image = io.BytesIO()
            Image.new("RGB", (8, 8) if i != 2 else (12, 10)).save(image, "PNG")
            sink.write({"__key__": f"k{i}", "png": image.getvalue(), "cls": i})
    ais_client.put_object(AISPath(bucket, "mixed.tar"), out.getvalue())
    options: dict[str, Any] = dict(url=ais_endpoint, decode="torchrgb", tuple_fields="png cls",
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


@pytest.mark.parametrize("front", ["pipe", "loader"])
def test_warnings_point_at_the_training_loop_and_do_not_advise_skipping(
        front: str, ais_endpoint: str, ais_client: Client, bucket: Bucket) -> None:
    whole = tar_bytes([(f"k{i}.cls", str(i).encode()) for i in range(20)])
    ais_client.put_object(AISPath(bucket, "cut.tar"), whole[:8 * 1024 + 700])  # mid-header
    if front == "pipe":
        loader: Any = aisio.webdataset_pipe(bucket.uri("cut.tar"), url=ais_endpoint,
                                            on_error="warn", shuffle_buffer=0)
    else:
        loader = default_loader(bucket.uri("cut.tar"), url=ais_endpoint, on_error="warn",
                                shuffle_buffer=0)
    try:
        with pytest.warns(UserWarning, match="aisio skipped the rest of") as caught:
            got = [s["__key__"] for s in loader]  # this line is where the warning points
    finally:
        if hasattr(loader, "shutdown"):
            loader.shutdown()
    assert got[:1] == ["k0"]
    (warning,) = [w for w in caught if "aisio skipped" in str(w.message)]
    assert warning.filename == __file__, warning.filename
    assert "on_error='skip'" not in str(warning.message)
    assert "re-upload the shard" in str(warning.message)


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_timings_cover_the_current_epoch(name: str, ais_endpoint: str, shards: str) -> None:
    loader = LOADERS[name](shards, url=ais_endpoint, decode="rgb8", on_error="skip",
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
