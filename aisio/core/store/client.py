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
import urllib3
import xxhash
from requests.adapters import HTTPAdapter

from aisio.core.faults.errors import (
    AISConnectionError,
    AISIOError,
    AISRequestError,
    ClusterWaitWarning,
    ObjectChangedError,
)
from aisio.core.faults.policy import warn_in_user_code
from aisio.core.store.cluster import MAP_TIMEOUT, ClusterView, base_of, view_for
from aisio.core.store.config import CLUSTER_WAIT_VAR, AISConfig
from aisio.core.store.etl import local_server_of, read_url
from aisio.core.store.translate import (
    RETRY_STATUSES,
    TRANSIENT_EXCEPTIONS,
    cluster_forming,
    error_from_exception,
    error_from_status,
    object_gone,
    object_missing,
)
from aisio.core.store.urls import ETL, AISPath, Bucket, bucket_url, object_url

log = logging.getLogger("aisio")

_REDIRECTS = (301, 302, 303, 307, 308)
_MAX_HOPS = 5

#: The longest pause between two tries while the cluster says it is (re)forming (a restarted
#: proxy answers 400 ``ErrNoNodes`` for ~10 s until the targets rejoin): it answers at once, so
#: it is asked often.
FORMING_POLL = 1.0


class Client:
    """Talks to one AIStore cluster; create it with :func:`client_for` (one per process)."""

    def __init__(self, config: AISConfig) -> None:
        self.config = config
        config.require_endpoint()
        #: the proxies this client may ask, shared by the process's clients of this cluster
        self.cluster: ClusterView = view_for(config.endpoints)
        self._local = threading.local()
        self._waiting_since: float | None = None  # a cluster event is being waited out

    @property
    def endpoint(self) -> str:
        """Returns the proxy this client asks now: the configured one while it answers, else
        another proxy of the cluster."""
        return self.cluster.current

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

    def _send(self, method: str, url: str, *, data: Any = None, trail: list[str] | None = None,
              **kw: Any) -> requests.Response:
        """Sends one request, following AIStore's proxy->target redirects by hand.

        A PUT first goes to the proxy with an empty body; the body is sent once, to the target.
        Headers (the auth token among them) are kept on every hop, unlike requests' own redirects.
        A URL naming a proxy that is down goes to the proxy the client asks now. ``trail`` gets
        each URL as it is asked (the last one is where a connection failed).
        """
        timeout = (self.config.connect_timeout, self.config.read_timeout)
        body = b"" if (method == "PUT" and data is not None) else data
        stream = kw.pop("stream", False)
        url = self.cluster.route(url)
        for _ in range(_MAX_HOPS):
            if trail is not None:
                trail.append(url)
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
            self.cluster.saw_node(url)
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
        existing: bool = False,
        **kw: Any,
    ) -> requests.Response:
        """Returns the response of a request, retrying transient failures; raises typed errors.

        A failure of the request's own (a reset, a timeout, a busy answer) is tried again up to
        ``max_retries`` times. A failure that says the cluster is changing under it (a target
        that the proxy redirects to does not answer, the proxy it knew is gone, the cluster is
        (re)forming, an object whose target left the map) is tried again, asking a proxy each
        time, until ``cluster_wait`` seconds have passed since the first one; the first such
        wait is said once as a :class:`~aisio.ClusterWaitWarning`.

        Args:
            method: HTTP method.
            url: the full URL.
            name: the AIS name (or URL) to put in messages.
            what: the operation for messages ("reading", "listing", ...).
            etl: the ETL the request names (for ETL-specific errors).
            ok: statuses that count as success.
            existing: the object was read a moment ago (a broken stream reopened): a 404 then
                means its target left the cluster, and is waited for like a dead target.
            **kw: passed to ``requests`` (``json``, ``data``, ``headers``, ``stream``, ...).
        """
        wait = _Wait(self, name, what)
        while True:
            trail: list[str] = []
            try:
                resp = self._send(method, url, trail=trail, **kw)
            except TRANSIENT_EXCEPTIONS as exc:
                event = self._event_of(exc, trail)
                delay = wait.retry(event)
                if delay is None:
                    raise wait.gave_up(error_from_exception(exc, url=name, what=what)) from exc
                log.debug("aisio: retry %s %s after %r (%s)", method, name, exc, event or "")
                time.sleep(delay)
                continue
            except AISIOError:
                raise
            except Exception as exc:
                raise error_from_exception(exc, url=name, what=what) from exc
            self._answered(trail[0])
            if resp.status_code in ok:
                self._served(name)
                return resp
            body = resp.headers.get("Hdr-Error") or resp.content
            resp.close()
            # A local ETL server's 500 is the transform raising: final, never worth a retry.
            local = local_server_of(url) if etl is not None else None
            delay = None
            if cluster_forming(body):
                delay = wait.retry("the cluster is (re)forming", poll=FORMING_POLL)
            elif resp.status_code == 404 and what == "reading" and object_gone(body) and (
                    existing or wait.since is not None or self._map_changed()):
                delay = wait.retry("the object's target left the cluster map (down, or in "
                                   "maintenance); it is served again when the target returns")
            elif (resp.status_code in RETRY_STATUSES
                  and not (local is not None and resp.status_code == 500)
                  and not object_missing(body)):
                delay = wait.retry(None)
            if delay is not None:
                log.debug("aisio: retry %s %s: HTTP %d%s", method, name, resp.status_code,
                          f" ({wait.event})" if wait.event else "")
                time.sleep(delay)
                continue
            raise wait.gave_up(error_from_status(
                resp.status_code, body, url=name, what=what, etl=etl.name if etl else None,
                local_etl=local.log if local is not None else None))

    def _event_of(self, exc: BaseException, trail: list[str]) -> str | None:
        """Returns what a connection failure says the cluster is doing (None: nothing, a
        failure of this request's own)."""
        if not trail or isinstance(exc, (*_READ_TIMEOUTS, requests.exceptions.SSLError)):
            return None
        failed = base_of(trail[-1])
        if len(trail) > 1:
            return (f"{failed}, where the proxy sent the request, does not answer ("
                    f"{type(exc).__name__}): a target is down or leaving the cluster")
        others = self.cluster.failed(failed)
        if not others and self.cluster.answered:
            others = self._rediscover()
        if others:
            self.cluster.event()
            return f"the proxy at {failed} does not answer; asking {self.endpoint} instead"
        if self.cluster.answered:
            self.cluster.event()
            return f"the proxy at {failed} does not answer: it is restarting, or gone"
        return None

    def _answered(self, url: str) -> None:
        """Notes that the node at ``url`` (the first one asked) answered."""
        base = base_of(url)
        self.cluster.up(base)
        if not self.cluster.answered:
            self.cluster.answered = True

    def _served(self, name: str) -> None:
        if self._waiting_since is not None:
            log.info("aisio: the cluster serves again (%s, after %.1f s)", name,
                     time.monotonic() - self._waiting_since)
            self._waiting_since = None

    def _waiting(self, name: str, what: str, event: str) -> None:
        """Says once per wait what the client waits for, and for how long at most."""
        self.cluster.event()
        if self._waiting_since is not None:
            return
        self._waiting_since = time.monotonic()
        warn_in_user_code(
            f"aisio is waiting for the cluster: {what} {name}: {event}; it tries again, asking "
            f"a proxy each time, for up to {self.config.cluster_wait:.0f} s "
            f"(AISConfig.cluster_wait, {CLUSTER_WAIT_VAR})", ClusterWaitWarning)

    def learn_map(self) -> None:
        """Learns the cluster's proxies and map version from the proxy asked now, once per
        process (a failure to learn is not an error: the configured endpoints remain)."""
        if not self.cluster.learned:
            self.cluster.learned = True
            self._ask_map(self.endpoint)

    def _map(self, base: str) -> dict[str, Any] | None:
        """Returns the cluster map as the node at ``base`` has it, or None (no answer, or not
        one: asking is advisory)."""
        try:
            resp = self.session.get(f"{base}/v1/daemon?what=smap", timeout=MAP_TIMEOUT)
            smap = resp.json() if resp.status_code == 200 else None
        except (requests.RequestException, ValueError):
            return None
        return smap if isinstance(smap, dict) else None

    def _ask_map(self, base: str) -> bool:
        """Learns the map of the node at ``base``; returns whether it gave one."""
        smap = self._map(base)
        if smap is not None:
            self.cluster.learn(smap)
        return smap is not None

    def _rediscover(self) -> bool:
        """Asks the other nodes known for the cluster map (a new primary, new proxies); returns
        whether a proxy not known to be down is now known."""
        for base in self.cluster.candidates():
            if base not in self.cluster.down and self._ask_map(base):
                break
        return any(p not in self.cluster.down for p in self.cluster.proxies)

    def _map_changed(self) -> bool:
        """True when the cluster's map is not the one this job saw first (or this process saw
        the cluster change within ``cluster_wait``): a missing object may be on a target that
        left it."""
        if self.cluster.recent_event(self.config.cluster_wait):
            return True
        baseline = self.cluster.baseline
        smap = self._map(self.endpoint) if baseline is not None else None
        return smap is not None and str(smap.get("version")) != baseline

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
        self.learn_map()  # the job's planning step: the proxies to fail over to, the map version
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

    def bucket_names(self) -> list[str]:
        """Returns the names of the cluster's buckets (of every provider)."""
        answer = self.request("GET", f"{self.endpoint}/v1/buckets/", name=self.endpoint,
                              what="listing buckets")
        return [bucket["name"] for bucket in answer.json() or []]

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


