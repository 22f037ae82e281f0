"""Run an AIStore SDK ETL class, unchanged, as a local process beside a cluster on this machine.

AIStore runs ETLs only on Kubernetes: each target starts the ETL's pod and, in ``hpull`` mode,
sends it ``GET /<bucket>/<object>``; the pod's server (a subclass of the SDK's ``FastAPIServer``,
``FlaskServer`` or ``HTTPMultiThreadedServer`` that overrides ``transform`` or
``transform_stream``) fetches the object from ``AIS_TARGET_URL``, transforms it and answers.

Here the same class is served by the same SDK server code in a process of its own on
``127.0.0.1``, with ``AIS_TARGET_URL`` set to the cluster's ``/v1/objects`` (the proxy redirects
each GET to the target that holds the object). It is registered for the cluster's endpoint
(:mod:`aisio.core.store.etl`), so every aisio read that names the ETL goes to it, and it is stopped
with
:func:`stop`, or with the playground (``aisio playground down``)::

    server = start("examples/etl_resize.py:ResizeShards", "resize", endpoint)
    samples = aisio.AISFileLoader("ais://b/shard-{0..9}.tar", etl="resize").ais_parse_webdataset()
    stop(endpoint, "resize")

The process is started as ``python -m aisio.localetl FILE CLASS PORT``; that entry point imports
the file, instantiates the class with no arguments (as the ETL pod's runtime does), binds it to
``127.0.0.1:PORT`` and calls its ``start()``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from aisio.core.faults.errors import PlaygroundError
from aisio.core.store.config import AISConfig
from aisio.core.store.etl import (
    SERVER_MARKER,
    LocalETL,
    is_loopback,
    local_etls,
    register,
    registry_dir,
    registry_file,
    server_alive,
    unregister,
)
from aisio.core.store.urls import ETL
from aisio.core.system.ports import free_port

START_TIMEOUT = 60.0
_procs: dict[int, subprocess.Popen[bytes]] = {}  # servers this process started (to reap them)


def split_source(source: str) -> tuple[Path, str]:
    """Returns ``(file, class name)`` of ``FILE:CLASS``, checking that the file exists."""
    file, sep, cls = source.rpartition(":")
    if not sep or not file or not cls.isidentifier():
        raise PlaygroundError(f"ETL source {source!r} must be FILE:CLASS, e.g. "
                              "examples/etl_resize.py:ResizeShards")
    path = Path(file).resolve()
    if not path.is_file():
        raise PlaygroundError(f"ETL source file {file} does not exist; give the path of the .py "
                              "file that defines the ETL class")
    return path, cls


def _server_env(endpoint: str, config: AISConfig | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "AIS_"))}
    env["AIS_TARGET_URL"] = f"{endpoint}/v1/objects"
    env["PYTHONUNBUFFERED"] = "1"
    if config is not None:  # the SDK server reads these to reach the cluster
        for name, value in (("AIS_AUTHN_TOKEN", config.token), ("AIS_CLIENT_CA", config.ca_cert),
                            ("AIS_CRT", config.client_cert), ("AIS_CRT_KEY", config.client_key)):
            if value:
                env[name] = value
        if config.skip_verify:
            env["AIS_SKIP_VERIFY_CRT"] = "true"
    return env


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
            return int(resp.status) == 200
    except (OSError, ValueError):
        return False


def start(source: str, name: str, endpoint: str, *, config: AISConfig | None = None,
          replace: bool = False, timeout: float = START_TIMEOUT) -> LocalETL:
    """Returns the registered server of ETL ``name`` after starting ``FILE:CLASS`` for a cluster.

    Args:
        source: ``FILE:CLASS``, a Python file and the SDK ETL class it defines.
        name: the ETL's name, as reads will name it (``etl="name"``).
        endpoint: the cluster on this machine whose objects the ETL reads.
        config: token and TLS settings the server needs to read from the cluster.
        replace: stop a running local ETL of the same name first (else that is an error).
        timeout: seconds to wait for the server's ``/health``.

    Raises:
        PlaygroundError: the endpoint is not on this machine, the name is taken, or the server
            did not come up (the message holds the end of its log).
    """

    ETL(name)  # validates the name
    endpoint = endpoint.rstrip("/")
    if not is_loopback(endpoint):
        raise PlaygroundError(
            f"a local ETL runs only beside a cluster on this machine, not {endpoint}; on an "
            "AIStore on Kubernetes deploy the class with `aisio etl init FILE:CLASS --name "
            f"{name}` (the SDK's Etl.init_class)")
    file, cls = split_source(source)
    running = local_etls(endpoint).get(name)
    if running is not None:
        if not replace:
            raise PlaygroundError(f"local ETL {name!r} already runs for {endpoint} (pid "
                                  f"{running.pid}); stop it first: `aisio etl stop {name}`")
        stop(endpoint, name)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    registry_dir().mkdir(parents=True, exist_ok=True)
    log = registry_file(endpoint).with_name(f"{registry_file(endpoint).stem}-{name}.log")
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", SERVER_MARKER, str(file), cls, str(port)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=_server_env(endpoint, config), start_new_session=True, cwd=file.parent)
    _procs[proc.pid] = proc
    deadline = time.monotonic() + timeout
    while not _healthy(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            _terminate(proc.pid)
            tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-5:])
            what = (f"exited with status {proc.returncode}" if proc.returncode is not None
                    else f"did not answer {url}/health within {timeout:.0f} s")
            raise PlaygroundError(f"local ETL {name!r} ({source}) {what}: {tail} (log: {log})")
        time.sleep(0.1)
    entry = LocalETL(name, url, endpoint, proc.pid, f"{file}:{cls}", str(log))
    register(entry)
    return entry


def _terminate(pid: int, timeout: float = 10.0) -> None:
    """Stops a server process: SIGTERM (the SDK servers shut down on it), SIGKILL after timeout."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    proc = _procs.pop(pid, None)
    while (proc.poll() is None if proc is not None else server_alive(pid)):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            if proc is not None:
                proc.wait()
            break
        time.sleep(0.05)


