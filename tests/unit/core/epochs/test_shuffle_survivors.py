"""The shuffle buffer (``shuffle_buffer``) draws from the whole buffer: which sample comes next,
and so what each batch holds (mutation survivors; to move beside the buffer's own tests)."""

from __future__ import annotations

import itertools
import random

from aisio.core.epochs.progress import shuffle_buffer


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