_READ_TIMEOUTS = (requests.ReadTimeout, urllib3.exceptions.ReadTimeoutError)


class _Wait:
    """How long one request still tries: ``max_retries`` more times after a failure of its
    own; after one that says the cluster is changing, until ``cluster_wait`` seconds have
    passed since the first such failure (see :meth:`Client.request`)."""

    def __init__(self, client: Client, name: str, what: str) -> None:
        self.client = client
        self.name = name
        self.what = what
        self.attempt = 0  # failures of the request's own, counted against max_retries
        self.waits = 0  # tries while the cluster changes
        self.since: float | None = None  # when the cluster was first seen changing
        self.event = ""

    def retry(self, event: str | None, *, poll: float | None = None) -> float | None:
        """Returns the seconds to wait before trying again, or None when the failure is final.

        Args:
            event: what the cluster is doing, or None for a failure of the request's own.
            poll: the longest wait between two tries (the cluster answers at once).
        """
        config = self.client.config
        if event is None:
            if self.attempt >= config.max_retries:
                return None
            self.attempt += 1
            return self.client._delay(self.attempt - 1)
        now = time.monotonic()
        if self.since is None:
            self.since = now
        self.event = event
        left = self.since + config.cluster_wait - now
        if left <= 0:
            return None
        self.waits += 1
        self.client._waiting(self.name, self.what, event)
        delay = self.client._delay(self.waits - 1)
        return min(left, max(0.05, delay if poll is None else min(delay, poll)))

    def gave_up(self, error: AISIOError) -> AISIOError:
        """Returns ``error``, saying how long the cluster was waited for, when it was."""
        if self.since is None:
            return error
        error.message = (f"{error.message} (aisio waited {time.monotonic() - self.since:.0f} s "
                         f"for the cluster: {self.event}; AISConfig.cluster_wait or "
                         f"{CLUSTER_WAIT_VAR} sets how long)")
        error.args = (error.message,)
        return error


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
                                   headers=headers, stream=True, ok=(200, 206),
                                   existing=self._identity is not None)
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

