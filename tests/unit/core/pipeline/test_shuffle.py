"""Tests for aisio.core.pipeline.shuffle: the seeded shuffle step (a buffer) between parse and
stage (how shuffled deliveries are recorded: tests/unit/core/epochs/test_progress.py)."""

from __future__ import annotations

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
