"""The exception tree and the skip policy: only missing objects and bad data are skippable."""

from __future__ import annotations

import inspect
import pickle
import warnings

import pytest

import aisio
from aisio import ShardFormatError
from aisio.core.faults.errors import is_skippable
from aisio.core.faults.policy import ErrorPolicy

FAMILIES = {
    aisio.UsageError: [aisio.InvalidURLError, aisio.ConfigError, aisio.LoaderUnavailableError,
                       aisio.StateMismatchError],
    aisio.NotFoundError: [aisio.BucketNotFoundError, aisio.ObjectNotFoundError,
                          aisio.ETLNotFoundError],
    aisio.DataError: [aisio.ShardFormatError, aisio.DecodeError, aisio.ObjectChangedError,
                      aisio.ETLTransformError, aisio.EmptyEpochError],
    aisio.ClusterError: [aisio.AISConnectionError, aisio.AISRequestError, aisio.AuthError,
                         aisio.ETLUnavailableError],
}


def test_every_error_class_is_in_exactly_one_family() -> None:
    leaves = {c for c in vars(aisio).values() if isinstance(c, type)
              and issubclass(c, aisio.AISIOError) and c not in FAMILIES
              and c not in (aisio.AISIOError, aisio.PlaygroundError, aisio.WorkerDiedError)}
    placed = [c for members in FAMILIES.values() for c in members]
    assert sorted(placed, key=repr) == sorted(leaves, key=repr)
    for family, members in FAMILIES.items():
        for cls in members:
            assert [f for f in FAMILIES if issubclass(cls, f)] == [family]


@pytest.mark.parametrize("on_error", ["skip", "warn"])
def test_skip_records_missing_and_bad_data_but_raises_usage_and_cluster_errors(
        on_error: str) -> None:
    policy = ErrorPolicy(on_error, aisio.ErrorReport())  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        policy.handle(aisio.ObjectNotFoundError("gone", url="ais://b/x"), "ais://b/x")
        policy.handle(aisio.ShardFormatError("bad", url="ais://b/y", offset=1024), "ais://b/y",
                      samples=3)
    for error in (aisio.AISConnectionError("down"), aisio.AuthError("401"),
                  aisio.ETLUnavailableError("501"), aisio.InvalidURLError("bad name")):
        assert not is_skippable(error)
        with pytest.raises(type(error)):
            policy.handle(error, "ais://b/z")
    records = policy.report.records()
    assert [(r["shard"], r["offset"], r["samples"]) for r in records] == [
        ("ais://b/x", None, None), ("ais://b/y", 1024, 3)]


def test_on_error_is_checked() -> None:
    with pytest.raises(ValueError, match="on_error='ignore'"):
        ErrorPolicy("ignore")  # type: ignore[arg-type]


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
