"""The one rule for what a source names (aisio.core.store.sources): every accepted form, no I/O."""

from __future__ import annotations

import json
import pickle
import re
from typing import Any

import pytest
from aistore.sdk import Client as SDKClient

import aisio
from aisio.core.store.sources import (
    ObjectRef,
    Source,
    as_sources,
    check_template,
    count,
    objects,
    one_object,
    resolve,
)
from aisio.core.store.suggest import numbered_series
from aisio.core.store.urls import ETL, AISPath, Bucket

B = Bucket("b")
SDK = SDKClient("http://127.0.0.1:9")  # never contacted: building SDK objects does no I/O

# (source, listing?) -> [(kind, object name)]
RULES: list[tuple[Any, bool, list[tuple[str, str]]]] = [
    ("ais://b/s-{0..2}.tar", False, [("template", "s-{0..2}.tar")]),
    ("ais://b/s-{0..2}.tar", True, [("template", "s-{0..2}.tar")]),
    ("ais://b", False, [("prefix", "")]),
    ("ais://b/", False, [("prefix", "")]),
    ("ais://b/train/", False, [("prefix", "train/")]),
    ("ais://b/x.tar", False, [("object", "x.tar")]),
    ("ais://b/x.tar", True, [("prefix", "x.tar")]),  # a lister lists: a name prefix
    ("ais://b/train-", True, [("prefix", "train-")]),
    ("http://h:1/v1/objects/b/x.tar?provider=ais", False, [("object", "x.tar")]),
    ("http://h:1/v1/objects/b/x.tar?provider=ais", True, [("object", "x.tar")]),
    (AISPath(B, "x.tar"), False, [("object", "x.tar")]),
    (AISPath(B, "d/"), False, [("prefix", "d/")]),
    (ObjectRef(AISPath(B, "x.tar")), True, [("object", "x.tar")]),
    (SDK.bucket("b"), False, [("prefix", "")]),
    (SDK.bucket("b").object("x.tar"), True, [("object", "x.tar")]),
    (SDK.bucket("b").objects(obj_names=["a", "c"]), True, [("object", "a"), ("object", "c")]),
    (SDK.bucket("b").objects(obj_template="s-{0..1}"), False,
     [("object", "s-0"), ("object", "s-1")]),
]


def _name(source: Any) -> str:
    """Returns the source's repr without an address (an id must be the same in every run)."""
    return re.sub(r" at 0x[0-9a-f]+", "", repr(source))


@pytest.mark.parametrize(("source", "listing", "expected"), RULES,
                         ids=[f"{_name(r[0])}-{'list' if r[1] else 'load'}"[:60] for r in RULES])
def test_one_rule_for_every_accepted_form(source: Any, listing: bool,
                                          expected: list[tuple[str, str]]) -> None:
    got = [(s.kind, s.path.obj) for s in resolve(source, listing=listing)]
    assert got == expected


def test_lists_mix_forms_and_a_string_is_never_split_into_characters() -> None:
    assert as_sources("ais://b/x") == ["ais://b/x"]
    got = resolve(["ais://b/x.tar", "ais://b/y-{0..1}.tar", SDK.bucket("c")])
    assert [s.kind for s in got] == ["object", "template", "prefix"]
    assert count(got[:2]) == 3
    assert count(got) == -1  # a prefix needs a listing


def test_http_urls_keep_their_endpoint_and_etl() -> None:
    url = "https://h:2/v1/objects/b/x.tar?provider=ais&etl_name=resize"
    (source,) = resolve(url)
    (ref,) = objects(source)
    assert (ref.endpoint, ref.etl, ref.uri()) == ("https://h:2", ETL("resize"), url)


def test_templates_expand_without_io_and_refs_pickle() -> None:
    (source,) = resolve("ais://b/s-{0..2}.tar")
    refs = list(objects(source))
    assert [r.uri() for r in refs] == [f"ais://b/s-{i}.tar" for i in range(3)]
    assert pickle.loads(pickle.dumps(refs)) == refs
    assert pickle.loads(pickle.dumps(source)) == source
    with pytest.raises(ValueError, match="needs a client"):
        list(objects(Source(AISPath(B, "p/"), "prefix")))


