"""The few REST calls a playground makes to its own nodes (health, cluster map, cluster actions),
over the standard library: the playground needs no HTTP client of the library's."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import ssl
import time
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


def admin_token(secret: str, ttl: float = 300.0) -> str:
    """Returns an AuthN token (an HS256 JWT of an admin) signed with the cluster's secret."""
    def b64(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps({"sub": "aisio-playground", "exp": int(time.time() + ttl),
                           "admin": True}).encode())
    sig = hmac.new(secret.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(sig)}"


def call(url: str, method: str = "GET", body: Any = None, *, tls: tuple[str, str] | None = None,
         secret: str | None = None, timeout: float = 2.0) -> Answer:
    """Returns a node's answer to ``method url`` with ``body`` as JSON (and an admin token
    signed with ``secret`` when the cluster requires tokens); never raises for a node that is
    down or refuses (status 0) or answers an error (its status)."""
    ctx = None
    if url.startswith("https"):
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        if tls:  # presented when the nodes require client certificates
            ctx.load_cert_chain(*tls)
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if secret:
        headers["Authorization"] = f"Bearer {admin_token(secret)}"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=ctx) as resp:
            return Answer(int(resp.status), resp.read(), dict(resp.headers))
    except urllib.error.HTTPError as exc:
        return Answer(int(exc.code), exc.read() or b"", dict(exc.headers or {}))
    except (OSError, ValueError):
        return Answer(0)
