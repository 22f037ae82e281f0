"""Where a read through an ETL goes: the one owner of that rule, and the registry of local ETLs.

A cluster with an ETL runtime (AIStore on Kubernetes) transforms an object when the GET names the
ETL: ``<endpoint>/v1/objects/<bucket>/<object>?etl_name=...``
(:func:`~aisio.core.store.urls.object_url`).
A cluster without one answers such a GET with HTTP 501 (a build without ETL support) or 404 (the
ETL is not running), which :mod:`aisio.core.store.translate` raises as typed errors.

On this machine the same AIStore SDK ETL class can run as a local process beside a cluster on
loopback (:mod:`aisio.localetl`). Each such process is registered in a small JSON file per cluster
endpoint (``<cache>/etl/<host>-<port>.json``, :func:`registry_file`), written when it starts and
emptied when it stops or the playground goes down. :func:`read_url` sends a read that names an ETL
to that local server when one is registered for the endpoint and the name, else to the cluster;
:func:`parse_read_url` maps either URL back to ``(endpoint, path, etl)``. Nothing else in aisio
decides where an ETL read goes.

A local server speaks the SDK's own protocol, as AIStore's target speaks to an ETL pod in
``hpull`` mode: ``GET <server>/<bucket>/<object>?etl_args=...`` and the server fetches the object
from ``AIS_TARGET_URL`` (the cluster's ``/v1/objects``), transforms it and answers the bytes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from aisio.core.faults.errors import InvalidURLError
from aisio.core.store.config import cache_dir
from aisio.core.store.urls import (
    ETL,
    AISPath,
    Bucket,
    object_url,
    parse_object_url,
    quote_object_name,
)
from aisio.core.system.processes import pid_alive

#: what a local ETL server's command line holds (checked before a pid is trusted or signalled)
SERVER_MARKER = "aisio.localetl"
_LOOPBACK = ("127.0.0.1", "localhost", "[::1]")


@dataclass(frozen=True)
class LocalETL:
    """A local ETL server, as registered: the ETL's name, where it serves, for which cluster.

    Attributes:
        name: the ETL's name (what ``etl=`` names).
        url: the server's base URL (``http://127.0.0.1:<port>``).
        endpoint: the cluster whose objects it reads and transforms.
        pid: the server process.
        source: the ``FILE:CLASS`` it serves.
        log: the server's log file.
    """

    name: str
    url: str
    endpoint: str
    pid: int
    source: str = ""
    log: str = ""


def registry_dir() -> Path:
    """Returns the directory of the local ETL registries (``<aisio cache>/etl``)."""
    return cache_dir() / "etl"


def _endpoint_key(endpoint: str) -> str:
    parts = urlsplit(endpoint)
    return (parts.hostname or "host").replace(":", "_") + f"-{parts.port or 0}"


def registry_file(endpoint: str) -> Path:
    """Returns the registry file of the local ETLs of one cluster endpoint."""
    return registry_dir() / f"{_endpoint_key(endpoint.rstrip('/'))}.json"


def is_loopback(endpoint: str) -> bool:
    """True when ``endpoint`` is on this machine (only such a cluster can have local ETLs)."""
    return urlsplit(endpoint).netloc.rsplit(":", 1)[0] in _LOOPBACK


def server_alive(pid: int) -> bool:
    """True when ``pid`` is a live local ETL server (not another process that reused the pid)."""
    if not pid_alive(pid, others_count=False):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc: the signal check is all there is
    if not cmdline:  # a zombie: exited, not yet reaped
        return False
    return SERVER_MARKER.encode() in cmdline


def _read(path: Path) -> dict[str, LocalETL]:
    """Returns the entries of a registry file (read each time: it is small, and a cache keyed by
    modification time could miss a rewrite within the same clock tick)."""
    try:
        doc: Any = json.loads(path.read_text())
        return {name: LocalETL(**info) for name, info in doc.get("etls", {}).items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def local_etls(endpoint: str) -> dict[str, LocalETL]:
    """Returns the live local ETLs of a cluster endpoint, by name."""
    if not is_loopback(endpoint):
        return {}
    return {n: e for n, e in _read(registry_file(endpoint)).items() if server_alive(e.pid)}


def all_local_etls() -> list[LocalETL]:
    """Returns every live local ETL on this machine, of every cluster."""
    found: list[LocalETL] = []
    for path in sorted(registry_dir().glob("*.json")):
        found.extend(e for e in _read(path).values() if server_alive(e.pid))
    return found


@contextlib.contextmanager
def _edit(endpoint: str) -> Iterator[dict[str, Any]]:
    """Yields a registry's ``etls`` mapping under a file lock; writes it back atomically."""
    path = registry_file(endpoint)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            doc = {}
        etls = dict(doc.get("etls", {}))
        yield etls
        if etls:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"endpoint": endpoint, "etls": etls}, indent=2))
            tmp.replace(path)
        else:
            path.unlink(missing_ok=True)


