"""Ports on loopback: the one owner of picking a free one (the playground's nodes, local ETLs)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """Returns a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
