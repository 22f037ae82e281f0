"""AISSourceLister, AISFileLister and AISFileLoader against the real node."""

from __future__ import annotations

import pickle
from collections.abc import Callable

import pytest
import requests

import aisio
from aisio import (
    ETL,
    AISConfig,
    AISFileLister,
    AISFileLoader,
    AISSourceLister,
    BucketNotFoundError,
    ETLUnavailableError,
    InvalidURLError,
    ObjectNotFoundError,
)
from aisio.core.store.client import Client
from aisio.core.store.urls import AISPath, Bucket
from aisio.datapipes.base import IterableWrapper

ODD_NAMES = ["with space.bin", "ünïcödé/ß.bin", "q?mark.bin", "hash#tag.bin", "pct%41.bin",
             "dots..bin"]


@pytest.fixture
def twenty(ais_client: Client, bucket: Bucket) -> dict[str, bytes]:
    """10 objects under temp/ and 10 at the bucket root; returns name -> bytes."""
    data = {}
    for i in range(10):
        data[f"temp/obj{i}"] = f"temp-{i}".encode() * (i + 1)
        data[f"obj{i}"] = f"root-{i}".encode() * (i + 1)
    for name, body in data.items():
        ais_client.put_object(AISPath(bucket, name), body)
    return data


def test_lister_yields_every_object(ais_endpoint: str, bucket: Bucket,
                                    twenty: dict[str, bytes]) -> None:
    root = bucket.uri()
    expected = sorted(root + n for n in twenty)
    assert sorted(AISFileLister(root.rstrip("/"), url=ais_endpoint)) == expected
    assert sorted(AISFileLister(root, url=ais_endpoint)) == expected
    assert sorted(AISFileLister([root + "temp/", root + "obj"], url=ais_endpoint)) == expected
    with pytest.raises(TypeError, match="length"):
        len(AISFileLister(root, url=ais_endpoint))
    assert len(AISFileLister(root, url=ais_endpoint, length=20)) == 20


def test_loader_yields_right_bytes(ais_endpoint: str, bucket: Bucket,
                                   twenty: dict[str, bytes]) -> None:
    lister = AISFileLister(bucket.uri(), url=ais_endpoint)
    for concurrency in (1, 4):
        got = {url: stream.read() for url, stream in
               AISFileLoader(lister, url=ais_endpoint, concurrency=concurrency)}
        assert got == {bucket.uri(n): body for n, body in twenty.items()}


def test_functional_forms_chain(ais_endpoint: str, bucket: Bucket,
                                twenty: dict[str, bytes]) -> None:
    pipe = IterableWrapper([bucket.uri("temp/")]).ais_list_files(url=ais_endpoint).ais_load_files(
        url=ais_endpoint)
    assert {u: s.read() for u, s in pipe} == {bucket.uri(n): b for n, b in twenty.items()
                                             if n.startswith("temp/")}
    urls = IterableWrapper([bucket.uri("temp/")]).ais_list_sources(url=ais_endpoint)
    assert len({u: s.read() for u, s in urls.ais_load_files()}) == 10


def test_source_lister_urls_work_with_plain_http(ais_endpoint: str, bucket: Bucket,
                                                 twenty: dict[str, bytes]) -> None:
    urls = list(AISSourceLister([bucket.uri("temp/")], url=ais_endpoint))
    assert len(urls) == 10
    for url in urls:
        name = url.split("/v1/objects/")[1].split("?")[0].split("/", 1)[1]
        assert requests.get(url, timeout=10).content == twenty[name]


def test_source_lister_prefix_map_and_sdk_sources(ais_endpoint: str, bucket: Bucket,
                                                  twenty: dict[str, bytes]) -> None:
    from aistore.sdk import Client as SDKClient

    sdk_bucket = SDKClient(ais_endpoint).bucket(bucket.name)
    urls = list(AISSourceLister([sdk_bucket], prefix_map={sdk_bucket: "temp/"}, url=ais_endpoint))
    assert len(urls) == 10
    group = sdk_bucket.objects(obj_names=["obj1", "obj2"])
    assert list(AISFileLister(group, url=ais_endpoint)) == [bucket.uri("obj1"),
                                                            bucket.uri("obj2")]
    obj = sdk_bucket.object("obj3")
    assert [s.read() for _, s in AISFileLoader([obj], url=ais_endpoint)] == [twenty["obj3"]]
    templ = sdk_bucket.objects(obj_template="obj{0..2}")
    assert len(AISSourceLister(templ, url=ais_endpoint)) == 3


