"""What a playground writes before it starts a node: the shared cluster config, each node's local
config, and its state file's records of the nodes. Pure: no process, no socket."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

#: How fast the cluster notices a dead node. A playground is one machine's loopback, where a dead
#: node's port refuses at once, so it probes each node every 4 s and drops one after the probe
#: and one retry 2 s later fail: a SIGKILLed target leaves the map within about 10 s. AIStore's
#: defaults, which a real cluster keeps (its nodes talk over a network that may stall for
#: seconds, and dropping a live node starts a rebalance), probe every 10 s and retry 3 times,
#: each after min(cplane_operation x retry_factor 4, max_keepalive + 1 s): ~25-30 s. Its rules:
#: interval in [1 s, 1 min] and >= timeout.max_keepalive, which is >= 2 x cplane_operation.
KEEPALIVE: dict[str, Any] = {
    "proxy": {"name": "heartbeat", "interval": "4s", "factor": 3},  # the primary probes nodes
    "target": {"name": "heartbeat", "interval": "4s", "factor": 3},  # nodes probe the primary
    "num_retries": 1,  # AIStore's default: 3
    "retry_factor": 1,  # a retry after cplane_operation x 1 (default 4, capped at 5 s)
}


@dataclass
class Node:
    """One aisnode process of a playground.

    ``port`` is its public port (clients and ``url``), ``control_port`` and ``data_port`` its
    intra-cluster ones; ``sid`` is the daemon id AIStore gave it (from the cluster map, once it
    joined); ``pid`` the process last started (0: never).
    """

    role: str
    index: int
    port: int
    pid: int = 0
    control_port: int = 0
    data_port: int = 0
    sid: str = ""
    scheme: str = "http"

    @property
    def name(self) -> str:
        return f"{self.role}{self.index}"

    @property
    def url(self) -> str:
        """The node's public URL (a proxy's is an endpoint for clients)."""
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def record(self) -> dict[str, Any]:
        """Returns the node as its line of the state file."""
        return asdict(self)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Node:
        """Returns the node a state file's line describes (unknown keys ignored)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in record.items() if k in known})


def cluster_config(primary_url: str, tls: tuple[str, str] | None,
                   auth_secret: str | None = None, client_ca: str | None = None
                   ) -> dict[str, Any]:
    """Returns the cluster configuration shared by every node of a playground.

    ``client_ca``: a PEM bundle; clients must then present a certificate it verifies (mTLS).
    A node copies it into its confdir (``.ais.conf``) when it first starts, and that copy wins
    afterwards: a playground's config is the one it was created with.
    """
    auth: dict[str, Any] = {}
    if auth_secret:  # clients must send a JWT signed (HS256) with this secret
        auth = {"signature": {"key": auth_secret, "method": "HMAC"}, "client_auth_required": True}
    return {
        "backend": {},
        "auth": auth,
        "timeout": {
            "cplane_operation": "2s",
            "max_keepalive": "4s",
            "cold_get_conflict": "5s",
            "max_host_busy": "20s",
            "startup_time": "30s",
            "join_startup_time": "3m",
            "send_file_time": "5m",
            "ec_streams_time": "10m",
            "object_md": "2h",
        },
        "keepalivetracker": KEEPALIVE,
        "proxy": {"primary_url": primary_url, "original_url": primary_url, "discovery_url": ""},
        # The playground shares the machine's disk: let it fill before PUTs are refused.
        "space": {"cleanupwm": 85, "lowwm": 90, "highwm": 96, "out_of_space": 99},
        "net": {
            "l4": {"proto": "tcp", "sndrcv_buf_size": 131072},
            "http": {
                "use_https": tls is not None,
                "server_crt": tls[0] if tls else "",
                "server_key": tls[1] if tls else "",
                "skip_verify": tls is not None,  # nodes talk to each other over a self-signed cert
                # tls.RequireAndVerifyClientCert (4) when client certificates are required
                "client_ca_tls": client_ca or "",
                "client_auth_tls": 4 if client_ca else 0,
                "chunked_transfer": True,
                "idle_conns_per_host": 32,
                "idle_conns": 256,
            },
        },
        "versioning": {"enabled": True, "validate_warm_get": False},
        "distributed_sort": {  # required when the node is built with the dsort tag
            "duplicated_records": "ignore",
            "missing_shards": "ignore",
            "ekm_malformed_line": "abort",
            "ekm_missing_key": "abort",
            "default_max_mem_usage": "80%",
            "call_timeout": "10m",
            "dsorter_mem_threshold": "100GB",
            "compression": "never",
            "bundle_multiplier": 4,
        },
    }


def local_config(root: Path, node: Node, control_port: int | None = None,
                 data_port: int | None = None, mountpaths: int = 1) -> dict[str, Any]:
    """Returns one node's local configuration (ports, confdir, mountpaths)."""
    home = root / node.name
    return {
        "confdir": str(home / "conf"),
        "log_dir": str(home / "log"),
        "host_net": {
            "hostname": "127.0.0.1",
            "hostname_intra_control": "127.0.0.1",
            "hostname_intra_data": "127.0.0.1",
            "port": str(node.port),
            "port_intra_control": str(control_port or node.control_port),
            "port_intra_data": str(data_port or node.data_port),
        },
        "fspaths": {},
        "test_fspaths": {
            "root": str(home / "mpaths"),
            "count": mountpaths if node.role == "target" else 0,
            "instance": node.index,
        },
    }


def smap_nodes(smap: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Returns every node of a cluster map (``GET /v1/daemon?what=smap``) by daemon id."""
    return {**(smap.get("pmap") or {}), **(smap.get("tmap") or {})}


def smap_sid(smap: dict[str, Any], port: int) -> str | None:
    """Returns the daemon id of the node whose public port is ``port`` in ``smap``, or None."""
    for sid, info in smap_nodes(smap).items():
        if str((info.get("public_net") or {}).get("daemon_port")) == str(port):
            return str(sid)
    return None


#: the ``flags`` bits of a node in the cluster map (AIStore's ``meta.Snode*``)
FLAGS = {1: "non-electable", 2: "ic", 4: "maintenance", 8: "decommission",
         16: "maintenance-post-rebalance"}


def flag_names(flags: int) -> list[str]:
    """Returns the names of the bits set in a cluster map node's ``flags``."""
    return [name for bit, name in FLAGS.items() if flags & bit]
