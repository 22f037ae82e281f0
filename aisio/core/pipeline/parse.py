"""From ``(shard, stream)`` pairs to WebDataset samples, under the error policy.

The one loop that every front end runs to turn streamed shards into samples: the DataPipes'
:class:`~aisio.WebDatasetParser` wraps it, and so do the other loaders.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import IO, Any

from aisio.core.epochs.progress import ShardTask
from aisio.core.faults.errors import AISIOError
from aisio.core.faults.policy import ErrorPolicy
from aisio.core.format.samples import iter_samples
from aisio.core.format.tar.runs import Columns, RunPlan
from aisio.core.store.client import content_id
from aisio.core.transport.delivery import POSITION, VERSION


def parse_streams(pairs: Iterable[tuple[Any, IO[bytes]]], policy: ErrorPolicy, *,
                  runs: RunPlan | None = None) -> Iterator[Any]:
    """Yields the samples of each ``(shard, stream)`` pair, closing every stream.

    A shard given as a :class:`~aisio.core.epochs.progress.ShardTask` (from a resumable loader) is
    read
    from where the task starts, and its samples carry their positions. A shard read through a
    :class:`~aisio.ShardCache` gives its samples ``__local_path__``, the cache entry's path (as
    webdataset's cache does; "" when the shard cannot be cached). A bad shard is raised or
    skipped (with how many of its samples were yielded) as ``policy`` says.

    With ``runs``, a task's regular samples may come as
    :class:`~aisio.core.format.tar.runs.Columns` (see :func:`task_samples`).
    """
    for key, stream in pairs:
        url = key.uri() if isinstance(key, ShardTask) else key
        local = getattr(stream, "local_path", None)  # a ShardCache stream: where it is kept
        delivered = 0
        try:
            if isinstance(key, ShardTask):
                samples = task_samples(key, stream, runs=runs if local is None else None)
            else:
                samples = iter_samples(stream, url=url)
            for sample in samples:
                if local is not None:
                    sample["__local_path__"] = local
                yield sample
                delivered += 1 if type(sample) is not Columns else len(sample.values)
            drain(stream)
        except AISIOError as exc:
            policy.handle(exc, url, samples=delivered)
        finally:
            stream.close()


def task_samples(task: ShardTask, stream: Any, *, runs: RunPlan | None = None
                 ) -> Iterator[Any]:
    """Returns the samples of one task's stream (opened at ``task.start``), each with its
    position in :data:`POSITION` and its shard's content id in :data:`VERSION`; samples in
    ``task.skip`` are read but not yielded.

    A sample is yielded once the next one begins (or the archive ends: then it is marked
    ``last``), so a fault in the next sample still yields it (it is whole). The parser tags
    the samples itself (:func:`~aisio.core.format.samples.iter_samples`' ``tag``): no layer per
    sample on the resumable loaders' path. With ``runs`` (and nothing to skip), runs of regular
    samples come as :class:`~aisio.core.format.tar.runs.Columns` of the fields it picks.
    """
    version = content_id(stream)
    return iter_samples(stream, url=task.uri(), start_offset=task.start,
                        tag=(POSITION, task.index, task.first, task.skip,
                             {VERSION: version} if version is not None else {}), runs=runs)


def drain(stream: IO[bytes], limit: int = 1 << 20) -> None:
    """Reads the end-of-archive padding after the last member (a cache keeps only whole shards)."""
    if getattr(stream, "caching", False):  # filling a cache: to the end, however far
        limit = 1 << 62
    while limit > 0:
        chunk = stream.read(min(limit, 1 << 16))
        if not chunk:
            return
        limit -= len(chunk)