def test_missing_bucket(ais_endpoint: str) -> None:
    with pytest.raises(BucketNotFoundError) as info:
        list(AISFileLister("ais://aisio-no-such-bucket", url=ais_endpoint))
    assert info.value.status == 404
    assert "aisio-no-such-bucket" in str(info.value)


@pytest.mark.parametrize("bad", ["", "ais:", "ais://", "s3:///bucket", "nfs://bucket/x"])
def test_malformed_urls(ais_endpoint: str, bad: str) -> None:
    for make in (AISFileLister, AISSourceLister, AISFileLoader):
        with pytest.raises(InvalidURLError):
            list(make([bad], url=ais_endpoint))


def test_listing_across_pages_yields_each_once(ais_endpoint: str, ais_client: Client,
                                               bucket: Bucket) -> None:
    names = [f"p/{i:04d}" for i in range(57)]
    for n in names:
        ais_client.put_object(AISPath(bucket, n), b"")
    got = list(AISFileLister(bucket.uri("p/"), url=ais_endpoint, page_size=7))
    assert got == [bucket.uri(n) for n in names]


def test_templates(ais_endpoint: str, ais_client: Client, bucket: Bucket) -> None:
    for i in range(0, 10):
        ais_client.put_object(AISPath(bucket, f"shard-{i:03d}.tar"), bytes([i]))
    templ = bucket.uri("shard-{000..009}.tar")
    lister = AISFileLister(templ, url=ais_endpoint, check_templates=True)
    assert len(lister) == 10
    assert list(lister) == [bucket.uri(f"shard-{i:03d}.tar") for i in range(10)]
    loaded = [s.read() for _, s in AISFileLoader(bucket.uri("shard-{000..009..3}.tar"),
                                                 url=ais_endpoint)]
    assert loaded == [bytes([0]), bytes([3]), bytes([6]), bytes([9])]
    with pytest.raises(ObjectNotFoundError) as info:
        list(AISFileLister(bucket.uri("shard-{005..014}.tar"), url=ais_endpoint,
                           check_templates=True))
    # every absent name of the template, in order, and only those (005-009 exist)
    assert info.value.missing == tuple(bucket.uri(f"shard-{i:03d}.tar") for i in range(10, 15))
    assert "shard-010.tar" in str(info.value)


def test_odd_object_names(ais_endpoint: str, ais_client: Client, bucket: Bucket) -> None:
    for i, name in enumerate(ODD_NAMES):
        ais_client.put_object(AISPath(bucket, name), bytes([i]) * 3)
    listed = sorted(AISFileLister(bucket.uri(), url=ais_endpoint))
    assert listed == sorted(bucket.uri(n) for n in ODD_NAMES)
    got = {u: s.read() for u, s in AISFileLoader(listed, url=ais_endpoint)}
    assert got == {bucket.uri(n): bytes([i]) * 3 for i, n in enumerate(ODD_NAMES)}
    via_http = {u: s.read() for u, s in
                AISFileLoader(AISSourceLister(bucket.uri(), url=ais_endpoint))}
    assert sorted(via_http.values()) == sorted(bytes([i]) * 3 for i in range(len(ODD_NAMES)))


def test_etl_urls_and_the_servers_answer(ais_endpoint: str, ais_client: Client,
                                         bucket: Bucket) -> None:
    ais_client.put_object(AISPath(bucket, "a.bin"), b"abc")
    etl = ETL("resize-images", {"size": 64})
    urls = list(AISSourceLister(bucket.uri("a.bin"), etl=etl, url=ais_endpoint))
    assert len(urls) == 1
    assert "etl_name=resize-images" in urls[0]
    assert "etl_args=%7B%22size%22%3A64%7D" in urls[0]
    for pipe in (AISFileLoader(urls), AISFileLoader(bucket.uri("a.bin"), url=ais_endpoint,
                                                    etl="resize-images")):
        with pytest.raises(ETLUnavailableError) as info:
            list(pipe)
        assert info.value.status == 501
        assert "resize-images" in str(info.value)


PIPES: list[Callable[[str, Bucket], object]] = [
    lambda ep, b: AISFileLister([b.uri()], url=ep),
    lambda ep, b: AISSourceLister([b.uri("temp/")], url=ep, etl=None),
    lambda ep, b: AISFileLister(b.uri(), url=ep).ais_load_files(url=ep).map(_read),
]


def _read(item: tuple[str, object]) -> tuple[str, bytes]:
    return item[0], item[1].read()  # type: ignore[attr-defined]


