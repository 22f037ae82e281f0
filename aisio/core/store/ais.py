"""AIStore as an :class:`~aisio.core.store.protocol.ObjectStore`: the loaders' default store.

A thin adapter over this process's :class:`~aisio.core.store.client.Client` (created on first
use in each process, so the store pickles into worker processes as its config alone): reads are
resumable GETs with the client's retries and cluster ride-through, listings are paged, runs of
small objects go through Get-Batch (:mod:`.batch`), and a missing bucket or object is explained
(:mod:`.suggest`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any

from aisio.core.store.batch import get_batch
from aisio.core.store.client import Client, client_for
from aisio.core.store.config import AISConfig
from aisio.core.store.etl import read_url
from aisio.core.store.sources import ObjectRef
from aisio.core.store.suggest import explained
from aisio.core.store.urls import Bucket


@dataclass(frozen=True)
class AISStore:
    """Objects of the AIStore cluster that ``config`` names (an object's HTTP URL may name
    another endpoint: it is read there).

    Args:
        config: endpoint, token, TLS, timeouts, retries.
    """

    config: AISConfig

    def client(self, ref: ObjectRef | None = None) -> Client:
        """Returns this process's client for the object's endpoint (the configured one)."""
        if ref is None or ref.endpoint is None or ref.endpoint == self.config.endpoint:
            return client_for(self.config)
        return client_for(self.config.with_endpoint(ref.endpoint))

    def open(self, ref: ObjectRef, *, start: int = 0, expect: str | None = None) -> IO[bytes]:
        """Returns a resumable stream over the object from byte ``start`` (see
        :class:`~aisio.core.store.client.ObjectReader`), read through its ETL if it names one."""
        client = self.client(ref)
        url = read_url(client.endpoint, ref.path, ref.etl)
        reader = explained(client, ref.path, lambda: client.open(
            url, name=ref.path.uri(), etl=ref.etl, start=start, expect=expect))
        return reader  # type: ignore[return-value]

    def version(self, ref: ObjectRef) -> str | None:
        """Returns the object's version key, asked with one HEAD (see
        :func:`~aisio.core.store.client.version_key`)."""
        return self.client(ref).object_version(ref.path)

    def get_batch(self, refs: Sequence[ObjectRef]) -> Iterator[bytes | None]:
        """Yields the objects' bytes from as few Get-Batch requests as can be (see
        :func:`~aisio.core.store.batch.get_batch`)."""
        if not refs:
            return
        first = refs[0]
        for _, data in get_batch(self.client(first), first.path.bucket,
                                 [ref.path.obj for ref in refs]):
            yield data

    def list_pages(self, bucket: Bucket, prefix: str = "", *, props: str = "name",
                   page_size: int | None = None) -> Iterator[list[dict[str, Any]]]:
        """Yields the bucket's listing under ``prefix``, page by page."""
        return self.client().list_pages(bucket, prefix, props=props, page_size=page_size)

    def bucket_names(self) -> list[str]:
        """Returns the names of the cluster's buckets."""
        return self.client().bucket_names()


__all__ = ["AISStore"]
