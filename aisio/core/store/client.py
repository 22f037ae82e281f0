"""A small, fast AIStore REST client over ``requests``: one pooled session per process.

Why not the SDK for the data path: aisio needs control that the SDK does not give — redirects
followed by hand (so the auth token reaches the target, and a PUT body is sent once), retries with
backoff on exactly the transient failures, and byte-exact resume of a broken object stream.
"""

from __future__ import annotations

import io
import logging
import os
import random
import threading
import time
import warnings
from collections.abc import Iterator
from typing import IO, Any
from urllib.parse import urljoin

import requests
import xxhash
from requests.adapters import HTTPAdapter

from aisio.core.faults.errors import (
    AISConnectionError,
    AISIOError,
    AISRequestError,
    ObjectChangedError,
)
from aisio.core.store.config import AISConfig
from aisio.core.store.etl import local_server_of, read_url
from aisio.core.store.translate import (
    RETRY_STATUSES,
    TRANSIENT_EXCEPTIONS,
    cluster_forming,
    error_from_exception,
    error_from_status,
    object_missing,
)
from aisio.core.store.urls import ETL, AISPath, Bucket, bucket_url, object_url

log = logging.getLogger("aisio")

_REDIRECTS = (301, 302, 303, 307, 308)
_MAX_HOPS = 5

#: Seconds a request keeps retrying answers that say the cluster is (re)forming (a restarted
#: proxy answers 400 ``ErrNoNodes`` for ~10 s until the targets rejoin), whatever max_retries is.
FORMING_WAIT = 90.0


