"""The client's side of a shaped network: a network namespace of its own, joined to this
machine by a veth pair, with toxiproxy inside it standing in for every AIStore node.

A node of the local cluster listens on ``0.0.0.0:<public port>`` (AIStore listens on any
address when its public port differs from its intra-cluster ports, as the playground's do) and
advertises ``127.0.0.1:<public port>`` to clients. Inside the namespace, ``127.0.0.1`` is the
namespace's own loopback, where toxiproxy listens on each node's public port and forwards to
the node through the veth pair: so the client uses the cluster's own URLs (the proxy's, and
every redirect to a target) and every byte it exchanges with any node crosses toxiproxy (the
delay) and the veth pair (``tc tbf`` on both ends: the bandwidth, shared by all connections as
on a link). The nodes' traffic among themselves (intra-cluster ports) and anything run outside
the namespace (the suite's uploads) stay on the machine's loopback, unshaped.

Needs root (``ip netns``, ``ip link``, ``tc``); ``tc netem`` is not needed (it is missing from
some kernels): the delay is toxiproxy's.
"""

from __future__ import annotations

import ipaddress
import json
import secrets
import shutil
import subprocess
import tempfile
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from benchmarks.net.spec import Network
from benchmarks.net.toxiproxy import Toxiproxy

API_PORT = 8474
"""toxiproxy's API port, inside the namespace (nothing else listens there)."""


class ShapingError(RuntimeError):
    """The namespace could not be made; the message says which command failed."""


def _ip(*args: str) -> None:
    try:
        done = subprocess.run(args, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise ShapingError(f"`{args[0]}` cannot run ({exc}): the shaped network needs root, "
                           "ip and tc") from exc
    if done.returncode != 0:
        raise ShapingError(f"`{' '.join(args)}` failed (exit {done.returncode}): "
                           f"{done.stderr.strip()}; the shaped network needs root, ip and tc")


def node_ports(endpoint: str) -> list[int]:
    """Returns the public ports of every node in the cluster map of ``endpoint``'s proxy."""
    with urllib.request.urlopen(f"{endpoint}/v1/daemon?what=smap", timeout=10) as answer:
        return public_ports(json.load(answer))


def public_ports(smap: dict[str, Any]) -> list[int]:
    """Returns the public ports of the proxies and targets of a cluster map, sorted."""
    ports = set()
    for group in ("pmap", "tmap"):
        for node in (smap.get(group) or {}).values():
            ports.add(int(node["public_net"]["daemon_port"]))
    return sorted(ports)


def _free_subnet() -> ipaddress.IPv4Network:
    """Returns a /30 in 10.231.0.0/16 that no interface of this machine uses."""
    try:
        used = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True,
                              check=False).stdout
    except OSError as exc:
        raise ShapingError(f"`ip` cannot run ({exc}): the shaped network needs root, ip and "
                           "tc") from exc
    for _ in range(64):
        net = ipaddress.IPv4Network(f"10.231.{secrets.randbelow(256)}."
                                    f"{4 * secrets.randbelow(64)}/30")
        if f" {net[1]}/" not in used and f" {net[2]}/" not in used:
            return net
    raise ShapingError("no free /30 in 10.231.0.0/16 for the shaped network's veth pair")


class ShapedNetwork:
    """A network namespace whose processes reach the cluster at ``endpoint`` through
    ``network``'s delay and bandwidth (see the module's doc). A context manager: leaves nothing
    behind (the namespace, the veth pair and toxiproxy go at exit).

    Example:
        >>> net = ShapedNetwork(Network(2, 10**10), "http://127.0.0.1:51080")  # doctest: +SKIP
        >>> with net:  # doctest: +SKIP
        ...     subprocess.run([*net.prefix, "python", "-m", "benchmarks.net.probe", ...])
    """

    def __init__(self, network: Network, endpoint: str) -> None:
        self.network = network
        self.endpoint = endpoint.rstrip("/")
        tag = secrets.token_hex(3)
        self.name = f"aisio-{tag}"
        self.host_dev, self.ns_dev = f"aisvh-{tag}", f"aisvc-{tag}"
        self.prefix = ["ip", "netns", "exec", self.name]
        self.proxy: Toxiproxy | None = None
        self._made: list[str] = []
        self._log_dir = tempfile.mkdtemp(prefix="aisio-net-")

    def __enter__(self) -> ShapedNetwork:
        try:
            self._open()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _open(self) -> None:
        subnet = _free_subnet()
        host_ip, ns_ip = str(subnet[1]), str(subnet[2])
        _ip("ip", "netns", "add", self.name)
        self._made.append("netns")
        _ip("ip", "link", "add", self.host_dev, "type", "veth", "peer", "name", self.ns_dev)
        self._made.append("link")
        _ip("ip", "link", "set", self.ns_dev, "netns", self.name)
        _ip("ip", "addr", "add", f"{host_ip}/30", "dev", self.host_dev)
        _ip("ip", "link", "set", self.host_dev, "up")
        _ip("ip", "-n", self.name, "addr", "add", f"{ns_ip}/30", "dev", self.ns_dev)
        _ip("ip", "-n", self.name, "link", "set", self.ns_dev, "up")
        _ip("ip", "-n", self.name, "link", "set", "lo", "up")
        for prefix, dev in (([], self.host_dev), (self.prefix, self.ns_dev)):
            command = self.network.tbf(dev)
            if command is not None:  # each end limits what it sends: both directions
                _ip(*prefix, *command)
        self.proxy = Toxiproxy(self.prefix, API_PORT, Path(self._log_dir) / "toxiproxy.log")
        self.proxy.start()
        for port in node_ports(self.endpoint):
            self.proxy.proxy(f"node-{port}", f"127.0.0.1:{port}", f"{host_ip}:{port}",
                             self.network.toxics())

    def close(self) -> None:
        """Stops toxiproxy and removes the namespace and the veth pair (idempotent)."""
        if self.proxy is not None:
            self.proxy.stop()
            self.proxy = None
        if "netns" in self._made:  # deleting the namespace deletes its end of the pair
            subprocess.run(["ip", "netns", "del", self.name], capture_output=True, check=False)
        if "link" in self._made:
            subprocess.run(["ip", "link", "del", self.host_dev], capture_output=True,
                           check=False)
        self._made.clear()
        shutil.rmtree(self._log_dir, ignore_errors=True)  # (a failure quotes what it said)
