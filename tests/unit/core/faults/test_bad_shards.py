"""Bad shards and bad input, over a MemoryStore: typed errors naming shard and offset, or
skipped and reported (an unreachable cluster, never skipped: tests/integration/core/faults)."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

import aisio
from aisio.core.store.memory import MemoryStore
from aisio.core.store.urls import AISPath, Bucket
from tests.conftest import LOADERS, default_loader, tar_bytes, write_shards


def _jpeg() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), "red").save(out, "JPEG")
    return out.getvalue()


GOOD = [(f"k{i}.bin", b"x" * 700) for i in range(4)]
BAD_SHARDS = {
    "truncated": tar_bytes(GOOD)[:2300],  # inside the second member's data (2048..2748)
    "corrupt-header": (lambda raw: raw[:1536] + b"\xff" * 20 + raw[1556:])(tar_bytes(GOOD)),
    "not-a-tar": _jpeg(),
    "zero-bytes": b"",
    "duplicate-suffix": tar_bytes([("a.bin", b"1"), ("a.cls", b"2"), ("a.bin", b"3")]),
}


@pytest.fixture
def mixed(store: MemoryStore, bucket: Bucket, tmp_path: Path) -> tuple[list[str], list[str]]:
    """Good shards interleaved with each kind of bad one; returns (shard names, good keys)."""
    _, keys = write_shards(store, bucket, tmp_path, shards=3, per_shard=5, prefix="good")
    for name, raw in BAD_SHARDS.items():
        store.put(AISPath(bucket, f"{name}.tar"), raw)
    names = [bucket.uri(f"good-{i:04d}.tar") for i in range(3)]
    names[1:1] = [bucket.uri(f"{n}.tar") for n in BAD_SHARDS]
    names.append(bucket.uri("missing.tar"))
    return names, keys


@pytest.mark.parametrize("kind", sorted(BAD_SHARDS))
def test_each_bad_shard_raises_a_typed_error_naming_it(store: MemoryStore, bucket: Bucket,
                                                       mixed: object, kind: str) -> None:
    shard = bucket.uri(f"{kind}.tar")
    with pytest.raises(aisio.ShardFormatError) as info:
        list(aisio.AISFileLoader(shard, store=store).ais_parse_webdataset())
    assert shard in str(info.value)
    assert info.value.offset is not None
    assert f"byte {info.value.offset}" in str(info.value) or info.value.offset == 0


def test_truncation_names_offset_and_member(store: MemoryStore, bucket: Bucket,
                                            mixed: object) -> None:
    with pytest.raises(aisio.ShardFormatError) as info:
        list(aisio.AISFileLoader(bucket.uri("truncated.tar"), store=store
                                 ).ais_parse_webdataset())
    assert info.value.member == "k1.bin"
    assert info.value.offset == 2300


def test_skip_keeps_every_good_sample_and_reports_the_rest(
        store: MemoryStore, mixed: tuple[list[str], list[str]]) -> None:
    names, keys = mixed
    report = aisio.ErrorReport()
    pipe = aisio.AISFileLoader(names, store=store, on_error="skip", report=report)
    samples = list(pipe.ais_parse_webdataset(on_error="skip", report=report))
    got = Counter(s["__key__"] for s in samples)
    # The good shards in full, once each; of the bad ones, every sample known to be whole: the
    # truncated shard's k0 (the fault is in k1's data). A sample the fault interrupts is not
    # yielded (more of its files could have followed): the record names it.
    assert got == Counter([*keys, "k0"])
    records = {Path(r["shard"]).name: r for r in report.records()}
    assert set(records) == {f"{n}.tar" for n in BAD_SHARDS} | {"missing.tar"}
    assert records["missing.tar"]["error"] == "ObjectNotFoundError"
    assert records["truncated.tar"]["offset"] == 2300
    assert records["truncated.tar"]["member"] == "k1.bin"
    # Each record says how many samples of the shard were yielded, and which one was given up:
    # the truncated shard's k1, whose file the fault is in; a corrupt header names no member,
    # so k0 might have had more files.
    assert (records["truncated.tar"]["samples"], records["truncated.tar"]["given_up"]) == (1, "k1")
    corrupt = records["corrupt-header.tar"]
    assert (corrupt["offset"], corrupt["samples"], corrupt["given_up"]) == (1536, 0, "k0")
    assert records["missing.tar"]["samples"] is None
    assert records["duplicate-suffix.tar"]["member"] == "a.bin"


@pytest.mark.torchdata
@pytest.mark.parametrize("num_workers", [0, 2])
def test_an_epoch_whose_every_shard_is_skipped_raises(store: MemoryStore, bucket: Bucket,
                                                       mixed: object, num_workers: int) -> None:
    # (not the truncated shard: its first sample is whole, and yielded)
    bad = [bucket.uri(f"{n}.tar") for n in BAD_SHARDS if n != "truncated"]
    loader = default_loader([*bad, bucket.uri("missing.tar")], store=store,
                            num_workers=num_workers, on_error="skip")
    try:
        with pytest.raises(aisio.EmptyEpochError, match=r"all 5 shard\(s\) were skipped"):
            list(loader)
    finally:
        loader.shutdown()


def test_warn_mode_warns_once_per_bad_shard(store: MemoryStore,
                                            mixed: tuple[list[str], list[str]]) -> None:
    names, _ = mixed
    with pytest.warns(UserWarning, match="aisio skipped") as caught:
        list(aisio.AISFileLoader(names, store=store, on_error="warn"
                                 ).ais_parse_webdataset(on_error="warn"))
    assert len(caught) == len(BAD_SHARDS) + 1


@pytest.mark.torchdata
def test_workers_report_to_the_training_process(store: MemoryStore,
                                                mixed: tuple[list[str], list[str]]) -> None:
    names, keys = mixed
    loader = default_loader(names, store=store, num_workers=2, on_error="skip",
                                     shuffle_shards=False)
    try:
        got = [s["__key__"] for s in loader]
    finally:
        loader.shutdown()
    assert Counter(got) == Counter([*keys, "k0"])  # k0: the truncated shard's whole sample
    assert loader.report is not None
    assert len(loader.report) == len(BAD_SHARDS) + 1


def test_empty_bucket_and_missing_template_shards(store: MemoryStore,
                                                  bucket: Bucket, tmp_path: Path) -> None:
    with pytest.raises(aisio.ObjectNotFoundError, match="no objects under"):
        aisio.webdataset_pipe(bucket.uri(), store=store)
    write_shards(store, bucket, tmp_path, shards=2, per_shard=3)
    # check_templates=True naming every absent shard: tests/integration/datapipes/test_pipes.py
    with pytest.raises(aisio.ObjectNotFoundError, match=r"shard-0002\.tar"):
        list(aisio.AISFileLoader(bucket.uri("shard-{0000..0003}.tar"), store=store
                                 ).ais_parse_webdataset())


# 30 samples of two 700-byte files: 3,072 bytes each, sample 12 from byte 36,864.
THIRTY = tar_bytes([(f"k{i:02d}.{ext}", b"x" * 700) for i in range(30) for ext in ("a", "b")])
SAMPLE_12 = 12 * 3072


@pytest.mark.parametrize("loader", ["pipe", *sorted(LOADERS)])
@pytest.mark.parametrize("fault", ["header", "data"])
def test_skip_yields_every_whole_sample_before_the_fault(
        loader: str, fault: str, store: MemoryStore, bucket: Bucket) -> None:
    if fault == "header":  # sample 12's first header smashed: sample 11 might go on past it
        raw = THIRTY[:SAMPLE_12] + b"\xff" * 20 + THIRTY[SAMPLE_12 + 20:]
        expected, given_up = 11, "k11"
    else:  # cut in sample 12's first file's data: that file names sample 12, so 11 is whole
        raw = THIRTY[:SAMPLE_12 + 900]  # and 12, interrupted, is given up
        expected, given_up = 12, "k12"
    store.put(AISPath(bucket, "broken.tar"), raw)
    shard = bucket.uri("broken.tar")
    options = {"store": store, "on_error": "skip", "shuffle_buffer": 0}  # shard order
    if loader == "pipe":
        pipe = aisio.webdataset_pipe(shard, **options)
        got, report = [s["__key__"] for s in pipe], pipe.report
    else:
        made = LOADERS[loader](shard, tuple_fields=("__key__",), num_workers=1, **options)
        try:
            got, report = [key for (key,) in made], made.report
        finally:
            made.shutdown()
    assert got == [f"k{i:02d}" for i in range(expected)]
    [record] = report.records()
    assert (record["samples"], record["given_up"]) == (expected, given_up)
    assert record["offset"] == (SAMPLE_12 if fault == "header" else SAMPLE_12 + 900)


@pytest.mark.torchdata
@pytest.mark.parametrize("front", ["pipe", "loader"])
def test_warnings_point_at_the_training_loop_and_do_not_advise_skipping(
        front: str, store: MemoryStore, bucket: Bucket) -> None:
    whole = tar_bytes([(f"k{i}.cls", str(i).encode()) for i in range(20)])
    store.put(AISPath(bucket, "cut.tar"), whole[:8 * 1024 + 700])  # mid-header
    if front == "pipe":
        loader: Any = aisio.webdataset_pipe(bucket.uri("cut.tar"), store=store,
                                            on_error="warn", shuffle_buffer=0)
    else:
        loader = default_loader(bucket.uri("cut.tar"), store=store, on_error="warn",
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
