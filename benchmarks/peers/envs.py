"""The peers' environments: one venv per peer, made on demand from its lock in ``locks/``.

Each lock (``locks/<peer>.txt``, compiled from ``locks/<peer>.in`` by ``benchmarks/peers/lock.sh``)
pins the peer, the torch the project pins (``requirements/td09.txt``) where the peer allows it,
and what the arm needs beside it. The venv lives outside the checkout, in
``$AISIO_CACHE_DIR/peers/<peer>-<hash of lock and Python>`` (``AISIO_CACHE_DIR`` defaults to
``~/.cache/aisio``), and is built with the project's pinned uv and its cache
(``scripts/bootstrap.sh`` installs both), so the torch wheel is hard-linked from the cache rather
than downloaded again. A venv whose lock or Python moved gets a new directory; a finished one is
marked by a stamp file, so a half-made venv is made again.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

LOCKS = Path(__file__).resolve().parent / "locks"
ROOT = Path(__file__).resolve().parents[2]
UV_VERSION = "0.13.9"  # scripts/bootstrap.sh's


def cache_dir() -> Path:
    """Returns ``$AISIO_CACHE_DIR``, else ``$XDG_CACHE_HOME/aisio``, else ``~/.cache/aisio``."""
    explicit = os.environ.get("AISIO_CACHE_DIR")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "aisio"


def env_key(lock: bytes, python_version: str) -> str:
    """Returns the 16 hex digits that name a venv of ``lock`` on ``python_version``."""
    return hashlib.sha256(lock + b"\0" + python_version.encode()).hexdigest()[:16]


def uv_binary() -> Path:
    """Returns the project's pinned uv, installing it with ``scripts/bootstrap.sh`` if missing."""
    uv = cache_dir() / "tools" / f"uv-{UV_VERSION}" / "bin" / "uv"
    if not uv.exists():
        subprocess.run(["bash", str(ROOT / "scripts" / "bootstrap.sh")], check=True, cwd=ROOT)
    return uv


def peer_python(peer: str, log: Callable[[str], object] = print) -> str:
    """Returns the interpreter of ``peer``'s venv, creating the venv first if needed."""
    lock = LOCKS / f"{peer}.txt"
    version = ".".join(map(str, sys.version_info[:3]))
    venv = cache_dir() / "peers" / f"{peer}-{env_key(lock.read_bytes(), version)}"
    python = venv / "bin" / "python"
    stamp = venv / ".aisio-peer-stamp"
    if stamp.exists():
        return str(python)
    log(f"aisio bench: creating the {peer} environment in {venv} from {lock.name}")
    uv = str(uv_binary())
    env = {**os.environ, "UV_CACHE_DIR": str(cache_dir() / "uv"), "UV_LINK_MODE": "hardlink",
           "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1"}
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True, env=env)
    sync = [uv, "pip", "sync", "-q", "--python", str(python), "--require-hashes", str(lock)]
    # From the cache alone when it has every wheel (no index round trip), else from the index.
    if subprocess.run([*sync, "--offline"], env=env, stderr=subprocess.DEVNULL).returncode:
        subprocess.run(sync, check=True, env=env)
    stamp.write_text(f"{lock.name} {version}\n")
    return str(python)


__all__ = ["LOCKS", "cache_dir", "env_key", "peer_python"]

if __name__ == "__main__":  # python -m benchmarks.peers.envs [PEER ...]: make the venvs now
    for name in sys.argv[1:] or sorted(p.stem for p in LOCKS.glob("*.txt")):
        print(peer_python(name))
