"""Client configuration: one frozen, validated dataclass; the environment only via ``from_env``."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aisio.core.faults.errors import ConfigError
from aisio.core.system.processes import pid_runs

log = logging.getLogger("aisio")

#: Environment variables read by :meth:`AISConfig.from_env` (the AIStore CLI's and SDK's names).
ENV_VARS = {
    "endpoint": "AIS_ENDPOINT",
    "token": "AIS_AUTHN_TOKEN",
    "ca_cert": "AIS_CLIENT_CA",
    "client_cert": "AIS_CRT",
    "client_key": "AIS_CRT_KEY",
    "skip_verify": "AIS_SKIP_VERIFY_CRT",
}

#: Seconds a request waits for a changing cluster (:attr:`AISConfig.cluster_wait`).
CLUSTER_WAIT_VAR = "AISIO_CLUSTER_WAIT"

_NO_ENDPOINT = (
    "no AIStore endpoint is configured: pass url='http://host:port', "
    "config=AISConfig(endpoint=...), or set AIS_ENDPOINT "
    '(for a local cluster: eval "$(aisio playground up)")'
)
#: the file in a playground's directory that names its nodes (``aisio.playground`` writes it)
PLAYGROUND_STATE = "state.json"
_announced: set[str] = set()  # the playground endpoints this process said it uses


@dataclass(frozen=True)
class AISConfig:
    """Returns a validated, immutable description of how to reach an AIStore cluster.

    Explicit arguments always win; the environment is read only by :meth:`from_env`. A config
    holds no sockets, so it pickles into DataLoader2 workers; each process opens its own
    connection pool lazily.

    Args:
        endpoint: the proxy's URL, e.g. ``http://127.0.0.1:51080``; several proxies of one
            cluster as a comma-separated list (``AIS_ENDPOINT`` too), the first asked first.
        endpoints: the same list as a tuple; ``endpoint`` is then its first entry. Either way,
            the client also learns the cluster's other proxies from its map, and asks another
            one when the proxy it talks to is gone.
        token: AuthN bearer token, sent on every request (never shown in ``repr``).
        ca_cert: CA bundle to verify an HTTPS endpoint.
        client_cert: client certificate (PEM) for mutual TLS.
        client_key: the client certificate's key, when not inside ``client_cert``.
        skip_verify: do not verify the server's certificate (warns once per process).
        connect_timeout: seconds to establish a connection.
        read_timeout: seconds to wait for the next bytes of an answer.
        max_retries: attempts after the first on connection errors, timeouts, 429 and 5xx.
        cluster_wait: seconds a request keeps trying while the cluster changes under it (a
            target down or leaving the map, a proxy election, a cluster (re)forming, an object
            whose target left): AIStore's own failure detection takes ~30 s on a real cluster
            (``AISIO_CLUSTER_WAIT``). Then the typed error names the object.
        backoff: first retry delay in seconds; doubles each time, with full jitter.
        backoff_max: the longest single delay.
        max_pool_size: connections kept per host (proxy and each target).
        page_size: objects per list-objects page (0: the server's default).
    """

    endpoint: str | None = None
    endpoints: tuple[str, ...] = ()
    token: str | None = dataclasses.field(default=None, repr=False)
    ca_cert: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    skip_verify: bool = False
    connect_timeout: float = 5.0
    read_timeout: float = 60.0
    max_retries: int = 5
    cluster_wait: float = 120.0
    backoff: float = 0.2
    backoff_max: float = 10.0
    max_pool_size: int = 16
    page_size: int = 0

    def __post_init__(self) -> None:
        listed = [*(self.endpoint.split(",") if self.endpoint else ()), *self.endpoints]
        endpoints = tuple(dict.fromkeys(_normalize_endpoint(e) for e in listed if e.strip()))
        object.__setattr__(self, "endpoints", endpoints)
        object.__setattr__(self, "endpoint", endpoints[0] if endpoints else None)
        if not self.cluster_wait >= 0:
            raise ConfigError("AISConfig.cluster_wait must be >= 0 seconds (0: do not wait for "
                              "the cluster to recover)")
        for name in ("connect_timeout", "read_timeout", "backoff_max"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"AISConfig.{name} must be a positive number of seconds")
        if self.backoff < 0:
            raise ConfigError("AISConfig.backoff must be >= 0 seconds")
        if self.max_retries < 0:
            raise ConfigError("AISConfig.max_retries must be >= 0 (0 disables retries)")
        if self.max_pool_size < 1:
            raise ConfigError("AISConfig.max_pool_size must be >= 1")
        if self.page_size < 0:
            raise ConfigError("AISConfig.page_size must be >= 0 (0 means the server's default)")
        for name in ("ca_cert", "client_cert", "client_key"):
            path = getattr(self, name)
            if path is not None and not os.path.isfile(path):
                raise ConfigError(f"AISConfig.{name} file {path!r} does not exist; fix the path")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> AISConfig:
        """Returns a config from ``AIS_*`` environment variables, with ``overrides`` winning.

        Without ``env`` (this process's environment), no ``endpoint`` override and no
        ``AIS_ENDPOINT``, the endpoint is the running default playground's, if one runs (said
        once on the ``aisio`` logger); a given ``env`` mapping is read alone.

        Example:
            >>> AISConfig.from_env({"AIS_ENDPOINT": "http://127.0.0.1:8080"}).endpoint
            'http://127.0.0.1:8080'
        """
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for field, var in ENV_VARS.items():
            raw = env.get(var)
            if raw:
                values[field] = raw.strip().lower() in ("1", "true", "yes") if field == (
                    "skip_verify"
                ) else raw
        wait = env.get(CLUSTER_WAIT_VAR)
        if wait:
            try:
                values["cluster_wait"] = float(wait)
            except ValueError:
                raise ConfigError(f"{CLUSTER_WAIT_VAR}={wait!r} is not a number of seconds; set "
                                  "it to e.g. 120") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        if env is os.environ and not values.get("endpoint"):
            found = running_playground_endpoint()
            if found:
                values["endpoint"] = found
                if found not in _announced:
                    _announced.add(found)
                    log.warning("aisio: using the playground at %s (AIS_ENDPOINT is unset)",
                                found)
        return cls(**values)

    def with_endpoint(self, endpoint: str | None) -> AISConfig:
        """Returns this config with ``endpoint`` (one, or a comma-separated list) replacing the
        endpoints when one is given."""
        if endpoint is None:
            return self
        return dataclasses.replace(self, endpoint=endpoint, endpoints=())

    def require_endpoint(self) -> str:
        """Returns the endpoint, or raises :class:`ConfigError` saying how to set one."""
        if not self.endpoint:
            raise ConfigError(_NO_ENDPOINT)
        return self.endpoint


def resolve_config(url: str | None = None, config: AISConfig | None = None, *,
                   endpoint: str | None = None) -> AISConfig:
    """Returns the effective config: the endpoint argument beats ``config`` beats the environment.

    ``endpoint=`` is the name everywhere in aisio; ``url=`` is accepted as its spelling in the
    removed AIStore/torchdata DataPipes.

    Raises:
        ConfigError: both are given, and differ.
    """
    if url is not None and endpoint is not None and url != endpoint:
        raise ConfigError(
            f"endpoint={endpoint!r} and url={url!r} name two endpoints: pass endpoint= alone "
            "(url= is the older spelling of the same setting)")
    base = config if config is not None else AISConfig.from_env()
    return base.with_endpoint(endpoint if endpoint is not None else url)


def _normalize_endpoint(endpoint: str) -> str:
    parts = urlsplit(endpoint.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"AIStore endpoint {endpoint!r} is not an http(s) URL; "
            "use the proxy's address, e.g. 'http://127.0.0.1:8080'"
        )
    if parts.query or parts.fragment:
        raise ConfigError(f"AIStore endpoint {endpoint!r} must not have a query or fragment")
    return endpoint.strip().rstrip("/")


def cache_dir() -> Path:
    """Returns aisio's cache directory (``$AISIO_CACHE_DIR``, else ``~/.cache/aisio``)."""
    explicit = os.environ.get("AISIO_CACHE_DIR")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "aisio"


def default_playground_dir() -> Path:
    """Returns the directory of the default playground: ``$AISIO_PLAYGROUND_DIR``, or this
    user's own under the cache (named by uid, so a cache shared between users shares no
    playground)."""
    explicit = os.environ.get("AISIO_PLAYGROUND_DIR")
    return Path(explicit) if explicit else cache_dir() / f"playground-{os.getuid()}"


def read_playground_state(root: Path) -> dict[str, Any] | None:
    """Returns the state the playground in ``root`` last wrote, or None when there is none."""
    try:
        state = json.loads((root / PLAYGROUND_STATE).read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and isinstance(state.get("nodes"), list) else None


def running_playground_endpoint(root: Path | None = None) -> str | None:
    """Returns the public URL of a live proxy of the playground in ``root`` (default: the
    default playground's directory), the primary when last seen first; None when none runs.

    Reads the playground's state and asks the system whether its processes live: no socket.
    """
    state = read_playground_state(default_playground_dir() if root is None else root)
    if state is None:
        return None
    scheme = "https" if state.get("tls") else "http"
    proxies = [n for n in state["nodes"] if isinstance(n, dict) and n.get("role") == "proxy"]
    primary = state.get("primary")
    proxies.sort(key=lambda n: f"proxy{n.get('index')}" != primary)  # stable: then by index
    for node in proxies:
        if pid_runs(int(node.get("pid") or 0), "aisnode"):
            return f"{scheme}://127.0.0.1:{node['port']}"
    return None
