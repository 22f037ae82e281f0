"""The few REST calls a playground makes to its own nodes (health, cluster map, cluster actions),
over the standard library: the playground needs no HTTP client of the library's."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Answer:
    """A node's answer: its status (0: no answer at all), body and headers."""

    status: int
    body: bytes = b""
    headers: dict[str, str] | None = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        return json.loads(self.body) if self.body.strip() else None


def call(url: str, method: str = "GET", body: Any = None, *, tls: tuple[str, str] | None = None,
         timeout: float = 2.0) -> Answer:
    """Returns a node's answer to ``method url`` with ``body`` as JSON; never raises for a
    node that is down or refuses (status 0) or answers an error (its status)."""
    ctx = None
    if url.startswith("https"):
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        if tls:  # presented when the nodes require client certificates
            ctx.load_cert_chain(*tls)
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=ctx) as resp:
            return Answer(int(resp.status), resp.read(), dict(resp.headers))
    except urllib.error.HTTPError as exc:
        return Answer(int(exc.code), exc.read() or b"", dict(exc.headers or {}))
    except (OSError, ValueError):
        return Answer(0)
