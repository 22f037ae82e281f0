"""What a client knows of the cluster behind its endpoint: the proxies it may ask, whether the
cluster has answered, and whether its map changed since the job began.

AIStore lists every proxy in its cluster map (``GET /v1/daemon?what=smap``: ``pmap``, each with
its public ``direct_url``). A client that was given one proxy learns the others from the map the
first time it lists a bucket (the job's planning step, in the training process, before workers
fork and inherit what it learned), so that when that proxy dies it asks another one instead of
the dead address. The map's ``version`` seen then is the job's baseline: a 404 for an object
after the map changed may be an object whose target is gone for now (see
:meth:`ClusterView.changed`).

One view per set of configured endpoints and process (:func:`view_for`), shared by its clients.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger("aisio")

#: Seconds to wait for a node's answer to a cluster-map request (small: a node that does not
#: answer at once is not the one to fail over to).
MAP_TIMEOUT = 2.0
#: Target addresses remembered from redirects, to ask for the map when every proxy is gone.
_SEEN_NODES = 8


def base_of(url: str) -> str:
    """Returns ``scheme://host:port`` of ``url`` (what names a node)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def proxies_of(smap: dict[str, Any]) -> list[str]:
    """Returns the public URLs of the proxies a cluster map lists, the primary's first."""
    pmap = smap.get("pmap") or {}
    primary = (smap.get("proxy_si") or {}).get("daemon_id")
    urls: list[str] = []
    for sid, node in sorted(pmap.items(), key=lambda item: item[0] != primary):
        url = ((node or {}).get("public_net") or {}).get("direct_url") or ""
        if url and sid:
            urls.append(url.rstrip("/"))
    return urls


class ClusterView:
    """The proxies a client may ask and what it saw of the cluster (one per process).

    Args:
        seeds: the endpoints the configuration names, the first one first.
    """

    def __init__(self, seeds: Sequence[str]) -> None:
        self.seeds = tuple(seeds)
        self.proxies: list[str] = list(self.seeds)  # the one to ask first, first
        self.down: set[str] = set()
        self.baseline: str | None = None  # the map's version when it was first learned
        self.learned = False  # the map was asked for (once per process and cluster)
        self.answered = False  # the cluster answered a request of this process (or its parent)
        self.nodes_seen: list[str] = []
        self.event_at: float | None = None  # when this process last saw the cluster change
        self.lock = threading.Lock()

    @property
    def current(self) -> str:
        """Returns the proxy to ask now: the first one not known to be down (else the first)."""
        if not self.down:
            return self.proxies[0]
        with self.lock:
            return next((p for p in self.proxies if p not in self.down), self.proxies[0])

    def route(self, url: str) -> str:
        """Returns ``url`` sent to the current proxy when it names a proxy known to be down."""
        if not self.down:  # (every request asks: nothing to parse while every proxy answers)
            return url
        base = base_of(url)
        if base not in self.down:
            return url
        now = self.current
        return now + url[len(base):] if now != base else url

    def learn(self, smap: dict[str, Any]) -> None:
        """Takes the proxies and version of a cluster map; the configured endpoint stays first
        while it is up. Learned proxies are used only when the endpoint is one of them (an
        endpoint in front of the cluster, e.g. a load balancer, may be the only way in)."""
        learned = proxies_of(smap)
        with self.lock:
            if self.baseline is None and smap.get("version") is not None:
                self.baseline = str(smap["version"])
            if self.seeds[0] not in learned:
                return
            merged = [*self.seeds, *(p for p in learned if p not in self.seeds)]
            self.proxies = merged

    def saw_node(self, url: str) -> None:
        """Remembers a node a proxy redirected to (asked for the map when proxies are gone)."""
        base = base_of(url)
        if base in self.nodes_seen:
            return
        with self.lock:
            self.nodes_seen = [base, *self.nodes_seen][:_SEEN_NODES]

    def failed(self, base: str) -> bool:
        """Marks proxy ``base`` down; returns whether another proxy is left to ask."""
        with self.lock:
            if base in self.proxies:
                self.down.add(base)
            return any(p not in self.down for p in self.proxies)

    def up(self, base: str) -> None:
        """Marks ``base`` as answering again (it is asked first again when it is the seed)."""
        if base in self.down:
            with self.lock:
                self.down.discard(base)

    def event(self) -> None:
        """Notes that the cluster was seen changing (a node down, an election) just now."""
        self.event_at = time.monotonic()

    def recent_event(self, window: float) -> bool:
        """True when this process saw the cluster change within the last ``window`` seconds."""
        return self.event_at is not None and time.monotonic() - self.event_at < window

    def candidates(self) -> list[str]:
        """Returns the nodes to ask for the map when the proxies known are down: the other
        seeds and proxies, then targets seen."""
        with self.lock:
            return [*self.proxies, *self.nodes_seen]


_VIEWS: dict[tuple[str, ...], ClusterView] = {}
_VIEWS_LOCK = threading.Lock()


def view_for(seeds: Sequence[str]) -> ClusterView:
    """Returns this process's view of the cluster behind ``seeds`` (inherited across fork)."""
    key = tuple(seeds)
    with _VIEWS_LOCK:
        view = _VIEWS.get(key)
        if view is None:
            view = _VIEWS[key] = ClusterView(key)
        return view
