"""Tests for aisio.core.store.translate: every HTTP answer and every exception from below
becomes a typed aisio error (the client's use of it: tests/unit/core/store/test_client.py)."""

from __future__ import annotations

import pytest

import aisio
from aisio import ObjectNotFoundError
from aisio.core.store.translate import error_from_exception, error_from_status


@pytest.mark.parametrize(
    ("status", "body", "etl", "cls"),
    [
        (404, '{"tcode":"ErrBckNotFound","message":"bucket does not exist"}', None,
         aisio.BucketNotFoundError),
        (404, '{"tcode":"ErrNotFound","message":"x does not exist"}', None, ObjectNotFoundError),
        (404, '{"tcode":"ErrNotFound","message":"o does not exist"}', "e1", ObjectNotFoundError),
        (404, '{"message":"etl e1 does not exist"}', "e1", aisio.ETLNotFoundError),
        (501, '{"tcode":"ErrUnsupp","message":"cannot use ETL"}', "e1",
         aisio.ETLUnavailableError),
        (401, "", None, aisio.AuthError),
        (403, "", None, aisio.AuthError),
        (503, "busy", None, aisio.AISRequestError),
        (400, "not json", None, aisio.AISRequestError),
    ],
)
def test_status_translation(status: int, body: str, etl: str | None, cls: type) -> None:
    err = error_from_status(status, body, url="ais://b/o", what="reading", etl=etl)
    assert type(err) is cls
    assert "ais://b/o" in str(err)
    assert err.status == status


def test_no_exception_escapes_untranslated() -> None:
    import requests
    import urllib3

    from aisio.core.store.translate import TRANSIENT_EXCEPTIONS

    samples = [requests.ConnectionError("x"), requests.Timeout("x"), requests.exceptions.SSLError(
        "x"), urllib3.exceptions.ProtocolError("x"), RuntimeError("x"), OSError("x")]
    samples += [cls("x") for cls in TRANSIENT_EXCEPTIONS if cls is not
                urllib3.exceptions.ReadTimeoutError and cls is not
                urllib3.exceptions.IncompleteRead]

    class SDKError(Exception):
        status_code = 404
        message = '{"tcode":"ErrBckNotFound"}'

    samples.append(SDKError())
    for exc in samples:
        assert isinstance(error_from_exception(exc, url="u", what="reading"), aisio.AISIOError)
