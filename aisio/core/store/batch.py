"""AIStore's Get-Batch API (``/v1/ml/moss``): many small objects in one request.

One GET names up to a few hundred objects of one bucket in its JSON body; the cluster answers
with a single tar holding them in request order, which :func:`iter_tar` parses as it streams. It
reads small objects many times faster than one GET each, because one request replaces hundreds
of proxy->target round trips (benchmarks/README.md, Figures behind the code's comments).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from urllib.parse import quote, urlencode

from aisio.core.faults.errors import AISConnectionError, AISIOError, ShardFormatError
from aisio.core.format.tar import iter_tar
from aisio.core.store.client import Client
from aisio.core.store.translate import TRANSIENT_EXCEPTIONS, error_from_exception
from aisio.core.store.urls import Bucket

log = logging.getLogger("aisio")

#: How a broken answer shows: a transient error, or a tar that ends mid-member.
_BROKEN: tuple[type[BaseException], ...] = (*TRANSIENT_EXCEPTIONS, ShardFormatError)


def batch_url(endpoint: str, bucket: Bucket) -> str:
    """Returns the Get-Batch URL for ``bucket``."""
    return f"{endpoint}/v1/ml/moss/{quote(bucket.name, safe='')}?{urlencode(bucket.query())}"


#: How Get-Batch names the member that stands for a missing object (with ``coer`` on).
MISSING_PREFIX = "__404__/"


def batch_body(names: Sequence[str]) -> dict[str, object]:
    """Returns the Get-Batch request body: the objects, streamed back as one plain tar, in order.

    ``coer`` (continue on error): a missing object becomes an empty ``__404__/<name>`` member
    instead of ending the answer early; ``onob``: members are named by object name alone.
    """
    return {"in": [{"objname": name} for name in names], "mime": ".tar", "coer": True,
            "onob": True, "strm": True}


def get_batch(client: Client, bucket: Bucket, names: Sequence[str]
              ) -> Iterator[tuple[str, bytes | None]]:
    """Yields ``(name, bytes)`` for every name, in order, from as few Get-Batch requests as can be.

    A missing object is yielded as ``(name, None)``.

    If the answer breaks mid-stream, the objects not yet yielded are asked for again (none is
    yielded twice), up to the config's ``max_retries`` times without progress.

    Raises:
        AISIOError: the request was refused (e.g. a missing object: 404), retries ran out, or the
            answer did not hold the objects asked for, in order.
    """
    url = batch_url(client.endpoint, bucket)
    done = failures = 0
    while done < len(names):
        wanted = names[done:]
        try:
            resp = client.request("GET", url, name=bucket.uri(), what="batch reading",
                                  json=batch_body(wanted), stream=True)
            with resp:
                for member in iter_tar(resp.raw, url=bucket.uri()):
                    missing = member.name == MISSING_PREFIX + (names[done] if done < len(names)
                                                               else "")
                    if done == len(names) or (member.name != names[done] and not missing):
                        raise ShardFormatError(
                            f"Get-Batch from {bucket.uri()} answered {member.name!r} where "
                            f"{names[done] if done < len(names) else 'nothing'!r} was due; "
                            "read these objects one by one (batch_get=0)",
                            url=bucket.uri(), member=member.name, offset=member.offset)
                    done += 1
                    failures = 0
                    yield names[done - 1], None if missing else member.data
        except _BROKEN as exc:
            # A broken stream shows up as a transient error or as a truncated tar.
            if isinstance(exc, ShardFormatError) and "truncated" not in str(exc):
                raise
            failures += 1
            if failures > client.config.max_retries:
                raise (exc if isinstance(exc, AISIOError) else
                       error_from_exception(exc, url=bucket.uri(), what="batch reading")) from exc
            log.debug("aisio: Get-Batch from %s broke after %d of %d objects (%r); resuming",
                      bucket.uri(), done, len(names), exc)
            continue
        if done < len(names):  # a clean end, but short: ask again for the rest
            failures += 1
            if failures > client.config.max_retries:
                raise AISConnectionError(
                    f"Get-Batch from {bucket.uri()} keeps ending after {done} of {len(names)} "
                    "objects; read them one by one (batch_get=0)", url=bucket.uri())
