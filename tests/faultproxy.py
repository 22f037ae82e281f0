"""A fault-injecting HTTP proxy on 127.0.0.1, in front of a real AIStore endpoint.

It forwards every request to the cluster (following the proxy->target redirect itself, so the
client only ever talks to it, except for the body of a PUT) and breaks GET answers on purpose:
after ``cut_after`` body bytes, or at a random point with probability ``reset_probability``, it
resets the TCP connection (RST, not a clean close); after ``stall_after`` body bytes it stops
sending and holds the connection open (for ``stall_seconds`` at most, or until the proxy stops).
Every break and stall is counted, so tests can check that faults happened.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

_HOP_HEADERS = {"connection", "transfer-encoding", "keep-alive", "content-encoding"}


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # clients that see a reset hang up on us too; that is the point


class FaultProxy:
    """Breaks GET bodies mid-stream; see the module doc.

    Args:
        upstream: the AIStore endpoint to forward to.
        cut_after: reset every GET answer after this many body bytes (None: never).
        reset_probability: chance that a GET answer is reset at a random byte.
        min_body: only break answers whose remaining body is larger than this.
        fail_statuses: answer the first requests with these statuses instead (e.g. [503, 429]),
            each a status or a ``(status, body)`` pair (e.g. an AIStore JSON error body).
        break_paths: only GETs whose path starts with one of these are broken.
        seed: for the random resets.
        stall_after: stop sending every GET answer after this many body bytes (None: never).
        stall_seconds: how long a stall lasts at most (the connection is then closed).
        max_stalls: stall only this many answers (None: every one).
    """

    def __init__(self, upstream: str, *, cut_after: int | None = None,
                 reset_probability: float = 0.0, min_body: int = 0,
                 fail_statuses: tuple[int | tuple[int, bytes], ...] = (),
                 break_paths: tuple[str, ...] = ("/v1/objects/",), seed: int = 0,
                 stall_after: int | None = None, stall_seconds: float = 60.0,
                 max_stalls: int | None = None) -> None:
        self.upstream = upstream.rstrip("/")
        self.cut_after = cut_after
        self.reset_probability = reset_probability
        self.min_body = min_body
        self.rng = random.Random(seed)
        self.fail_statuses = list(fail_statuses)
        self.break_paths = break_paths
        self.lock = threading.Lock()
        self.breaks = 0
        self.stall_after = stall_after
        self.stall_seconds = stall_seconds
        self.stalls = 0
        self.max_stalls = max_stalls
        self._stopping = threading.Event()
        self.requests = 0
        self.range_requests = 0
        self.object_gets = 0  # GETs of objects (HEADs and listings not counted)
        self.auth_headers: list[str | None] = []
        self.server = _QuietServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # ends the stalls
        self.server.shutdown()
        self.server.server_close()

    def _cut_point(self, body_len: int | None) -> int | None:
        """Returns where to break an answer of ``body_len`` bytes (None: unknown, streamed)."""
        if body_len is not None and body_len <= self.min_body:
            return None
        with self.lock:
            if self.cut_after is not None and (body_len is None or body_len > self.cut_after):
                return self.cut_after
            if body_len is None:
                return None
            if self.reset_probability and self.rng.random() < self.reset_probability:
                return self.rng.randrange(0, body_len)
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self
        session = requests.Session()
        session.trust_env = False

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # else a small answer waits ~40 ms for a delayed ACK

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _forward(self, method: str) -> None:
                with proxy.lock:
                    proxy.requests += 1
                    proxy.range_requests += "Range" in self.headers
                    proxy.object_gets += method == "GET" and self.path.startswith("/v1/objects/")
                    proxy.auth_headers.append(self.headers.get("Authorization"))
                    status = proxy.fail_statuses.pop(0) if proxy.fail_statuses else None
                if status is not None:
                    status, error = status if isinstance(status, tuple) else (status, b"")
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(error)))
                    self.end_headers()
                    self.wfile.write(error)
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in _HOP_HEADERS | {"host", "content-length"}}
                # A PUT's redirect goes back to the client, which sends the body to the target
                # (aisio sends the proxy an empty body); every other redirect is followed here.
                resp = session.request(method, proxy.upstream + self.path, headers=headers,
                                       data=body, stream=True, allow_redirects=method != "PUT",
                                       timeout=30)
                length = resp.headers.get("Content-Length")
                payload_len = int(length) if length is not None else None
                self.send_response(resp.status_code)
                for key, value in resp.headers.items():
                    if key.lower() not in _HOP_HEADERS:
                        self.send_header(key, value)
                if payload_len is None:  # streamed upstream: the end of our answer is a close
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                if method == "HEAD":
                    resp.close()
                    return
                is_object = self.path.startswith(proxy.break_paths)
                cut = proxy._cut_point(payload_len) if method == "GET" and is_object else None
                stall = proxy.stall_after if method == "GET" and is_object else None
                with proxy.lock:
                    if proxy.max_stalls is not None and proxy.stalls >= proxy.max_stalls:
                        stall = None
                sent = 0
                for chunk in resp.raw.stream(64 * 1024, decode_content=False):
                    if stall is not None and sent + len(chunk) > stall:
                        self.wfile.write(chunk[: stall - sent])
                        self.wfile.flush()
                        with proxy.lock:
                            proxy.stalls += 1
                        proxy._stopping.wait(proxy.stall_seconds)
                        self.close_connection = True
                        resp.close()
                        return
                    if cut is not None and sent + len(chunk) > cut:
                        self.wfile.write(chunk[: cut - sent])
                        self.wfile.flush()
                        self._reset()
                        resp.close()
                        return
                    self.wfile.write(chunk)
                    sent += len(chunk)
                resp.close()

            def _reset(self) -> None:
                with proxy.lock:
                    proxy.breaks += 1
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))
                self.close_connection = True
                self.connection.close()

            def do_GET(self) -> None:
                self._forward("GET")

            def do_HEAD(self) -> None:
                self._forward("HEAD")

            def do_PUT(self) -> None:
                self._forward("PUT")

        return Handler


@contextmanager
def fault_proxy(upstream: str, **kwargs: object) -> Iterator[FaultProxy]:
    """Runs a :class:`FaultProxy` for the duration of a ``with`` block."""
    proxy = FaultProxy(upstream, **kwargs).start()  # type: ignore[arg-type]
    try:
        yield proxy
    finally:
        proxy.stop()
