"""Ports on loopback: the one owner of picking a free one (the playground's nodes, local ETLs)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """Returns a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_free(port: int) -> bool:
    """Returns whether a server could listen on TCP ``port`` of 127.0.0.1 now (as Go's servers
    do: with ``SO_REUSEADDR``, so the closed connections of a stopped server do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