class Client:
    """Talks to one AIStore cluster; create it with :func:`client_for` (one per process)."""

    def __init__(self, config: AISConfig) -> None:
        self.config = config
        self.endpoint = config.require_endpoint()
        self._local = threading.local()

    # ---- transport -------------------------------------------------------------------------
    @property
    def session(self) -> requests.Session:
        """Returns this thread's pooled session (sessions are not shared across threads)."""
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            session = self._new_session()
            self._local.session = session
        return session

    def _new_session(self) -> requests.Session:
        cfg = self.config
        session = requests.Session()
        adapter = HTTPAdapter(pool_connections=8, pool_maxsize=cfg.max_pool_size, max_retries=0)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        session.trust_env = False  # no proxies or netrc from the environment: explicit config only
        if cfg.skip_verify:
            session.verify = False
            warnings.warn(
                f"TLS certificate verification is off for {self.endpoint} (skip_verify=True)",
                stacklevel=3,
            )
            import urllib3

            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        elif cfg.ca_cert:
            session.verify = cfg.ca_cert
        if cfg.client_cert:
            session.cert = (cfg.client_cert, cfg.client_key) if cfg.client_key else cfg.client_cert
        if cfg.token:
            session.headers["Authorization"] = f"Bearer {cfg.token}"
        return session

    def _delay(self, attempt: int) -> float:
        cap = min(self.config.backoff_max, self.config.backoff * (2**attempt))
        return random.uniform(0, cap)

    def _send(self, method: str, url: str, *, data: Any = None, **kw: Any) -> requests.Response:
        """Sends one request, following AIStore's proxy->target redirects by hand.

        A PUT first goes to the proxy with an empty body; the body is sent once, to the target.
        Headers (the auth token among them) are kept on every hop, unlike requests' own redirects.
        """
        timeout = (self.config.connect_timeout, self.config.read_timeout)
        body = b"" if (method == "PUT" and data is not None) else data
        stream = kw.pop("stream", False)
        for _ in range(_MAX_HOPS):
            prepared = self.session.prepare_request(requests.Request(method, url, data=body, **kw))
            # Sent as aisio quoted it: requests would unquote %2E back into '.', and a '..'
            # segment on the wire lets any proxy on the way resolve 'a/../b' to 'b'.
            prepared.url = url
            resp = self.session.send(prepared, allow_redirects=False, timeout=timeout,
                                     stream=stream)
            location = resp.headers.get("Location")
            if resp.status_code not in _REDIRECTS or not location:
                return resp
            resp.close()
            url = urljoin(url, location)
            body = data
            if hasattr(data, "seek"):
                data.seek(0)
        raise AISConnectionError(f"too many redirects for {url}", url=url)

    def request(
        self,
        method: str,
        url: str,
        *,
        name: str,
        what: str,
        etl: ETL | None = None,
        ok: tuple[int, ...] = (200,),
        **kw: Any,
    ) -> requests.Response:
        """Returns the response of a request, retrying transient failures; raises typed errors.

        Args:
            method: HTTP method.
            url: the full URL.
            name: the AIS name (or URL) to put in messages.
            what: the operation for messages ("reading", "listing", ...).
            etl: the ETL the request names (for ETL-specific errors).
            ok: statuses that count as success.
            **kw: passed to ``requests`` (``json``, ``data``, ``headers``, ``stream``, ...).
        """
        retries = self.config.max_retries
        attempt = 0  # failures counted against max_retries
        forming = 0  # "cluster (re)forming" answers, counted against FORMING_WAIT instead
        forming_since = 0.0
        while True:
            try:
                resp = self._send(method, url, **kw)
            except TRANSIENT_EXCEPTIONS as exc:
                if attempt == retries:
                    raise error_from_exception(exc, url=name, what=what) from exc
                attempt += 1
                log.debug("aisio: retry %d/%d %s %s: %r", attempt, retries, method, name, exc)
                time.sleep(self._delay(attempt - 1))
                continue
            except AISIOError:
                raise
            except Exception as exc:
                raise error_from_exception(exc, url=name, what=what) from exc
            if resp.status_code in ok:
                return resp
            body = resp.headers.get("Hdr-Error") or resp.content
            resp.close()
            # A local ETL server's 500 is the transform raising: final, never worth a retry.
            local = local_server_of(url) if etl is not None else None
            if cluster_forming(body):
                now = time.monotonic()
                forming_since = forming_since or now
                if now - forming_since < FORMING_WAIT:
                    forming += 1
                    log.debug("aisio: retry %s %s: the cluster is (re)forming (HTTP %d, %.1f s)",
                              method, name, resp.status_code, now - forming_since)
                    time.sleep(max(0.05, min(self._delay(forming - 1), 1.0)))
                    continue
            elif (resp.status_code in RETRY_STATUSES and attempt < retries
                  and not (local is not None and resp.status_code == 500)
                  and not object_missing(body)):
                attempt += 1
                log.debug("aisio: retry %d/%d %s %s: HTTP %d", attempt, retries, method, name,
                          resp.status_code)
                time.sleep(self._delay(attempt - 1))
                continue
            raise error_from_status(resp.status_code, body, url=name, what=what,
                                    etl=etl.name if etl else None,
                                    local_etl=local.log if local is not None else None)

    # ---- buckets ---------------------------------------------------------------------------
    def create_bucket(self, bucket: Bucket, *, exist_ok: bool = False) -> None:
        """Creates an ``ais://`` bucket (``exist_ok`` tolerates an existing one)."""
        ok = (200, 409) if exist_ok else (200,)
        self.request("POST", bucket_url(self.endpoint, bucket), name=bucket.uri(),
                     what="creating bucket", json={"action": "create-bck"}, ok=ok).close()

    def destroy_bucket(self, bucket: Bucket, *, missing_ok: bool = True) -> None:
        """Destroys a bucket and everything in it."""
        ok = (200, 404) if missing_ok else (200,)
        self.request("DELETE", bucket_url(self.endpoint, bucket), name=bucket.uri(),
                     what="destroying bucket", json={"action": "destroy-bck"}, ok=ok).close()

    def list_pages(
        self, bucket: Bucket, prefix: str = "", *, props: str = "name", page_size: int | None = None
    ) -> Iterator[list[dict[str, Any]]]:
        """Yields the listing of ``prefix`` page by page, until the server says it was the last."""
        size = self.config.page_size if page_size is None else page_size
        value: dict[str, Any] = {"prefix": prefix, "props": props, "pagesize": size}
        url = bucket_url(self.endpoint, bucket)
        name = bucket.uri(prefix)
        while True:
            resp = self.request("GET", url, name=name, what="listing",
                                json={"action": "list", "value": value})
            page = resp.json()
            yield page.get("entries") or []
            token = page.get("continuation_token") or ""
            if not token:
                return
            value["uuid"] = page.get("uuid", "")
            value["continuation_token"] = token

    def list_objects(
        self, bucket: Bucket, prefix: str = "", *, props: str = "name", page_size: int | None = None
    ) -> Iterator[dict[str, Any]]:
        """Yields every object entry under ``prefix``, across all pages."""
        for page in self.list_pages(bucket, prefix, props=props, page_size=page_size):
            yield from page

    # ---- objects ---------------------------------------------------------------------------
    def put_object(self, path: AISPath, data: bytes | IO[bytes]) -> None:
        """Writes one object (bytes or a file opened in binary mode)."""
        self.request("PUT", object_url(self.endpoint, path), name=path.uri(), what="writing",
                     data=data).close()

    def head_object(self, path: AISPath) -> dict[str, str]:
        """Returns the object's ``Ais-*`` properties (size, version, checksum, ...)."""
        resp = self.request("HEAD", object_url(self.endpoint, path), name=path.uri(),
                            what="checking")
        resp.close()
        props = {k[4:].lower(): v for k, v in resp.headers.items() if k.lower().startswith("ais-")}
        props.setdefault("size", resp.headers.get("Content-Length", ""))
        return props

    def object_version(self, path: AISPath) -> str | None:
        """Returns what names the object's current content (see :func:`version_key`), or None."""
        props = self.head_object(path)
        size = props.get("size")
        return version_key(props.get("version"), props.get("checksum-value"),
                           int(size) if size else None)

    def get_bytes(self, path: AISPath, *, etl: ETL | None = None,
                  byte_range: tuple[int, int] | None = None) -> bytes:
        """Returns an object's bytes (or the inclusive ``byte_range``) read whole."""
        headers = {"Range": f"bytes={byte_range[0]}-{byte_range[1]}"} if byte_range else None
        resp = self.request("GET", read_url(self.endpoint, path, etl), name=path.uri(),
                            what="reading", etl=etl, headers=headers, ok=(200, 206))
        return resp.content

    def open(self, url: str, *, name: str, etl: ETL | None = None, start: int = 0,
             expect: str | None = None) -> ObjectReader:
        """Returns a resumable binary stream over the object at GET ``url``, from byte ``start``.

        ``expect``: the object's :func:`content_id` when it was read before (a resumed epoch);
        the stream raises :class:`ObjectChangedError` at once if the object is not that one.
        """
        return ObjectReader(self, url, name=name, etl=etl, start=start, expect=expect)


