"""The AIStore node binary: built once with ``go install``, cached by version and tags."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from aisio.core.faults.errors import PlaygroundError
from aisio.core.store.config import cache_dir

AISTORE_MODULE = "github.com/NVIDIA/aistore"
AISTORE_VERSION = "v1.5.0"
BUILD_TAGS = ("mono", "dsort")

_NO_GO = (
    "Go is not installed, so aisio cannot build the AIStore node ({module}/cmd/aisnode@{version}); "
    "install Go (https://go.dev/doc/install) or point aisio at a running cluster with "
    "AIS_ENDPOINT=http://host:port"
)

Log = Callable[[str], None]


def stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def node_binary_path(version: str = AISTORE_VERSION, tags: tuple[str, ...] = BUILD_TAGS) -> Path:
    """Returns where the node binary of ``version`` built with ``tags`` is cached."""
    return cache_dir() / "aisnode" / f"{version}-{'-'.join(tags)}" / "bin" / "aisnode"


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def build_node(
    version: str = AISTORE_VERSION, tags: tuple[str, ...] = BUILD_TAGS, log: Log = stderr
) -> Path:
    """Returns the path of the aisnode binary, building it with ``go install`` the first time.

    The module is fetched with ``go mod download`` and the command installed from inside it
    (``go install ./cmd/aisnode``): equivalent to ``go install module/cmd/aisnode@version``, but it
    does not depend on the module proxy's version listing, which some proxies refuse.
    """
    binary = node_binary_path(version, tags)
    if os.access(binary, os.X_OK):
        return binary
    go = shutil.which("go")
    if go is None:
        raise PlaygroundError(_NO_GO.format(module=AISTORE_MODULE, version=version))
    with _file_lock(binary.parent.parent / ".build.lock"):
        if os.access(binary, os.X_OK):  # another process built it while we waited
            return binary
        log(f"aisio: building AIStore node {version} (tags: {' '.join(tags)}); first time only, "
            "a few minutes on 2 cores")
        env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly"}
        download = _run([go, "mod", "download", "-json", f"{AISTORE_MODULE}@{version}"], env=env)
        module_dir = json.loads(download)["Dir"]
        staging = binary.parent.with_name("bin.tmp")
        shutil.rmtree(staging, ignore_errors=True)
        _run(
            [go, "install", "-trimpath", "-tags", ",".join(tags), "./cmd/aisnode"],
            env={**env, "GOBIN": str(staging)},
            cwd=module_dir,
        )
        shutil.rmtree(binary.parent, ignore_errors=True)
        staging.rename(binary.parent)
        log(f"aisio: built {binary}")
    return binary


def _run(cmd: list[str], *, env: dict[str, str], cwd: str | None = None) -> str:
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise PlaygroundError(
            f"`{' '.join(cmd)}` failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}"
        )
    return proc.stdout


def check_xattr(directory: Path) -> None:
    """Raises :class:`PlaygroundError` unless ``directory`` supports user extended attributes."""
    directory.mkdir(parents=True, exist_ok=True)
    probe = directory / ".xattr-probe"
    probe.touch()
    try:
        os.setxattr(probe, "user.aisio", b"1")
    except OSError as exc:
        raise PlaygroundError(
            f"the filesystem of {directory} does not support user extended attributes ({exc}), "
            "which AIStore targets need; choose a directory on ext4 or xfs with --dir"
        ) from exc
    finally:
        probe.unlink(missing_ok=True)
