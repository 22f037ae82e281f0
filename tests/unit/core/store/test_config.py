"""Tests for aisio.core.store.config: precedence, validation, the endpoint's one name."""

from __future__ import annotations

import pytest
from torch.utils.data.graph import traverse_dps
from torch.utils.data.graph_settings import get_all_graph_pipes

import aisio
from aisio import AISConfig, ConfigError
from aisio.core.store.config import resolve_config


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