class ReadStream(io.RawIOBase):
    """A readable raw stream whose subclasses implement only ``read(size)``."""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class ObjectReader(ReadStream):
    """A binary stream over one object that survives broken connections.

    If the connection drops mid-body, the reader reopens the object and carries on, so the bytes
    it returns are exactly the object's: none lost, none repeated, never two versions joined.

    * When the answers identify the object's version (``Ais-Version`` or ``Ais-Checksum-Value``),
      it reopens with ``Range: bytes=<position>-`` and raises :class:`ObjectChangedError` if the
      version, checksum or size changed.
    * When nothing identifies it (a bucket without versioning and checksums), a Range answer
      could come from a newer object of the same size. The reader then reopens from byte 0,
      reads again the bytes it already returned and compares them (xxhash) with what it returned:
      if they match it goes on at the exact byte, else it raises :class:`ObjectChangedError`.
      Costlier (each resume reads the prefix again), never a splice.
    """

    def __init__(self, client: Client, url: str, *, name: str, etl: ETL | None = None,
                 start: int = 0, expect: str | None = None) -> None:
        super().__init__()
        self.client = client
        self.url = url
        self.name = name
        self.etl = etl
        self.pos = start
        self.size: int | None = None
        self._identity: tuple[str | None, str | None, int | None] | None = None
        self._resp: requests.Response | None = None
        self._given = xxhash.xxh3_64()  # of the bytes returned so far, for unidentified objects
        self.resumes = 0
        self._open()
        now = content_id(self)
        if expect is not None and now != expect:
            self._drop()
            raise ObjectChangedError(
                f"object {name} changed since the checkpoint ({expect} -> {now}): the saved "
                f"position (byte {start}) belongs to the old content; the samples of its new "
                "content were never delivered, read the shard again from the start (a new "
                "epoch) or restore the old object", url=name)

    @property
    def identified(self) -> bool:
        """True when the server names the object's version or checksum (Range resume is safe)."""
        return self._identity is not None and any(self._identity[:2])

    @property
    def version(self) -> str | None:
        """A string naming this object's version and content, or None when the server gives none.

        Usable as a cache key: it changes whenever the object is overwritten.
        """
        return version_key(*self._identity) if self._identity is not None else None

    def _changed(self, was: object, now: object) -> ObjectChangedError:
        return ObjectChangedError(
            f"object {self.name} changed while it was being read ({was} -> {now}) at byte "
            f"{self.pos}; read it again from the start", url=self.name)

    def _open(self) -> None:
        # A reader asked to start at a byte (a resumed epoch) opens there with Range; after
        # that, a reopen of an object that nothing identifies starts again from byte 0.
        from_zero = bool(self.pos) and self._identity is not None and not self.identified
        headers = {"Range": f"bytes={self.pos}-"} if self.pos and not from_zero else None
        resp = self.client.request("GET", self.url, name=self.name, what="reading", etl=self.etl,
                                   headers=headers, stream=True, ok=(200, 206))
        size = _total_size(resp)
        identity = (resp.headers.get("Ais-Version"), resp.headers.get("Ais-Checksum-Value"), size)
        if self._identity is None:
            if self.pos and resp.status_code != 206 and self.etl is not None:
                # An ETL's output has no byte ranges: read it from byte 0 up to the offset (the
                # same bytes again, for a deterministic transform) and go on from there.
                self._identity, self.size, self._resp = identity, size, resp
                self._discard(self.pos)
                return
            if self.pos and resp.status_code != 206:
                resp.close()
                raise AISRequestError(
                    f"reading {self.name} from byte {self.pos} returned the whole object (HTTP "
                    f"{resp.status_code}, not 206): the server ignored the Range request",
                    url=self.name, status=resp.status_code)
            self._identity, self.size = identity, size
        elif identity != self._identity or (headers and resp.status_code != 206):
            resp.close()
            raise self._changed(f"version, checksum, size {self._identity}",
                                f"{identity}, HTTP {resp.status_code}")
        self._resp = resp
        if from_zero:
            self._skip_given()

    def _skip_given(self) -> None:
        """Reads the first ``pos`` bytes again; raises unless they are the bytes returned."""
        assert self._resp is not None
        again = xxhash.xxh3_64()
        left = self.pos
        while left:
            chunk = self._resp.raw.read1(min(left, 1 << 20))
            if not chunk:
                raise ConnectionError(f"stream ended at byte {self.pos - left} of {self.size}")
            again.update(chunk)
            left -= len(chunk)
        if again.digest() != self._given.digest():
            self._drop()
            raise self._changed(f"first {self.pos} bytes read before", "different bytes now")

    def _discard(self, count: int) -> None:
        """Reads and drops the first ``count`` bytes of the answer (counted as returned)."""
        assert self._resp is not None
        while count:
            chunk = self._resp.raw.read1(min(count, 1 << 20))
            if not chunk:
                raise ConnectionError(f"stream ended {count} bytes before byte {self.pos}")
            self._given.update(chunk)
            count -= len(chunk)

    def read(self, size: int = -1) -> bytes:
        """Returns up to ``size`` bytes (everything left for -1); ``b""`` only at the end.

        A read may return fewer than ``size`` bytes (whatever one network read gave), so that
        bytes that arrived before a connection broke are never thrown away.
        """
        if size is None or size < 0:
            return b"".join(iter(lambda: self.read(1 << 20), b""))
        failures = 0
        while True:
            try:
                if self._resp is None:
                    if self.closed:
                        raise ValueError(f"read from closed stream of {self.name}")
                    self._open()
                assert self._resp is not None
                chunk: bytes = self._resp.raw.read1(size)
                if not chunk and size and self.size is not None and self.pos < self.size:
                    raise ConnectionError(f"stream ended at byte {self.pos} of {self.size}")
            except AISConnectionError as exc:  # reopening failed after the request's retries
                if exc.offset is not None:
                    raise
                raise AISConnectionError(f"{exc.message} (the stream of {self.name} stopped at "
                                         f"byte {self.pos})", url=exc.url,
                                         offset=self.pos) from exc
            except TRANSIENT_EXCEPTIONS as exc:
                failures += 1
                self._drop()
                if failures > self.client.config.max_retries:
                    raise error_from_exception(exc, url=self.name, what="reading",
                                               offset=self.pos) from exc
                log.debug("aisio: resuming %s at byte %d%s after %r", self.name, self.pos,
                          "" if self.identified else " (from byte 0: no version to check)", exc)
                self.resumes += 1
                time.sleep(self.client._delay(failures - 1))
                continue
            self.pos += len(chunk)
            if not self.identified:
                self._given.update(chunk)
            return chunk

    def _drop(self) -> None:
        if self._resp is not None:
            self._resp.close()
            self._resp = None

    def close(self) -> None:
        self._drop()
        super().close()


