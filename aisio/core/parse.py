"""From ``(shard, stream)`` pairs to WebDataset samples, under the error policy.

The one loop that every front end runs to turn streamed shards into samples: the DataPipes'
:class:`~aisio.WebDatasetParser` wraps it, and so do the other loaders.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import IO, Any

from aisio.core.epoch import ShardTask, task_samples
from aisio.core.errors import AISIOError
from aisio.core.fetch import ErrorPolicy
from aisio.core.samples import iter_samples


def parse_streams(pairs: Iterable[tuple[Any, IO[bytes]]], policy: ErrorPolicy
                  ) -> Iterator[dict[str, Any]]:
    """Yields the samples of each ``(shard, stream)`` pair, closing every stream.

    A shard given as a :class:`~aisio.core.epoch.ShardTask` (from a resumable loader) is read
    from where the task starts, and its samples carry their positions. A bad shard is raised or
    skipped (with how many of its samples were yielded) as ``policy`` says.
    """
    for key, stream in pairs:
        url = key.uri() if isinstance(key, ShardTask) else key
        delivered = 0
        try:
            samples = (task_samples(key, stream) if isinstance(key, ShardTask)
                       else iter_samples(stream, url=url))
            for sample in samples:
                yield sample
                delivered += 1
            drain(stream)
        except AISIOError as exc:
            policy.handle(exc, url, samples=delivered)
        finally:
            stream.close()


def drain(stream: IO[bytes], limit: int = 1 << 20) -> None:
    """Reads the end-of-archive padding after the last member (a cache keeps only whole shards)."""
    if getattr(stream, "caching", False):  # filling a cache: to the end, however far
        limit = 1 << 62
    while limit > 0:
        chunk = stream.read(min(limit, 1 << 16))
        if not chunk:
            return
        limit -= len(chunk)
