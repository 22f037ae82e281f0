"""Where a loader's bytes come from: the one seam between aisio and a store of objects.

Every read of a shard and every listing goes through an :class:`ObjectStore`: AIStore's
client (:class:`~aisio.core.store.ais.AISStore`, the default), a :class:`~aisio.ShardCache`
over any store (:class:`~aisio.core.store.cache.CachedStore`), or objects held in memory
(:class:`~aisio.MemoryStore`, for tests). A loader takes one as ``store=``; it must pickle, since
it crosses to the worker processes with the pipeline's options.

A *store* here is where objects live; a *source* (:mod:`aisio.core.store.sources`) is what a
user names them by.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import IO, TYPE_CHECKING, Protocol, runtime_checkable

from aisio.core.store.suggest import Lister

if TYPE_CHECKING:
    from aisio.core.store.sources import ObjectRef


@runtime_checkable
class ObjectStore(Lister, Protocol):
    """A store of objects that a loader reads from (see the module doc).

    A stream returned by :meth:`open` may name its content with ``version`` and ``size``
    attributes (:func:`~aisio.core.store.client.content_id` reads them): a resumed shard is
    opened with that as ``expect``, so a changed object is refused rather than spliced.
    """

    def open(self, ref: ObjectRef, *, start: int = 0, expect: str | None = None) -> IO[bytes]:
        """Returns a stream over one object from byte ``start``.

        Args:
            ref: the object (its ``etl``, if any, names a transform to read it through).
            start: the first byte to read.
            expect: the content id the object had when it was read before (a resumed shard).

        Raises:
            AISIOError: the object or its bucket does not exist, the store cannot be read, or
                the object is no longer the ``expect`` ed content (``ObjectChangedError``).
        """
        ...

    def version(self, ref: ObjectRef) -> str | None:
        """Returns what names the object's current content (None: nothing does, e.g. a bucket
        without versioning and checksums), without reading it."""
        ...

    def get_batch(self, refs: Sequence[ObjectRef]) -> Iterator[bytes | None]:
        """Yields the bytes of each object of one bucket, in order, read whole (None: a missing
        object); for runs of small objects (``batch_get=``).

        Raises:
            AISIOError: the store refused the batch (the caller reads the rest one by one).
        """
        ...


__all__ = ["Lister", "ObjectStore"]  # Lister: defined in .suggest, its first user
