from __future__ import annotations

import inspect
import pickle

import pytest
from torch.utils.data.graph import traverse_dps
from torch.utils.data.graph_settings import get_all_graph_pipes

import aisio
from aisio import AISConfig, ConfigError, ObjectNotFoundError, ShardFormatError
from aisio.core.store.config import resolve_config
from aisio.core.store.translate import error_from_exception, error_from_status


def test_all_is_sorted_and_complete() -> None:
    assert aisio.__all__ == sorted(aisio.__all__)
    public = {n for n, v in vars(aisio).items() if not n.startswith("_") and
              (inspect.isclass(v) or inspect.isfunction(v))}
    assert public <= set(aisio.__all__)


def test_config_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIS_ENDPOINT", "http://env:1")
    monkeypatch.setenv("AIS_AUTHN_TOKEN", "tok")
    assert resolve_config().endpoint == "http://env:1"
    assert resolve_config().token == "tok"
    assert resolve_config("http://arg:2/").endpoint == "http://arg:2"
    assert resolve_config(None, AISConfig(endpoint="http://cfg:3")).endpoint == "http://cfg:3"
    assert resolve_config("http://arg:2", AISConfig(endpoint="http://cfg:3")).endpoint == (
        "http://arg:2"
    )


def test_config_token_is_not_in_repr() -> None:
    assert "s3cret" not in repr(AISConfig(endpoint="http://h:1", token="s3cret"))


@pytest.mark.parametrize(
    "kwargs",
    [{"endpoint": "h:1"}, {"endpoint": "ftp://h"}, {"max_retries": -1}, {"read_timeout": 0},
     {"ca_cert": "/nonexistent/ca.pem"}],
)
def test_bad_config_is_a_config_error(kwargs: dict) -> None:
    with pytest.raises(ConfigError):
        AISConfig(**kwargs)


def test_missing_endpoint_says_how_to_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIS_ENDPOINT", raising=False)
    with pytest.raises(ConfigError, match="AIS_ENDPOINT"):
        resolve_config().require_endpoint()


def _all_error_classes() -> list[type]:
    return [v for v in vars(aisio).values() if inspect.isclass(v) and
            issubclass(v, aisio.AISIOError)]


@pytest.mark.parametrize("cls", _all_error_classes(), ids=lambda c: c.__name__)
def test_every_error_pickles_with_its_fields(cls: type) -> None:
    err = cls("something at ais://b/o failed; do X", url="ais://b/o")
    err.extra = 1
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls
    assert str(back) == str(err)
    assert back.url == "ais://b/o"
    assert back.extra == 1


def test_shard_error_fields_survive_pickle() -> None:
    err = ShardFormatError("bad", url="u", offset=512, member="a.jpg")
    back = pickle.loads(pickle.dumps(err))
    assert (back.offset, back.member, back.url) == (512, "a.jpg", "u")


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


def test_endpoint_is_the_one_name_and_url_its_alias(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIS_ENDPOINT", "http://env:9")  # what a lost argument would fall back to
    from aisio.core.store.config import resolve_config

    assert resolve_config(endpoint="http://h:1").endpoint == "http://h:1"
    assert resolve_config("http://h:1").endpoint == "http://h:1"  # url=, positional
    assert resolve_config("http://h:1", endpoint="http://h:1").endpoint == "http://h:1"
    with pytest.raises(ConfigError, match="two endpoints"):
        resolve_config("http://h:1", endpoint="http://h:2")
    lister = aisio.AISFileLister("ais://b/s-{0..1}.tar", endpoint="http://h:3")
    loader = aisio.AISFileLoader("ais://b/x.tar", url="http://h:4")
    assert (lister.config.endpoint, loader.config.endpoint) == ("http://h:3", "http://h:4")
    for kwargs, endpoint in [({"endpoint": "http://h:5"}, "http://h:5"),
                             ({"url": "http://h:6"}, "http://h:6")]:
        spec_pipe = aisio.webdataset_pipe("ais://b/s-{0..1}.tar", **kwargs)
        loaders = [p for p in get_all_graph_pipes(traverse_dps(spec_pipe))
                   if isinstance(p, aisio.AISFileLoader)]
        assert [p.config.endpoint for p in loaders] == [endpoint]
