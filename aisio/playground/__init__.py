"""A real AIStore on loopback, of any shape: build the node once, start proxies and targets, make
the cluster change (kill, restart, add, maintenance, decommission), stop it keeping its data.

The node binary is built from AIStore's Go module with ``go install`` into a cache directory keyed
by version and build tags (``~/.cache/aisio/aisnode/v1.5.0-mono-dsort/bin/aisnode``), and reused.
A playground owns one directory: configs, mountpaths, logs and a ``state.json`` naming the nodes
(ports, pids, daemon ids) and the primary, so that ``aisio playground down`` in another shell
finds them and ``up`` starts the same cluster again, with its buckets, on the same ports.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from aisio.core.store.config import AISConfig, default_playground_dir
from aisio.playground._base import READY_TIMEOUT
from aisio.playground._build import (
    AISTORE_MODULE,
    AISTORE_VERSION,
    BUILD_TAGS,
    build_node,
    check_xattr,
    node_binary_path,
)
from aisio.playground._config import KEEPALIVE, Node, cluster_config, local_config
from aisio.playground._events import Playground


@contextlib.contextmanager
def cluster_endpoint() -> Iterator[str]:
    """Yields ``AIS_ENDPOINT`` if set, else the running default playground's endpoint, else the
    endpoint of a playground started for the block.

    The playground started for the block (one proxy, one target, in a temporary directory) is
    stopped and wiped when the block ends; scripts and examples use this to run anywhere.

    Example:
        >>> with cluster_endpoint() as endpoint:                           # doctest: +SKIP
        ...     print(list(AISFileLister("ais://bucket", url=endpoint)))
    """
    explicit = AISConfig.from_env().endpoint  # AIS_ENDPOINT, else the default playground's
    if explicit:
        yield explicit
        return
    import tempfile

    with Playground(Path(tempfile.mkdtemp(prefix="aisio-"))) as playground:
        assert playground.endpoint
        yield playground.endpoint


__all__ = [
    "AISTORE_MODULE",
    "AISTORE_VERSION",
    "BUILD_TAGS",
    "KEEPALIVE",
    "READY_TIMEOUT",
    "Node",
    "Playground",
    "build_node",
    "check_xattr",
    "cluster_config",
    "cluster_endpoint",
    "default_playground_dir",
    "local_config",
    "node_binary_path",
]