def stop(endpoint: str, name: str) -> bool:
    """Stops the local ETL ``name`` of a cluster; returns False when none was running."""
    endpoint = endpoint.rstrip("/")
    entry = local_etls(endpoint).get(name)
    if entry is not None:
        _terminate(entry.pid)
    unregister(endpoint, name)
    return entry is not None


def stop_all(endpoint: str) -> list[str]:
    """Stops every local ETL of a cluster and deletes their logs (the playground calls it on
    ``down``); returns their names."""
    endpoint = endpoint.rstrip("/")
    names = sorted(local_etls(endpoint))
    for name in names:
        stop(endpoint, name)
    registry = registry_file(endpoint)
    for leftover in [registry, registry.with_suffix(".lock"), *registry.parent.glob(
            f"{registry.stem}-*.log")]:
        leftover.unlink(missing_ok=True)
    return names


@contextlib.contextmanager
def running(source: str, name: str, endpoint: str, *, config: AISConfig | None = None,
            replace: bool = False) -> Iterator[LocalETL]:
    """Yields the server of a local ETL started for the block, and stops it after.

    Example:
        >>> with running("etl_resize.py:ResizeShards", "resize", endpoint):  # doctest: +SKIP
        ...     loader = aisio.webdataset_loader("ais://b/s-{0..9}.tar", etl="resize", ...)
    """
    entry = start(source, name, endpoint, config=config, replace=replace)
    try:
        yield entry
    finally:
        stop(endpoint, name)


def _serve(file: str, cls_name: str, port: int) -> None:
    """The server process: import FILE, build CLASS as the ETL pod does, serve on 127.0.0.1."""
    path = Path(file)
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    try:
        spec.loader.exec_module(module)
    except ModuleNotFoundError as exc:
        raise SystemExit(f"aisio: {file} needs the module {exc.name!r}, not installed here: "
                         "FastAPIServer needs `pip install fastapi uvicorn httpx aiofiles`, "
                         "FlaskServer `pip install flask`; HTTPMultiThreadedServer needs "
                         "nothing more") from exc
    cls = getattr(module, cls_name, None)
    from aistore.sdk.etl.webserver.base_etl_server import ETLServer

    if not (isinstance(cls, type) and issubclass(cls, ETLServer)):
        raise SystemExit(f"aisio: {file} has no class {cls_name} that extends the AIStore SDK's "
                         "ETLServer (FastAPIServer, FlaskServer or HTTPMultiThreadedServer)")
    server = cls()
    server.host, server.port = "127.0.0.1", port
    server.start()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit("usage: python -m aisio.localetl FILE CLASS PORT")
    _serve(sys.argv[1], sys.argv[2], int(sys.argv[3]))
