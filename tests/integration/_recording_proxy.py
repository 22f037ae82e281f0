"""A recording HTTP proxy for the resume tests: :class:`tests.faultproxy.FaultProxy` (which
forwards to the real AIStore and follows its redirects) that breaks nothing and logs every
request: method, path, ``Range`` header, and the body bytes sent, with their times."""

from __future__ import annotations

import threading
import time
from typing import Any
from urllib.parse import unquote, urlsplit

from tests.faultproxy import FaultProxy


class _CountingWriter:
    """The handler's ``wfile``, counting the body bytes of the current request."""

    def __init__(self, inner: Any, handler: Any) -> None:
        self._inner = inner
        self._handler = handler

    def write(self, data: bytes) -> Any:
        record = getattr(self._handler, "_record", None)
        if record is not None and getattr(self._handler, "_in_body", False):
            record["bytes"] += len(data)
            record["writes"].append((time.time(), len(data)))
        return self._inner.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class RecordingProxy(FaultProxy):
    """Forwards everything; ``log`` holds one dict per request (see the module doc)."""

    def __init__(self, upstream: str) -> None:
        self.log: list[dict[str, Any]] = []
        self._log_lock = threading.Lock()
        super().__init__(upstream)

    def _handler(self) -> type:
        base = super()._handler()
        proxy = self

        class Recording(base):  # type: ignore[misc, valid-type]
            def setup(self) -> None:
                super().setup()
                self.wfile = _CountingWriter(self.wfile, self)

            def _forward(self, method: str) -> None:
                path = urlsplit(self.path).path
                record = {"method": method, "path": path, "object": _object_name(path),
                          "range": self.headers.get("Range"), "time": time.time(), "bytes": 0,
                          "writes": []}
                with proxy._log_lock:
                    proxy.log.append(record)
                self._record, self._in_body = record, False
                try:
                    super()._forward(method)
                finally:
                    self._in_body = False

            def end_headers(self) -> None:
                super().end_headers()
                self._in_body = True

        return Recording

    def recorded_gets(self) -> list[dict[str, Any]]:
        """Returns the GETs of objects, in order."""
        with self._log_lock:
            return [dict(r) for r in self.log if r["method"] == "GET" and r["object"]]


def _object_name(path: str) -> str | None:
    """``/v1/objects/<bucket>/<name>`` -> ``<name>`` (None for other paths)."""
    parts = path.split("/", 4)
    if len(parts) == 5 and parts[1] == "v1" and parts[2] == "objects":
        return unquote(parts[4])
    return None
