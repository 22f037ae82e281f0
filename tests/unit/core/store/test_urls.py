from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aisio import ETL, InvalidURLError
from aisio.core.store.urls import (
    AISPath,
    Bucket,
    count_template,
    expand_template,
    is_template,
    object_url,
    parse_ais_url,
    parse_object_url,
    to_etl,
)


@pytest.mark.parametrize(
    ("url", "provider", "namespace", "name", "obj"),
    [
        ("ais://b", "ais", "", "b", ""),
        ("ais://b/", "ais", "", "b", ""),
        ("ais://b/prefix/x", "ais", "", "b", "prefix/x"),
        ("s3://bkt/a.tar", "aws", "", "bkt", "a.tar"),
        ("aws://bkt/a.tar", "aws", "", "bkt", "a.tar"),
        ("gs://bkt/a", "gcp", "", "bkt", "a"),
        ("gcp://bkt/a", "gcp", "", "bkt", "a"),
        ("az://bkt/a", "azure", "", "bkt", "a"),
        ("oci://bkt/a", "oci", "", "bkt", "a"),
        ("ais://@uuid#ns/bkt/o", "ais", "@uuid#ns", "bkt", "o"),
        ("ais://#ns/bkt", "ais", "#ns", "bkt", ""),
        ("ais://b/with space?#%", "ais", "", "b", "with space?#%"),
    ],
)
def test_parse_ais_url(url: str, provider: str, namespace: str, name: str, obj: str) -> None:
    path = parse_ais_url(url)
    assert path == AISPath(Bucket(name, provider, namespace), obj)


@pytest.mark.parametrize(
    "url", ["", "ais:", "ais://", "s3:///bucket", "ftp://b/o", "bucket/obj", "ais://@ns", "ais://.b"]
)
def test_invalid_urls_raise_typed_error_naming_the_url(url: str) -> None:
    with pytest.raises(InvalidURLError) as info:
        parse_ais_url(url)
    assert repr(url) in str(info.value)
    assert isinstance(info.value, ValueError)


def test_templates() -> None:
    assert is_template("shard-{000..099}.tar")
    assert is_template("{a,b}/x")
    assert not is_template("plain{name}.tar")
    assert list(expand_template("s-{0..100..50}")) == ["s-0", "s-50", "s-100"]
    assert list(expand_template("{a,b}-{1..2}")) == ["a-1", "a-2", "b-1", "b-2"]
    assert count_template("shard-{000..099}.tar") == 100
    with pytest.raises(InvalidURLError):
        list(expand_template("shard-{000..099.tar"))


def test_object_url_quotes_names_and_carries_etl() -> None:
    path = parse_ais_url("ais://@u#ns/b/dir/a b?#%ü.tar")
    url = object_url("http://h:1", path, ETL("my-etl", {"size": 64, "mode": "x"}))
    parts = urlsplit(url)
    assert parts.path == "/v1/objects/b/dir/a%20b%3F%23%25%C3%BC.tar"
    query = parse_qs(parts.query)
    assert query["provider"] == ["ais"]
    assert query["namespace"] == ["@u#ns"]
    assert query["etl_name"] == ["my-etl"]
    assert json.loads(query["etl_args"][0]) == {"mode": "x", "size": 64}
    assert parse_object_url(url) == ("http://h:1", path, ETL("my-etl", query["etl_args"][0]))


def test_etl_forms() -> None:
    assert to_etl(None) is None
    assert to_etl("x") == ETL("x")
    assert ETL("x", "raw-args").query() == {"etl_name": "x", "etl_args": "raw-args"}

    class SDKLike:
        name = "md5"
        args = "a=1"

    assert to_etl(SDKLike()) == ETL("md5", "a=1")
    with pytest.raises(InvalidURLError, match="ETL name"):
        ETL("Bad Name")


@given(st.text(max_size=40))
def test_parse_random_strings_raise_only_typed_errors(text: str) -> None:
    try:
        path = parse_ais_url(text)
    except InvalidURLError:
        return
    assert path.bucket.name


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30))
def test_object_names_round_trip_through_http_urls(name: str) -> None:
    path = AISPath(Bucket("b"), name)
    assert parse_object_url(object_url("http://h:1", path))[1] == path


@pytest.mark.parametrize(
    ("name", "quoted"),
    [("a/../b", "a/%2E%2E/b"), ("./x", "%2E/x"), ("..", "%2E%2E"), ("a.b/c..d", "a.b/c..d"),
     ("sp ace/q?#%", "sp%20ace/q%3F%23%25")],
)
def test_dot_segments_are_hidden_from_path_normalisation(name: str, quoted: str) -> None:
    from aisio.core.store.urls import quote_object_name

    assert quote_object_name(name) == quoted
    assert parse_object_url(object_url("http://h:1", AISPath(Bucket("b"), name)))[1].obj == name