def register(entry: LocalETL) -> None:
    """Records a started local ETL server (replacing a dead one of the same name)."""
    with _edit(entry.endpoint) as etls:
        etls[entry.name] = asdict(entry)


def unregister(endpoint: str, name: str) -> None:
    """Forgets a local ETL server (after it stopped)."""
    with _edit(endpoint) as etls:
        etls.pop(name, None)


def local_server_url(server: LocalETL, path: AISPath, etl: ETL) -> str:
    """Returns the GET URL that makes a local ETL server transform ``path``.

    Example:
        >>> server = LocalETL("x", "http://127.0.0.1:9", "http://127.0.0.1:8", 1)
        >>> local_server_url(server, AISPath(Bucket("b"), "a b.tar"), ETL("x", {"w": 1}))
        'http://127.0.0.1:9/b/a%20b.tar?etl_name=x&etl_args=%7B%22w%22%3A1%7D'
    """
    if path.bucket.provider != "ais" or path.bucket.namespace:
        raise InvalidURLError(
            f"local ETL {etl.name!r} reads only ais:// buckets of its cluster, not "
            f"{path.uri()}; copy the objects into an ais:// bucket or deploy the ETL on "
            "Kubernetes", url=path.uri())
    return (f"{server.url}/{quote(path.bucket.name, safe='')}/{quote_object_name(path.obj)}"
            f"?{urlencode(etl.query(), quote_via=quote)}")


def read_url(endpoint: str, path: AISPath, etl: ETL | None = None) -> str:
    """Returns the URL a GET of ``path`` (through ``etl``, if any) goes to.

    No ETL: the cluster's object URL. An ETL that runs locally for this cluster: that server's
    URL. Else the cluster's URL with the ETL in the query (the cluster applies it, or answers
    why it cannot).
    """
    if etl is not None:
        server = local_etls(endpoint).get(etl.name)
        if server is not None:
            return local_server_url(server, path, etl)
    return object_url(endpoint, path, etl)


def local_server_of(url: str) -> LocalETL | None:
    """Returns the live local ETL server a URL points at, or None."""
    parts = urlsplit(url)
    if not parts.netloc or parts.netloc.rsplit(":", 1)[0] not in _LOOPBACK:
        return None
    base = f"{parts.scheme}://{parts.netloc}"
    return next((e for e in all_local_etls() if e.url == base), None)


def parse_read_url(url: str) -> tuple[str, AISPath, ETL | None]:
    """Returns ``(cluster endpoint, path, etl)`` of a URL :func:`read_url` built.

    Raises:
        InvalidURLError: neither an AIStore object URL nor a live local ETL server's URL.
    """
    try:
        return parse_object_url(url)
    except InvalidURLError:
        server = local_server_of(url)
        if server is None:
            raise
    parts = urlsplit(url)
    bucket, slash, obj = parts.path.lstrip("/").partition("/")
    if not bucket or not slash or not obj:
        raise InvalidURLError(f"URL {url!r} of local ETL {server.name!r} names no object "
                              "(expected <server>/<bucket>/<object>)", url=url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    etl = ETL(query.get("etl_name") or server.name, query.get("etl_args"))
    return server.endpoint, AISPath(Bucket(unquote(bucket)), unquote(obj)), etl