@pytest.mark.parametrize("bad", ["b/x", "ftp://b/x", "ais://", 42])
def test_bad_sources_are_typed_errors(bad: Any) -> None:
    with pytest.raises(aisio.InvalidURLError):
        resolve(bad)


@pytest.mark.parametrize("name", ["ais://b", "ais://b/d/", "ais://b/s-{0..1}"])
def test_one_object_refuses_prefixes_and_templates(name: str) -> None:
    with pytest.raises(aisio.InvalidURLError, match="is not one object"):
        one_object(name)
    assert one_object("ais://b/x.tar") == AISPath(B, "x.tar")


def _listing(*names: str) -> Any:
    from tests.unit.core.store.scripted import answer

    return answer(200, json.dumps({"entries": [{"name": n} for n in names]}).encode(),
                  {"Content-Type": "application/json"})


def test_a_whole_template_is_checked_with_one_listing() -> None:
    from tests.unit.core.store.scripted import scripted_client

    client, transport = scripted_client(_listing(*[f"s-{i}.tar" for i in range(3)]))
    assert [p.obj for p in check_template(client, AISPath(B, "s-{0..2}.tar"))] == [
        "s-0.tar", "s-1.tar", "s-2.tar"]
    assert len(transport.seen) == 1  # one listing, not one HEAD per name


@pytest.mark.parametrize(("template", "missing"), [
    ("shapes-{000..004}.tar", [f"shapes-{i:03d}.tar" for i in range(5)]),  # digits too few
    ("shapes-{0000..0009}.tar", [f"shapes-{i:04d}.tar" for i in range(5, 10)]),  # too many
])
def test_a_template_that_misses_names_every_absent_name_and_the_nearest_that_exists(
        template: str, missing: list[str]) -> None:
    from tests.unit.core.store.scripted import scripted_client

    present = [f"shapes-{i:04d}.tar" for i in range(5)] + ["labels.json"]
    client, _ = scripted_client(_listing(*present), _listing(*present))
    with pytest.raises(aisio.ObjectNotFoundError) as info:
        check_template(client, AISPath(B, template))
    assert info.value.missing == tuple(f"ais://b/{name}" for name in missing)
    assert "did you mean ais://b/shapes-{0000..0004}.tar (5 object(s) that exist)" in str(
        info.value)


def test_numbered_series_are_runs_of_one_width() -> None:
    names = ["a-01.tar", "a-02.tar", "a-04.tar", "a-003.tar", "b.txt"]
    assert sorted(numbered_series(names)) == [("a-003.tar", 1), ("a-04.tar", 1),
                                              ("a-{01..02}.tar", 2)]


def test_a_shard_list_packed_for_the_other_ranks_comes_back_the_same() -> None:
    import pickle

    from aisio.core.store.sources import ObjectRef, pack_refs, unpack_refs
    from aisio.core.store.urls import ETL, AISPath, Bucket
    from aisio.runtime.setup import _RankZero

    refs = [ObjectRef(AISPath(Bucket("a"), "s-0.tar")),
            ObjectRef(AISPath(Bucket("b", "s3"), "x/s-1.tar"), None, None, "s3://b/x/s-1.tar"),
            ObjectRef(AISPath(Bucket("a"), "s-2.tar"), "http://other:1", ETL("resize", {"w": 2})),
            ObjectRef(AISPath(Bucket("a", namespace="ns"), "s-3.tar")),
            ObjectRef(AISPath(Bucket("a"), "s-4.tar"))]
    assert unpack_refs(*pack_refs(refs)) == refs
    message = _RankZero(None, refs, "id", None)
    assert pickle.loads(pickle.dumps(message)) == message
    assert pickle.loads(pickle.dumps(_RankZero(None, None, "id", None))).shards is None
