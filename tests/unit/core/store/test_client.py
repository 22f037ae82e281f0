"""Tests for aisio.core.store.client against a scripted transport (tests/unit/core/store/
scripted.py): redirects, retries, and a broken object stream resumed byte for byte.

The same promises against a real cluster (through a fault proxy):
tests/integration/core/store/test_client.py and test_retries.py.
"""

from __future__ import annotations

import io
import random

import pytest
import requests
from hypothesis import given, settings
from hypothesis import strategies as st

import aisio
from aisio.core.store.client import content_id
from aisio.core.store.urls import AISPath, Bucket, object_url
from tests.unit.core.store.scripted import (
    PROXY,
    TARGET,
    answer,
    redirect,
    scripted_client,
    serve,
)

OBJECT = AISPath(Bucket("b"), "train/shard-0001.tar")
URL = object_url(PROXY, OBJECT)
AT_TARGET = object_url(TARGET, OBJECT)
DATA = random.Random(0).randbytes(25_000)


def read_all(stream: io.RawIOBase, size: int = 4096) -> bytes:
    """Reads a stream to its end, ``size`` bytes asked at a time."""
    return b"".join(iter(lambda: stream.read(size), b""))


# ---------------------------------------------------------------------------------- redirects


def test_a_put_goes_to_the_proxy_empty_and_to_the_target_whole_with_the_token() -> None:
    client, transport = scripted_client(redirect(AT_TARGET), answer(200), token="s3cret")
    client.put_object(OBJECT, b"the shard's bytes")
    assert [(s.method, s.url, s.body) for s in transport.seen] == [
        ("PUT", URL, b""), ("PUT", AT_TARGET, b"the shard's bytes")]
    # requests drops the token on a redirect to another host; the client keeps it on every hop
    assert [s.headers.get("Authorization") for s in transport.seen] == ["Bearer s3cret"] * 2


def test_a_file_body_is_sent_whole_on_every_hop_that_carries_it() -> None:
    data = io.BytesIO(DATA)
    client, transport = scripted_client(
        redirect(PROXY + "/v1/objects/b/elsewhere", 301), redirect(AT_TARGET), answer(200))
    client.put_object(OBJECT, data)
    assert [len(s.body) for s in transport.seen] == [0, len(DATA), len(DATA)]
    assert transport.seen[-1].body == DATA and transport.seen[-1].url == AT_TARGET


def test_a_get_follows_a_relative_location_and_keeps_its_range() -> None:
    client, transport = scripted_client(redirect("/v1/objects/b/moved"), serve(DATA))
    assert client.get_bytes(OBJECT, byte_range=(10, 19)) == DATA[10:20]
    assert [s.url for s in transport.seen] == [URL, PROXY + "/v1/objects/b/moved"]
    assert transport.ranges() == ["bytes=10-19", "bytes=10-19"]


def test_endless_redirects_are_a_connection_error() -> None:
    client, transport = scripted_client(*[redirect(AT_TARGET)] * 5, max_retries=0)
    with pytest.raises(aisio.AISConnectionError, match="too many redirects"):
        client.get_bytes(OBJECT)
    assert len(transport.seen) == 5


# ------------------------------------------------------------------------------------ retries


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504])
def test_transient_statuses_are_retried_up_to_max_retries(status: int) -> None:
    client, transport = scripted_client(answer(status), answer(status), serve(DATA),
                                        max_retries=2)
    assert client.get_bytes(OBJECT) == DATA
    assert len(transport.seen) == 3


@pytest.mark.parametrize("retries", [0, 1, 3])
def test_retries_run_out_with_a_typed_error_after_exactly_max_retries(retries: int) -> None:
    client, transport = scripted_client(*[answer(503, b"busy")] * (retries + 1),
                                        max_retries=retries)
    with pytest.raises(aisio.AISRequestError, match="retries ran out") as info:
        client.get_bytes(OBJECT)
    assert info.value.status == 503 and OBJECT.uri() in str(info.value)
    assert len(transport.seen) == retries + 1 and transport.script == []


def test_connection_errors_are_retried_then_typed() -> None:
    client, transport = scripted_client(requests.ConnectionError("refused"), serve(DATA),
                                        max_retries=1)
    assert client.get_bytes(OBJECT) == DATA
    client, transport = scripted_client(*[requests.ConnectionError("refused")] * 2,
                                        max_retries=1)
    with pytest.raises(aisio.AISConnectionError, match="retries ran out"):
        client.get_bytes(OBJECT)
    assert len(transport.seen) == 2


@pytest.mark.parametrize(("status", "body", "error"), [
    (404, b'{"tcode":"ErrNotFound","message":"does not exist"}', aisio.ObjectNotFoundError),
    (500, b'{"tcode":"ErrLmetaNotFound","message":"no data"}', aisio.ObjectNotFoundError),
    (400, b"bad request", aisio.AISRequestError),
    (401, b"", aisio.AuthError),
    (403, b"", aisio.AuthError),
])
def test_final_answers_are_not_retried(status: int, body: bytes, error: type) -> None:
    client, transport = scripted_client(answer(status, body), max_retries=5)
    with pytest.raises(error):
        client.get_bytes(OBJECT)
    assert len(transport.seen) == 1


