"""A scripted transport for the client: every answer a cluster could give, on demand, no socket.

:class:`ScriptedTransport` is a ``requests`` adapter: mounted on a
:class:`~aisio.core.store.client.Client`'s session, it answers each request with the next step
of its script and keeps what it was sent (method, URL, headers, body). A step is an answer
(:func:`answer`, :func:`redirect`, :func:`serve`) or an exception to raise (what a refused or
reset connection raises). :func:`scripted_client` makes a client with one mounted.

Bodies stream like a network's: a read returns at most :data:`CHUNK` bytes, and a body can break
at a given byte (``cut_at``) with urllib3's ``ProtocolError`` (a reset connection) or end there
cleanly (``short=True``, a connection closed early).
"""

from __future__ import annotations

import http.client
import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import requests
from requests.adapters import BaseAdapter
from requests.structures import CaseInsensitiveDict
from urllib3.exceptions import ProtocolError

from aisio.core.store.client import Client
from aisio.core.store.cluster import ClusterView
from aisio.core.store.config import AISConfig

PROXY = "http://proxy.test:8080"
TARGET = "http://target.test:9090"
CHUNK = 1000
"""The most bytes one read of a body returns (a network read gives what has arrived)."""

Step = Callable[[requests.PreparedRequest], requests.Response]


@dataclass
class Seen:
    """One request as the transport received it."""

    method: str
    url: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Body(io.RawIOBase):
    """A response body that arrives :data:`CHUNK` bytes at a time and may break at a byte."""

    def __init__(self, data: bytes, *, cut_at: int | None = None, short: bool = False) -> None:
        super().__init__()
        self.data = data
        self.cut_at = cut_at
        self.short = short
        self.pos = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        end = min(len(self.data), self.pos + len(buffer), self.pos + CHUNK)
        if self.cut_at is not None:
            if self.pos >= self.cut_at:
                if self.short:
                    return 0
                raise ProtocolError("Connection broken: connection reset by peer (scripted)")
            end = min(end, self.cut_at)
        buffer[: end - self.pos] = self.data[self.pos:end]
        count = end - self.pos
        self.pos = end
        return count

    def read1(self, size: int = -1) -> bytes:
        return self.read(CHUNK if size is None or size < 0 else size)


class ScriptedTransport(BaseAdapter):
    """Answers requests with its script's steps, in order; keeps every request in ``seen``."""

    def __init__(self, *script: Step | BaseException) -> None:
        super().__init__()
        self.script = list(script)
        self.seen: list[Seen] = []

    def send(self, request: requests.PreparedRequest, stream: bool = False,  # type: ignore[override]
             timeout: Any = None, verify: Any = True, cert: Any = None,
             proxies: Any = None) -> requests.Response:
        body: Any = request.body
        if hasattr(body, "read"):
            body = body.read()  # a file body is consumed as a real send would
        if isinstance(body, str):
            body = body.encode()
        self.seen.append(Seen(request.method or "", request.url or "", dict(request.headers),
                              body or b""))
        if not self.script:
            raise AssertionError(f"unscripted request: {request.method} {request.url}")
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step(request)

    def close(self) -> None:
        pass

    def ranges(self) -> list[str | None]:
        """Returns the ``Range`` header of every request seen (None where there was none)."""
        return [seen.headers.get("Range") for seen in self.seen]


def scripted_client(*script: Step | BaseException, **config: Any
                    ) -> tuple[Client, ScriptedTransport]:
    """Returns a client of :data:`PROXY` whose requests go to a :class:`ScriptedTransport`
    (no backoff delays unless ``config`` sets one), and the transport."""
    config.setdefault("backoff", 0.0)
    client = Client(AISConfig(endpoint=PROXY, **config))
    client.cluster = ClusterView(client.config.endpoints)  # this test's alone,
    client.cluster.learned = True  # no request for its map
    transport = ScriptedTransport(*script)
    client.session.mount("http://", transport)
    return client, transport


def _response(request: requests.PreparedRequest, status: int, body: Body,
              headers: dict[str, str]) -> requests.Response:
    resp = requests.Response()
    resp.status_code = status
    resp.reason = http.client.responses.get(status, "")
    resp.headers = CaseInsensitiveDict(headers)
    resp.raw = body
    resp.url = request.url or ""
    resp.request = request
    resp.encoding = None
    return resp


def answer(status: int = 200, body: bytes = b"", headers: dict[str, str] | None = None, *,
           cut_at: int | None = None, short: bool = False) -> Step:
    """Returns a step that answers ``status`` with ``body`` (broken at ``cut_at``)."""
    def step(request: requests.PreparedRequest) -> requests.Response:
        all_headers = {"Content-Length": str(len(body)), **(headers or {})}
        return _response(request, status, Body(body, cut_at=cut_at, short=short), all_headers)

    return step


def redirect(location: str, status: int = 307) -> Step:
    """Returns a step that redirects to ``location`` (as a proxy sends a client to a target)."""
    return answer(status, headers={"Location": location})


def serve(data: bytes, *, version: str | None = "1", checksum: str | None = "xxh-1",
          cut_at: int | None = None, short: bool = False, ignore_range: bool = False) -> Step:
    """Returns a step that serves an object as AIStore does: its version and checksum in
    headers, the whole of it (200), or the bytes a ``Range: bytes=N-[M]`` asks (206); the
    stream breaks at absolute byte ``cut_at`` (a reset; ``short``: a clean early end)."""
    def step(request: requests.PreparedRequest) -> requests.Response:
        headers = {"Ais-Version": version, "Ais-Checksum-Value": checksum}
        wanted = re.fullmatch(r"bytes=(\d+)-(\d*)", request.headers.get("Range") or "")
        start, end = 0, len(data)
        if wanted and not ignore_range:
            start, end = int(wanted.group(1)), int(wanted.group(2) or len(data) - 1) + 1
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{len(data)}"
        headers["Content-Length"] = str(end - start)
        cut = None if cut_at is None else max(cut_at - start, 0)
        body = Body(data[start:end], cut_at=cut, short=short)
        return _response(request, 206 if "Content-Range" in headers else 200, body,
                         {k: v for k, v in headers.items() if v is not None})

    return step
