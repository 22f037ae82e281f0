"""From ``(shard, stream)`` pairs to samples (aisio.core.pipeline.parse): what a shard yields,
what a torn one records as skipped (how many of its samples came first), the cache's local
path, runs of regular samples, and the padding read after the last sample."""

from __future__ import annotations

import io
import tarfile
from typing import Any

import pytest

import aisio
from aisio.core.epochs.progress import ShardTask
from aisio.core.faults.policy import ErrorPolicy
from aisio.core.format.tar.runs import Columns, RunPlan
from aisio.core.pipeline.parse import drain, parse_streams
from aisio.core.store.sources import ObjectRef
from aisio.core.store.urls import parse_ais_url
from aisio.core.transport.delivery import POSITION, VERSION

URL = "ais://bucket/shard-000001.tar"


def shard(samples: int, *, payload: int = 100) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(samples):
            for suffix, data in (("jpg", bytes([i]) * payload), ("cls", b"%d" % i)):
                info = tarfile.TarInfo(f"s{i:05d}.{suffix}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


class Stream(io.BytesIO):
    """A shard's stream as the fetcher gives it: it may name its content or a cache path."""

    def __init__(self, data: bytes, **attributes: Any) -> None:
        super().__init__(data)
        for name, value in attributes.items():
            setattr(self, name, value)


def task(index: int = 4) -> ShardTask:
    return ShardTask(index, ObjectRef(parse_ais_url(URL)))


def test_each_shard_yields_its_samples_and_is_closed() -> None:
    streams = [Stream(shard(3)), Stream(shard(2))]
    samples = list(parse_streams([("a.tar", streams[0]), ("b.tar", streams[1])],
                                 ErrorPolicy()))
    assert [(s["__url__"], s["__key__"], s["cls"]) for s in samples] == [
        ("a.tar", "s00000", b"0"), ("a.tar", "s00001", b"1"), ("a.tar", "s00002", b"2"),
        ("b.tar", "s00000", b"0"), ("b.tar", "s00001", b"1")]
    assert all("__local_path__" not in s and POSITION not in s for s in samples)
    assert all(stream.closed for stream in streams)


@pytest.mark.parametrize("runs", [None, RunPlan(("cls",), ("int",))])
def test_a_torn_shard_is_skipped_with_how_many_of_its_samples_came(runs: RunPlan | None
                                                                  ) -> None:
    """The record says how many samples of the shard the loop received before the fault: a
    resume or a report reads it (also when they came in runs of regular samples)."""
    torn = shard(30)[:28 * 2048 + 700]  # into sample 28's first member (2 KiB a sample)
    report = aisio.ErrorReport()
    stream = Stream(torn)
    with pytest.warns(UserWarning, match=f"aisio skipped the rest of {URL}: "):
        got = list(parse_streams([(task(), stream), ("b.tar", Stream(shard(1)))],
                                 ErrorPolicy("warn", report), runs=runs))
    came = sum(len(item.values) if type(item) is Columns else 1 for item in got)
    [record] = report.records()
    # samples 0-27 came (27 once sample 28 began), then b.tar's one
    assert (record["shard"], record["samples"], came) == (URL, 28, 29)
    assert stream.closed
    assert type(got[-1]) is dict and got[-1]["__url__"] == "b.tar"


def test_a_torn_shard_raises_by_default_and_is_closed() -> None:
    stream = Stream(shard(4)[:3 * 2048 + 700])  # into the last sample
    with pytest.raises(aisio.ShardFormatError):
        list(parse_streams([("a.tar", stream)], ErrorPolicy()))
    assert stream.closed


def test_a_tasks_samples_carry_their_positions_and_their_shards_content() -> None:
    samples = list(parse_streams([(task(4), Stream(shard(3), version="v7"))], ErrorPolicy()))
    assert [(s["__url__"], s[POSITION][:2], s[VERSION]) for s in samples] == [
        (URL, (4, 0), "v7"), (URL, (4, 1), "v7"), (URL, (4, 2), "v7")]
    assert samples[-1][POSITION][3] is True  # the shard's last


def test_runs_come_for_a_task_not_read_through_the_cache() -> None:
    """Regular samples of a task come in runs; through the cache every sample comes alone,
    each with the cache entry's path (a run's columns have no place for it)."""
    plan = RunPlan(("cls",), ("int",))
    direct = list(parse_streams([(task(), Stream(shard(60)))], ErrorPolicy(), runs=plan))
    assert any(type(item) is Columns for item in direct)
    cached = list(parse_streams([(task(), Stream(shard(60), local_path="/c/x.tar"))],
                                ErrorPolicy(), runs=plan))
    assert len(cached) == 60 and all(type(item) is dict for item in cached)
    assert {item["__local_path__"] for item in cached} == {"/c/x.tar"}
    plain = list(parse_streams([("a.tar", Stream(shard(60)))], ErrorPolicy(), runs=plan))
    assert len(plain) == 60 and all(type(item) is dict for item in plain)


class Counting(io.BytesIO):
    """Counts the bytes read; ``caching``: a stream filling the cache."""

    caching = False

    def __init__(self, size: int) -> None:
        super().__init__(bytes(size))
        self.asked: list[int] = []

    def read(self, size: int | None = -1) -> bytes:
        self.asked.append(-1 if size is None else size)
        return super().read(size)


def test_drain_reads_the_padding_up_to_a_limit_and_a_caching_stream_to_its_end() -> None:
    stream = Counting(3 << 20)
    drain(stream)
    assert stream.tell() == 1 << 20 and max(stream.asked) == 1 << 16
    stream = Counting(100_000)
    drain(stream, limit=70_000)
    assert stream.tell() == 70_000  # the last read asks for what is left of the limit
    stream = Counting(3 << 20)
    stream.caching = True
    drain(stream)
    assert stream.tell() == 3 << 20 and max(stream.asked) == 1 << 16
    stream = Counting(100_000)
    drain(stream, limit=65_537)
    assert stream.tell() == 65_537  # to the limit's last byte
    stream = Counting(10)
    drain(stream)
    assert stream.tell() == 10 and stream.asked == [1 << 16, 1 << 16]  # the end: nothing more