@pytest.mark.parametrize("make", PIPES, ids=["lister", "sources", "loader"])
def test_pickle_and_iterate_twice(ais_endpoint: str, bucket: Bucket, twenty: dict[str, bytes],
                                  make: Callable[[str, Bucket], object]) -> None:
    pipe = make(ais_endpoint, bucket)
    first = list(pipe)  # type: ignore[call-overload]
    clone = pickle.loads(pickle.dumps(pipe))
    assert list(clone) == first
    assert list(clone) == first
    assert first


def test_config_object_and_env(monkeypatch: pytest.MonkeyPatch, ais_endpoint: str,
                               bucket: Bucket, twenty: dict[str, bytes]) -> None:
    assert len(list(AISFileLister(bucket.uri(), config=AISConfig(endpoint=ais_endpoint)))) == 20
    monkeypatch.setenv("AIS_ENDPOINT", ais_endpoint)
    assert len(list(AISFileLister(bucket.uri()))) == 20


def test_get_batch_reads_many_small_objects_in_order(ais_endpoint: str, ais_client: Client,
                                                     bucket: Bucket) -> None:
    names = [f"small/{i:03d}{ODD_NAMES[i % len(ODD_NAMES)]}" for i in range(70)]
    for i, name in enumerate(names):
        ais_client.put_object(AISPath(bucket, name), f"body-{i}".encode() * (i + 1))
    listed = list(AISFileLister(bucket.uri("small/"), url=ais_endpoint))
    expected = {bucket.uri(n): f"body-{i}".encode() * (i + 1) for i, n in enumerate(names)}
    got = [(u, s.read()) for u, s in AISFileLoader(listed, url=ais_endpoint, batch_get=16)]
    assert [u for u, _ in got] == listed
    assert dict(got) == expected


def test_get_batch_delivers_every_object_before_a_bad_name(ais_endpoint: str,
                                                          ais_client: Client,
                                                          bucket: Bucket) -> None:
    # Get-Batch reads groups ahead: a bad name further on is raised where it stands
    for i in range(10):
        ais_client.put_object(AISPath(bucket, f"o{i}"), bytes([i]))
    names = [bucket.uri(f"o{i}") for i in range(10)] + [bucket.uri("")]
    got = []
    with pytest.raises(aisio.InvalidURLError, match="bucket or prefix"):
        for _, stream in AISFileLoader(names, url=ais_endpoint, batch_get=3):
            got.append(stream.read())
    assert got == [bytes([i]) for i in range(10)]


def test_get_batch_falls_back_and_skips_a_missing_object(ais_endpoint: str, ais_client: Client,
                                                         bucket: Bucket) -> None:
    for i in range(10):
        ais_client.put_object(AISPath(bucket, f"o{i}"), bytes([i]))
    names = [bucket.uri(f"o{i}") for i in range(5)] + [bucket.uri("gone")] + [
        bucket.uri(f"o{i}") for i in range(5, 10)]
    report = aisio.ErrorReport()
    got = [s.read() for _, s in AISFileLoader(names, url=ais_endpoint, batch_get=4,
                                              on_error="skip", report=report)]
    assert got == [bytes([i]) for i in range(10)]
    assert [r["shard"] for r in report.records()] == [bucket.uri("gone")]


def test_get_batch_resumes_a_broken_answer(ais_endpoint: str, ais_client: Client,
                                           bucket: Bucket) -> None:
    from tests.faultproxy import fault_proxy

    for i in range(60):
        ais_client.put_object(AISPath(bucket, f"b{i:02d}"), bytes([i]) * 3000)
    names = [bucket.uri(f"b{i:02d}") for i in range(60)]
    with fault_proxy(ais_endpoint, cut_after=40_000, break_paths=("/v1/ml/moss/",)) as proxy:
        config = AISConfig(endpoint=proxy.endpoint, backoff=0.01, max_retries=5)
        got = [s.read() for _, s in AISFileLoader(names, config=config, batch_get=60)]
        assert proxy.breaks >= 3
    assert got == [bytes([i]) * 3000 for i in range(60)]


def test_get_batch_names_a_missing_object(ais_endpoint: str, ais_client: Client,
                                          bucket: Bucket) -> None:
    ais_client.put_object(AISPath(bucket, "here"), b"1")
    with pytest.raises(ObjectNotFoundError, match="gone"):
        list(AISFileLoader([bucket.uri("here"), bucket.uri("gone")], url=ais_endpoint,
                           batch_get=8))
