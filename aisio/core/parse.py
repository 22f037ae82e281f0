"""From ``(shard, stream)`` pairs to WebDataset samples, under the error policy.

The one loop that every front end runs to turn streamed shards into samples: the DataPipes'
:class:`~aisio.WebDatasetParser` wraps it, and so do the other loaders.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import IO, Any

from aisio.core.client import content_id
from aisio.core.delivery import POSITION, VERSION
from aisio.core.epoch import ShardTask
from aisio.core.errors import AISIOError
from aisio.core.fetch import ErrorPolicy
from aisio.core.samples import iter_samples


def parse_streams(pairs: Iterable[tuple[Any, IO[bytes]]], policy: ErrorPolicy
                  ) -> Iterator[dict[str, Any]]:
    """Yields the samples of each ``(shard, stream)`` pair, closing every stream.

    A shard given as a :class:`~aisio.core.epoch.ShardTask` (from a resumable loader) is read
    from where the task starts, and its samples carry their positions. A shard read through a
    :class:`~aisio.ShardCache` gives its samples ``__local_path__``, the cache entry's path (as
    webdataset's cache does; "" when the shard cannot be cached). A bad shard is raised or
    skipped (with how many of its samples were yielded) as ``policy`` says.
    """
    for key, stream in pairs:
        url = key.uri() if isinstance(key, ShardTask) else key
        local = getattr(stream, "local_path", None)  # a ShardCache stream: where it is kept
        delivered = 0
        try:
            samples = (task_samples(key, stream) if isinstance(key, ShardTask)
                       else iter_samples(stream, url=url))
            for sample in samples:
                if local is not None:
                    sample["__local_path__"] = local
                yield sample
                delivered += 1
            drain(stream)
        except AISIOError as exc:
            policy.handle(exc, url, samples=delivered)
        finally:
            stream.close()


def task_samples(task: ShardTask, stream: Any) -> Iterator[dict[str, Any]]:
    """Yields the samples of one task's stream (opened at ``task.start``), each with its
    position in :data:`POSITION` and its shard's content id in :data:`VERSION`; samples in
    ``task.skip`` are read but not yielded.

    The last sample of the shard is held until the end of the archive is seen, so that it can
    be marked ``last``; a fault in the next sample still yields the held one (it is whole).
    """
    url = task.uri()
    version = content_id(stream)
    pending: dict[str, Any] | None = None
    ordinal = task.first
    samples = iter_samples(stream, url=url, start_offset=task.start, ends=True)
    try:
        for sample, end in samples:
            if pending is not None:
                yield pending
            pending = None
            if ordinal not in task.skip:
                sample[POSITION] = (task.index, ordinal, end, False)
                if version is not None:
                    sample[VERSION] = version
                pending = sample
            ordinal += 1
    except AISIOError:
        if pending is not None:  # complete (the next sample had begun), and not the last
            yield pending
        raise
    if pending is not None:
        index, last_ordinal, end, _ = pending[POSITION]
        pending[POSITION] = (index, last_ordinal, end, last_ordinal == ordinal - 1)
        yield pending


def drain(stream: IO[bytes], limit: int = 1 << 20) -> None:
    """Reads the end-of-archive padding after the last member (a cache keeps only whole shards)."""
    if getattr(stream, "caching", False):  # filling a cache: to the end, however far
        limit = 1 << 62
    while limit > 0:
        chunk = stream.read(min(limit, 1 << 16))
        if not chunk:
            return
        limit -= len(chunk)
