"""What the benchmark ran on: CPU, cores, memory, package versions and the AIStore version."""

from __future__ import annotations

import os
import platform
from importlib import metadata
from typing import Any

import requests


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_info() -> dict[str, Any]:
    """Returns the CPU model, core count, RAM (GiB), OS and the versions that matter."""
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "ram_gb": os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / (1 << 30),
        "os": platform.platform(terse=True),
        "python": platform.python_version(),
        **{key: _version(pkg) for key, pkg in (("torch", "torch"), ("torchdata", "torchdata"),
                                               ("aistore_sdk", "aistore"),
                                               ("webdataset", "webdataset"),
                                               ("requests", "requests"))},
    }


def aistore_version(endpoint: str) -> str:
    """Returns the AIStore version the proxy at ``endpoint`` reports (``node_status``)."""
    try:
        resp = requests.get(f"{endpoint}/v1/daemon", params={"what": "node_status"}, timeout=5)
        resp.raise_for_status()
        return str(resp.json().get("ais_version") or "unknown").rstrip(".")
    except (requests.RequestException, ValueError):
        return "unknown"


__all__ = ["aistore_version", "machine_info"]
