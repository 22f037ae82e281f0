"""The seeded shuffle step of a reader's path: samples shuffled through a buffer.

:func:`shuffle_buffer` is the step between parse and stage in
:func:`~aisio.core.pipeline.epoch.read_epoch`; each reader's generator
(:func:`~aisio.core.pipeline.epoch.reader_rng`) makes it the same in a rerun.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from typing import Any


def shuffle_buffer(items: Iterable[Any], size: int, rng: random.Random) -> Iterator[Any]:
    """Yields ``items`` shuffled through a buffer of ``size`` (as webdataset and torch do)."""
    buffer: list[Any] = []
    append, random_ = buffer.append, rng.random
    for item in items:
        if len(buffer) < size:
            append(item)
            continue
        index = int(random_() * size)  # randrange's checks cost more than the rest of this loop
        yield buffer[index]
        buffer[index] = item
    rng.shuffle(buffer)
    yield from buffer


__all__ = ["shuffle_buffer"]
