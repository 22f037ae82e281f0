"""An ordered map over an iterator in a few threads: for decoders that release the GIL."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def thread_map(fn: Callable[[T], R], items: Iterable[T], threads: int) -> Iterator[R]:
    """Yields ``fn(item)`` for each item, in order, computed by ``threads`` threads.

    At most ``2 * threads`` results are in flight, so memory stays bounded; an exception in
    ``fn`` is raised at its item's place, and pending work is cancelled when the consumer stops.

    Example:
        >>> list(thread_map(str.upper, ["a", "b", "c"], threads=2))
        ['A', 'B', 'C']
    """
    if threads < 1:
        raise ValueError(f"threads={threads} must be at least 1")
    window: deque[Future[R]] = deque()
    with ThreadPoolExecutor(threads, thread_name_prefix="aisio-map") as pool:
        try:
            for item in items:
                window.append(pool.submit(fn, item))
                if len(window) >= 2 * threads:
                    yield window.popleft().result()
            while window:
                yield window.popleft().result()
        finally:
            for future in window:
                future.cancel()
