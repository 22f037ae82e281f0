"""toxiproxy (github.com/Shopify/toxiproxy/v2): built once into the cache, started, told what
to proxy and how much delay to add.

The server is built from its Go module at run time, as the playground builds the AIStore node:
``go mod download`` of the pinned version, then ``go install ./cmd/server`` from inside the
module into ``$AISIO_CACHE_DIR/toxiproxy/<version>/bin``, once; every later run reuses the binary.
Nothing of toxiproxy is kept in the repository. Its HTTP API (``/proxies``, ``/proxies/<name>
/toxics``) is driven with the standard library.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aisio.core.store.config import cache_dir

MODULE = "github.com/Shopify/toxiproxy/v2"
VERSION = "v2.5.0"


class ToxiproxyError(RuntimeError):
    """toxiproxy could not be built, started or configured; the message says why."""


def binary_path(version: str = VERSION) -> Path:
    """Returns where toxiproxy's server of ``version`` is cached."""
    return cache_dir() / "toxiproxy" / version / "bin" / "toxiproxy-server"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _go(args: list[str], env: dict[str, str], cwd: str | None = None) -> str:
    done = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ToxiproxyError(f"`{' '.join(args)}` failed (exit {done.returncode}): "
                             f"{done.stderr.strip()[-2000:]}")
    return done.stdout


def build(version: str = VERSION) -> Path:
    """Returns the path of toxiproxy's server, building it with ``go install`` the first time."""
    binary = binary_path(version)
    if os.access(binary, os.X_OK):
        return binary
    go = shutil.which("go")
    if go is None:
        raise ToxiproxyError(f"the shaped network needs toxiproxy, built from {MODULE}@{version} "
                             "with Go: install Go (https://go.dev/dl/) or run with --network none")
    with _locked(binary.parent.parent / ".build.lock"):
        if os.access(binary, os.X_OK):
            return binary
        print(f"aisio: building toxiproxy {version} (first time only)", file=sys.stderr)
        env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly"}
        module_dir = json.loads(_go([go, "mod", "download", "-json", f"{MODULE}@{version}"],
                                    env))["Dir"]
        staging = binary.parent.with_name("bin.tmp")
        shutil.rmtree(staging, ignore_errors=True)
        _go([go, "install", "-trimpath", "./cmd/server"], {**env, "GOBIN": str(staging)},
            cwd=module_dir)
        (staging / "server").rename(staging / binary.name)
        shutil.rmtree(binary.parent, ignore_errors=True)
        staging.rename(binary.parent)
    return binary


class Toxiproxy:
    """A running toxiproxy server, driven through its API at ``127.0.0.1:<api_port>``.

    Args:
        prefix: the command to start it under (``["ip", "netns", "exec", name]``), so that it
            listens in that network namespace.
        api_port: its API's port, in that namespace.
        log: where its output goes.
    """

    def __init__(self, prefix: list[str], api_port: int, log: Path) -> None:
        self.prefix = prefix
        self.api_port = api_port
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20.0) -> None:
        binary = build()
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [*self.prefix, str(binary), "-host", "127.0.0.1", "-port", str(self.api_port)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._call("GET", "/version")
                return
            except (OSError, ToxiproxyError):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    try:
                        said = self.log.read_text(errors="replace").strip()[-800:]
                    except OSError:
                        said = ""
                    raise ToxiproxyError(f"toxiproxy did not answer on its API port "
                                         f"{self.api_port}; it said: {said or 'nothing'}"
                                         ) from None
                time.sleep(0.1)

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        # The API listens inside the namespace: asked from a Python started inside it.
        code = ("import sys,urllib.request;"
                "r=urllib.request.Request(sys.argv[1],data=sys.argv[3].encode() or None,"
                "method=sys.argv[2],headers={'Content-Type':'application/json'});"
                "print(urllib.request.urlopen(r,timeout=5).read().decode())")
        url = f"http://127.0.0.1:{self.api_port}{path}"
        data = json.dumps(body) if body is not None else ""
        done = subprocess.run([*self.prefix, sys.executable, "-c", code, url, method, data],
                              capture_output=True, text=True, check=False, timeout=30)
        if done.returncode != 0:
            raise ToxiproxyError(f"toxiproxy {method} {path}: {done.stderr.strip()[-500:]}")
        try:
            return json.loads(done.stdout)
        except ValueError:  # /version answers plain text
            return done.stdout.strip()

    def proxy(self, name: str, listen: str, upstream: str, toxics: list[dict[str, Any]]) -> None:
        """Listens on ``listen`` and forwards to ``upstream`` with ``toxics`` on the way."""
        self._call("POST", "/proxies", {"name": name, "listen": listen, "upstream": upstream,
                                        "enabled": True})
        for toxic in toxics:
            self._call("POST", f"/proxies/{name}/toxics", toxic)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


__all__ = ["MODULE", "VERSION", "Toxiproxy", "ToxiproxyError", "binary_path", "build"]
