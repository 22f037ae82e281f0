"""The error policy: what a skip records and says, and when an epoch of skips is refused."""

from __future__ import annotations

import logging

import pytest

import aisio
from aisio.core.faults.errors import BAD_SHARD_HINT
from aisio.core.faults.policy import ErrorPolicy, check_epoch


def test_a_skip_is_recorded_under_the_shard_it_was_read_from() -> None:
    policy = ErrorPolicy("skip", aisio.ErrorReport())
    # the error names the object that failed; the record names the shard the stage was reading
    policy.handle(aisio.ObjectNotFoundError("gone", url="ais://b/member"), "ais://b/shard.tar",
                  samples=2)
    [record] = policy.report.records()
    assert (record["shard"], record["samples"]) == ("ais://b/shard.tar", 2)


@pytest.mark.parametrize("error, samples, sample, said", [
    (aisio.ShardFormatError("bad", url="s"), None, None, "aisio skipped s.tar: bad"),
    (aisio.ShardFormatError("bad", url="s", offset=512), None, None,
     "aisio skipped the rest of s.tar: bad"),
    (aisio.ShardFormatError("bad", url="s"), 3, None, "aisio skipped the rest of s.tar: bad"),
    (aisio.DecodeError("bad", url="s"), 3, "k7", "aisio skipped sample 'k7' of s.tar: bad"),
    (aisio.ShardFormatError(f"bad; {BAD_SHARD_HINT}", url="s"), None, None,
     "aisio skipped s.tar: bad; re-upload the shard"),
])
def test_a_warned_skip_says_what_was_skipped_and_logs_it(
        error: aisio.AISIOError, samples: int | None, sample: str | None, said: str,
        caplog: pytest.LogCaptureFixture) -> None:
    policy = ErrorPolicy("warn", aisio.ErrorReport())
    with caplog.at_level(logging.INFO, logger="aisio"), pytest.warns(UserWarning) as warned:
        policy.handle(error, "s.tar", samples=samples, sample=sample)
    assert [str(w.message) for w in warned] == [said]
    assert [r.getMessage() for r in caplog.records] == [said]


def test_an_epoch_of_skips_alone_is_refused_naming_the_first_skip_of_this_epoch() -> None:
    report = aisio.ErrorReport()
    check_epoch(0, report)  # nothing was skipped: an empty epoch is just empty
    report.record(aisio.ShardFormatError("old", url="ais://b/0.tar"))  # an earlier epoch's
    check_epoch(0, report, skipped_before=1)
    report.record(aisio.ShardFormatError(f"torn; {BAD_SHARD_HINT}", url="ais://b/1.tar"))
    with pytest.raises(aisio.EmptyEpochError) as refused:
        check_epoch(0, report, skipped_before=1)
    assert refused.value.url == "ais://b/1.tar"
    assert "ais://b/1.tar: torn; re-upload the shard" in str(refused.value)
    with pytest.raises(aisio.EmptyEpochError, match="all 2 shard"):
        check_epoch(0, report)  # by default every record counts
    check_epoch(1, report)  # an epoch that yielded something is never refused
