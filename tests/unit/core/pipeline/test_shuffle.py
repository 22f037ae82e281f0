"""Tests for aisio.core.pipeline.shuffle: the seeded shuffle step (a buffer) between parse and
stage (how shuffled deliveries are recorded: tests/unit/core/epochs/test_progress.py)."""

from __future__ import annotations

import itertools
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aisio.core.pipeline.shuffle import shuffle_buffer

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.lists(st.integers()), st.integers(1, 50), st.randoms(use_true_random=False))
def test_shuffle_buffer_is_a_permutation(items: list[int], size: int, rng: random.Random) -> None:
    out = list(shuffle_buffer(iter(items), size, rng))
    assert sorted(out) == sorted(items)
    if size == 1:
        assert out == items


def test_the_shuffle_buffer_sends_on_any_buffered_item_first() -> None:
    """With the buffer full, the item yielded is drawn from every slot, not always one: over
    seeds, each of the first ``size`` items comes out first, and the stream is not mostly in
    its input order."""
    size = 4
    firsts = {next(shuffle_buffer(iter(range(100)), size, random.Random(seed)))
              for seed in range(60)}
    assert firsts == set(range(size))
    out = list(shuffle_buffer(iter(range(200)), 20, random.Random(0)))
    assert sorted(out) == list(range(200))
    assert sum(b == a + 1 for a, b in itertools.pairwise(out)) < 50
