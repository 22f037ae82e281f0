"""The suite's hook: run a block inside a shaped network (or on loopback), and say what the
path measured."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.net.netns import ShapedNetwork
from benchmarks.net.spec import Network

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def shaped(network: Network | None, endpoint: str) -> Iterator[list[str]]:
    """Yields the command prefix that starts a process inside ``network`` in front of the
    cluster at ``endpoint`` (``[]`` for None: loopback, nothing made)."""
    if network is None:
        yield []
        return
    with ShapedNetwork(network, endpoint) as net:
        yield net.prefix


def probe_path(prefix: list[str], endpoint: str, uri: str, requests: int = 200
               ) -> dict[str, Any]:
    """Returns what :mod:`benchmarks.net.probe` measures from inside ``prefix``: ``rtt_ms``,
    ``rtt_p90_ms``, ``mbit_s`` of one GET of ``uri`` (or ``error``)."""
    done = subprocess.run([*prefix, sys.executable, "-m", "benchmarks.net.probe", endpoint,
                           "--object", uri, "--requests", str(requests)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-500:]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def describe_probe(probe: dict[str, Any]) -> str:
    """Returns a probe's result in words (``RTT 2.61 ms median (p90 4.07), GET 1,855
    Mbit/s``)."""
    if "error" in probe:
        return f"probe failed: {probe['error']}"
    return (f"RTT {probe['rtt_ms']:.2f} ms median (p90 {probe['rtt_p90_ms']:.2f}) of small "
            f"requests, one GET of {probe.get('probe_bytes', 0) / 2**20:.0f} MiB at "
            f"{probe.get('mbit_s', 0):,.0f} Mbit/s")