def test_a_forming_cluster_is_waited_for_whatever_max_retries_says() -> None:
    forming = answer(400, b'{"tcode":"ErrNoNodes","message":"no storage targets"}')
    client, transport = scripted_client(forming, forming, serve(DATA), max_retries=0)
    with pytest.warns(aisio.ClusterWaitWarning, match="re.forming") as said:
        assert client.get_bytes(OBJECT) == DATA
    assert len(transport.seen) == 3
    assert len(said) == 1  # said once for the whole wait


# ------------------------------------------------------------------------ resuming a stream


@pytest.mark.parametrize("short", [False, True], ids=["reset", "closed-early"])
def test_a_stream_cut_mid_object_resumes_at_the_exact_byte(short: bool) -> None:
    client, transport = scripted_client(serve(DATA, cut_at=7_777, short=short),
                                        serve(DATA, cut_at=20_001, short=short), serve(DATA))
    reader = client.open(URL, name=OBJECT.uri())
    assert read_all(reader, 3000) == DATA
    assert transport.ranges() == [None, "bytes=7777-", "bytes=20001-"]
    assert reader.resumes == 2 and transport.script == []


@settings(max_examples=60, deadline=None)
@given(size=st.integers(1, 6000), cuts=st.lists(st.integers(1, 5999), max_size=4, unique=True),
       read=st.integers(1, 2500), identified=st.booleans())
def test_what_the_caller_reads_is_the_object_wherever_it_breaks(
        size: int, cuts: list[int], read: int, identified: bool) -> None:
    """No byte lost, none repeated, for any breaks and read sizes; an object that names its
    version resumes with Range at the byte, one that names nothing is read again from 0."""
    data = random.Random(size).randbytes(size)
    cuts = sorted(c for c in cuts if c < size)
    names = {} if identified else {"version": None, "checksum": None}
    script = [serve(data, cut_at=cut, **names) for cut in cuts] + [serve(data, **names)]
    client, transport = scripted_client(*script, max_retries=len(cuts))
    assert read_all(client.open(URL, name=OBJECT.uri()), read) == data
    expected = [None] + [f"bytes={cut}-" if identified else None for cut in cuts]
    assert transport.ranges() == expected and transport.script == []


@pytest.mark.parametrize("changed", ["version", "checksum", "size"])
def test_an_object_changed_before_the_resume_raises_object_changed(changed: str) -> None:
    after = {"version": serve(DATA, version="2"), "checksum": serve(DATA, checksum="xxh-2"),
             "size": serve(DATA + b"more")}[changed]
    client, _ = scripted_client(serve(DATA, cut_at=5000), after)
    reader = client.open(URL, name=OBJECT.uri())
    with pytest.raises(aisio.ObjectChangedError, match="changed while it was being read") as info:
        read_all(reader)
    assert reader.pos == 5000 and info.value.url == OBJECT.uri()


def test_a_resume_the_server_answers_whole_is_refused_not_spliced() -> None:
    client, _ = scripted_client(serve(DATA, cut_at=5000), serve(DATA, ignore_range=True))
    with pytest.raises(aisio.ObjectChangedError, match="HTTP 200"):
        read_all(client.open(URL, name=OBJECT.uri()))


def test_an_unidentified_object_rewritten_alike_in_size_is_refused() -> None:
    other = bytes(b ^ 1 for b in DATA)  # same size, other bytes, no version nor checksum
    client, transport = scripted_client(serve(DATA, version=None, checksum=None, cut_at=9000),
                                        serve(other, version=None, checksum=None))
    with pytest.raises(aisio.ObjectChangedError, match="different bytes"):
        read_all(client.open(URL, name=OBJECT.uri()))
    assert transport.ranges() == [None, None]  # read again from byte 0, and compared


def test_breaks_past_the_retries_name_the_byte() -> None:
    client, transport = scripted_client(*[serve(DATA, cut_at=3000)] * 3, max_retries=2)
    with pytest.raises(aisio.AISConnectionError, match="at byte 3000") as info:
        read_all(client.open(URL, name=OBJECT.uri()))
    assert info.value.offset == 3000 and len(transport.seen) == 3


def test_a_read_from_a_checkpoint_opens_at_its_byte_and_checks_the_content() -> None:
    client, transport = scripted_client(serve(DATA), serve(DATA), serve(DATA, version="2"),
                                        serve(DATA, ignore_range=True))
    first = client.open(URL, name=OBJECT.uri())
    first.close()
    saved = content_id(first)
    assert read_all(client.open(URL, name=OBJECT.uri(), start=1234, expect=saved)) == DATA[1234:]
    assert transport.ranges()[1] == "bytes=1234-"
    with pytest.raises(aisio.ObjectChangedError, match="since the checkpoint"):
        client.open(URL, name=OBJECT.uri(), start=1234, expect="v=0;xxh=old;size=1")
    with pytest.raises(aisio.AISRequestError, match="ignored the Range request"):
        client.open(URL, name=OBJECT.uri(), start=1234)
