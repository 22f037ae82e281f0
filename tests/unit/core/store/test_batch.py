"""Tests for aisio.core.store.batch (Get-Batch) against a scripted transport: one request for
many objects, in order; a missing object; a broken or short answer asked again for the rest
only, no object yielded twice; an answer out of order refused.

Against a real cluster: tests/integration/datapipes/test_pipes.py (``test_get_batch_*``)."""

from __future__ import annotations

import pytest
import requests

import aisio
from aisio.core.store.batch import MISSING_PREFIX, batch_url, get_batch
from aisio.core.store.urls import Bucket
from tests.conftest import tar_bytes
from tests.unit.core.store.scripted import PROXY, answer, scripted_client

BUCKET = Bucket("b")
NAMES = [f"img/{i:03d}.jpg" for i in range(6)]
DATA = {name: f"bytes of {name}".encode() * (i + 1) for i, name in enumerate(NAMES)}


def tar_of(names: list[str], *, missing: tuple[str, ...] = ()) -> bytes:
    """Returns a Get-Batch answer: the objects as tar members, in order (a missing one as an
    empty ``__404__/<name>``)."""
    return tar_bytes([(MISSING_PREFIX + n, b"") if n in missing else (n, DATA[n])
                      for n in names])


def member_end(raw: bytes, count: int) -> int:
    """Returns the byte where the first ``count`` members of a tar end (512-byte blocks)."""
    pos = 0
    for _ in range(count):
        size = int(raw[pos + 124:pos + 136].rstrip(b"\0 ") or b"0", 8)
        pos += 512 + -(-size // 512) * 512
    return pos


def test_one_request_yields_every_object_in_order() -> None:
    client, transport = scripted_client(answer(200, tar_of(NAMES)))
    assert list(get_batch(client, BUCKET, NAMES)) == [(n, DATA[n]) for n in NAMES]
    (seen,) = transport.seen
    assert seen.method == "GET" and seen.url == batch_url(PROXY, BUCKET)
    assert [entry["objname"] for entry in seen.json()["in"]] == NAMES


def test_a_missing_object_is_yielded_as_none() -> None:
    client, _ = scripted_client(answer(200, tar_of(NAMES, missing=(NAMES[2],))))
    got = dict(get_batch(client, BUCKET, NAMES))
    assert got[NAMES[2]] is None and got[NAMES[3]] == DATA[NAMES[3]] and len(got) == 6


@pytest.mark.parametrize("short", [False, True], ids=["reset", "truncated-tar"])
def test_a_broken_answer_is_asked_again_for_the_rest_only(short: bool) -> None:
    whole = tar_of(NAMES)
    cut = member_end(whole, 2) + 700  # inside the third member
    client, transport = scripted_client(answer(200, whole, cut_at=cut, short=short),
                                        answer(200, tar_of(NAMES[2:])))
    assert list(get_batch(client, BUCKET, NAMES)) == [(n, DATA[n]) for n in NAMES]
    assert [[e["objname"] for e in s.json()["in"]] for s in transport.seen] == [NAMES, NAMES[2:]]


def test_a_clean_but_short_answer_is_asked_again_for_the_rest() -> None:
    client, transport = scripted_client(answer(200, tar_of(NAMES[:4])),
                                        answer(200, tar_of(NAMES[4:])))
    assert [n for n, _ in get_batch(client, BUCKET, NAMES)] == NAMES
    assert [len(s.json()["in"]) for s in transport.seen] == [6, 2]


def test_answers_that_break_without_progress_run_out_of_retries() -> None:
    client, transport = scripted_client(*[answer(200, tar_of(NAMES), cut_at=100)] * 3,
                                        max_retries=2)
    with pytest.raises(aisio.AISConnectionError, match="retries ran out"):
        list(get_batch(client, BUCKET, NAMES))
    assert len(transport.seen) == 3


def test_an_answer_that_keeps_ending_short_says_to_read_one_by_one() -> None:
    client, _ = scripted_client(answer(200, tar_of(NAMES[:1])),
                                *[answer(200, tar_bytes([]))] * 2, max_retries=1)
    got = []
    with pytest.raises(aisio.AISConnectionError, match="batch_get=0"):
        for name, _ in get_batch(client, BUCKET, NAMES):
            got.append(name)
    assert got == NAMES[:1]  # what came is yielded once, before the error


def test_an_answer_out_of_order_is_refused_naming_both() -> None:
    client, _ = scripted_client(answer(200, tar_of([NAMES[1], NAMES[0]])))
    with pytest.raises(aisio.ShardFormatError, match=r"answered 'img/001.jpg' where "
                                                      r"'img/000.jpg' was due"):
        list(get_batch(client, BUCKET, NAMES))


def test_a_refused_request_is_the_clients_typed_error() -> None:
    client, transport = scripted_client(requests.ConnectionError("refused"),
                                        answer(404, b'{"tcode":"ErrBckNotFound"}'))
    with pytest.raises(aisio.BucketNotFoundError):
        list(get_batch(client, BUCKET, NAMES))
    assert len(transport.seen) == 2
