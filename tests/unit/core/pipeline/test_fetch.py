"""How many Get-Batch requests the fetcher keeps in flight (``AheadDepth``): sized from the
last group's request time, the time it was used and its bytes. The reads themselves, against a
real cluster: tests/integration/datapipes/test_pipes.py (``test_get_batch_*``)."""

from __future__ import annotations

import pytest

from aisio.core.pipeline.fetch import AheadDepth


def test_two_groups_ahead_before_anything_is_measured() -> None:
    assert AheadDepth().now == 2


@pytest.mark.parametrize(("fetch_s", "use_s", "depth"), [
    (0.001, 0.010, 1),   # the request is quick beside its use (loopback): one ahead is enough
    (0.030, 0.010, 3),   # a slow request (a round trip of milliseconds): as many as it covers
    (0.021, 0.010, 3),   # rounded up
    (1.000, 0.010, 4),   # never more than MOST
    (0.010, 0.0, 4),     # a group used in no time: as many as allowed
])
def test_the_depth_covers_a_request_with_the_time_groups_are_used(fetch_s: float,
                                                                   use_s: float,
                                                                   depth: int) -> None:
    ahead = AheadDepth()
    ahead.learn(fetch_s, use_s, nbytes=1 << 20)
    assert ahead.now == depth


def test_big_groups_keep_fewer_ahead() -> None:
    ahead = AheadDepth()
    ahead.learn(1.0, 0.01, nbytes=AheadDepth.BYTES // 2)
    assert ahead.now == 2
    ahead.learn(1.0, 0.01, nbytes=AheadDepth.BYTES * 3)
    assert ahead.now == 1  # never none: the next group is always asked for