def content_id(stream: Any) -> str | None:
    """Returns what identifies the content a stream reads (kept in a loader state for each
    shard in progress): its version key (version, checksum and size) when the server names
    one, else only its size (``size=N``), else None (a stream that knows neither)."""
    version = getattr(stream, "version", None)
    if version:
        return str(version)
    size = getattr(stream, "size", None)
    return f"size={size}" if size is not None else None


def version_key(version: str | None, checksum: str | None, size: int | None) -> str | None:
    """Returns one string for an object's version, checksum and size, as a HEAD or a GET gives
    them; None when the server names neither version nor checksum (nothing identifies it)."""
    if not version and not checksum:
        return None
    return f"v={version or ''};xxh={checksum or ''};size={size}"


def _total_size(resp: requests.Response) -> int | None:
    content_range = resp.headers.get("Content-Range", "")
    if "/" in content_range and not content_range.endswith("/*"):
        return int(content_range.rsplit("/", 1)[1])
    length = resp.headers.get("Content-Length")
    return int(length) if length is not None and resp.status_code == 200 else None


_CLIENTS: dict[tuple[int, AISConfig], Client] = {}
_CLIENTS_LOCK = threading.Lock()


def client_for(config: AISConfig) -> Client:
    """Returns this process's client for ``config``, creating it on first use (fork-safe)."""
    key = (os.getpid(), config)
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = Client(config)
        return client

