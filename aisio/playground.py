"""A real AIStore on loopback: build the node once, start one proxy and N targets, stop them.

The node binary is built from AIStore's Go module with ``go install`` into a cache directory keyed
by version and build tags (``~/.cache/aisio/aisnode/v1.5.0-mono-dsort/bin/aisnode``), and reused.
A playground owns one directory: configs, mountpaths, logs and a ``state.json`` naming the
endpoint and the node processes, so that ``aisio playground down`` in another shell finds them.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from aisio.core.faults.errors import PlaygroundError
from aisio.core.store.config import cache_dir
from aisio.core.store.etl import local_etls
from aisio.core.system.ports import free_port
from aisio.core.system.processes import pid_alive

AISTORE_MODULE = "github.com/NVIDIA/aistore"
AISTORE_VERSION = "v1.5.0"
BUILD_TAGS = ("mono", "dsort")
READY_TIMEOUT = 90.0

_NO_GO = (
    "Go is not installed, so aisio cannot build the AIStore node ({module}/cmd/aisnode@{version}); "
    "install Go (https://go.dev/doc/install) or point aisio at a running cluster with "
    "AIS_ENDPOINT=http://host:port"
)

Log = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def default_playground_dir() -> Path:
    """Returns the directory of the default playground: ``$AISIO_PLAYGROUND_DIR``, or this
    user's own under the cache (named by uid, so a cache shared between users shares no
    playground)."""
    explicit = os.environ.get("AISIO_PLAYGROUND_DIR")
    return Path(explicit) if explicit else cache_dir() / f"playground-{os.getuid()}"


def _owner() -> dict[str, Any]:
    """Who starts a playground: written to its state, shown to whoever finds it running."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return {"uid": os.getuid(), "user": user, "cwd": os.getcwd(),
            "started": datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")}


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
    version: str = AISTORE_VERSION, tags: tuple[str, ...] = BUILD_TAGS, log: Log = _stderr
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


@dataclass
class Node:
    """One aisnode process of a playground."""

    role: str
    index: int
    port: int
    pid: int = 0

    @property
    def name(self) -> str:
        return f"{self.role}{self.index}"


def cluster_config(primary_url: str, tls: tuple[str, str] | None,
                   auth_secret: str | None = None, client_ca: str | None = None
                   ) -> dict[str, Any]:
    """Returns the cluster configuration shared by every node of a playground.

    ``client_ca``: a PEM bundle; clients must then present a certificate it verifies (mTLS).
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


def local_config(root: Path, node: Node, control_port: int, data_port: int) -> dict[str, Any]:
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
            "port_intra_control": str(control_port),
            "port_intra_data": str(data_port),
        },
        "fspaths": {},
        "test_fspaths": {
            "root": str(home / "mpaths"),
            "count": 1 if node.role == "target" else 0,
            "instance": node.index,
        },
    }


class Playground:
    """A local AIStore cluster (one proxy, ``ntargets`` targets) on 127.0.0.1.

    Args:
        root: the directory the playground owns (configs, data, logs, ``state.json``).
        ntargets: how many storage targets to start.
        tls: ``(cert.pem, key.pem)`` to serve HTTPS instead of HTTP.
        auth_secret: require AuthN tokens (HS256 JWTs signed with this secret) from clients.
        client_ca: with ``tls``, require client certificates (mutual TLS) verified by this CA
            (PEM). The nodes present ``tls``'s certificate to each other and to the
            playground's own checks, so it is trusted as a client too.
        binary: an aisnode binary to use instead of building one.

    Example:
        >>> with Playground(tmp_dir) as pg:           # doctest: +SKIP
        ...     print(pg.endpoint)
        http://127.0.0.1:40123
    """

    def __init__(
        self,
        root: Path | str | None = None,
        ntargets: int = 1,
        *,
        tls: tuple[str, str] | None = None,
        auth_secret: str | None = None,
        client_ca: str | None = None,
        binary: Path | str | None = None,
        log: Log = _stderr,
    ) -> None:
        if ntargets < 1:
            raise PlaygroundError(f"ntargets={ntargets} must be at least 1")
        self.root = Path(root) if root is not None else default_playground_dir()
        self.ntargets = ntargets
        self.tls = tls
        self.auth_secret = auth_secret
        if client_ca is not None and tls is None:
            raise PlaygroundError("client_ca (mutual TLS) needs tls=(cert.pem, key.pem)")
        self.client_ca = client_ca
        self.binary = Path(binary) if binary else None
        self.log = log
        self.nodes: list[Node] = []
        self.endpoint: str | None = None
        #: who started the running playground (``uid``, ``user``, ``cwd``, ``started``)
        self.owner: dict[str, Any] | None = None
        self._procs: dict[int, subprocess.Popen[bytes]] = {}  # the nodes this object started

    # ---- state -------------------------------------------------------------------------------
    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    def _save_state(self) -> None:
        nodes = [asdict(n) for n in self.nodes]
        state = {"endpoint": self.endpoint, "tls": self.tls, "nodes": nodes,
                 "owner": self.owner or _owner()}
        self.state_file.write_text(json.dumps(state, indent=2))

    def _load_state(self) -> bool:
        try:
            state = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return False
        self.endpoint = state["endpoint"]
        self.tls = tuple(state["tls"]) if state.get("tls") else None
        self.nodes = [Node(**n) for n in state["nodes"]]
        self.owner = state.get("owner")
        return True

    def _started_by(self) -> str:
        owner = self.owner or {}
        return (f"started by {owner.get('user', '?')} at {owner.get('started', '?')} from "
                f"{owner.get('cwd', '?')}")

    def _check_owner(self, doing: str) -> None:
        """Raises :class:`PlaygroundError` when this playground runs for another user."""
        owner = self.owner or {}
        if owner.get("uid", os.getuid()) != os.getuid() and self.running_nodes():
            raise PlaygroundError(
                f"the playground in {self.root} is another user's ({self._started_by()}); "
                f"aisio will not {doing} it: use a directory of your own with --dir DIR "
                "(or AISIO_PLAYGROUND_DIR)")

    def running_nodes(self) -> list[Node]:
        """Returns the nodes of this playground whose processes are alive."""
        if not self.nodes:
            self._load_state()
        return [n for n in self.nodes if _is_aisnode(n.pid)]

    # ---- lifecycle ---------------------------------------------------------------------------
    def up(self, timeout: float = READY_TIMEOUT) -> str:
        """Returns the endpoint of a ready cluster, starting it unless it already runs."""
        running = self._load_state() and len(self.running_nodes()) == len(self.nodes)
        self._check_owner("use")
        if running and self.endpoint and self.ready():
            self.log(f"aisio: attached to the playground already running at {self.endpoint} "
                     f"({self._started_by()}; data in {self.root})")
            return self.endpoint
        self.down(quiet=True)
        binary = self.binary or build_node(log=self.log)
        self.root.mkdir(parents=True, exist_ok=True)
        check_xattr(self.root)
        scheme = "https" if self.tls else "http"
        proxy = Node("proxy", 0, free_port())
        targets = [Node("target", i, free_port()) for i in range(self.ntargets)]
        self.nodes = [proxy, *targets]
        self.endpoint = f"{scheme}://127.0.0.1:{proxy.port}"
        config_path = self.root / "cluster.json"
        bundle = None
        if self.client_ca and self.tls:  # the nodes' own certificate is a client's too
            bundle = self.root / "client-ca.pem"
            bundle.write_text(Path(self.client_ca).read_text() + Path(self.tls[0]).read_text())
        config = cluster_config(self.endpoint, self.tls, self.auth_secret,
                                str(bundle) if bundle else None)
        config_path.write_text(json.dumps(config, indent=2))
        try:
            self._spawn(binary, proxy)
            self._wait(lambda: self._get("/v1/health") == 200, 30.0, "the proxy to answer")
            for target in targets:
                self._spawn(binary, target)
            self._save_state()
            self._wait(self.ready, timeout, f"{self.ntargets} target(s) to join")
        except BaseException:
            self._report_logs()
            self.down(quiet=True)
            raise
        self.log(f"aisio: AIStore playground ready at {self.endpoint} "
                 f"(1 proxy, {self.ntargets} target(s); data in {self.root})")
        return self.endpoint

    def _spawn(self, binary: Path, node: Node) -> None:
        home = self.root / node.name
        # A fresh cluster each time: a persisted config or old mountpath metadata would win over
        # (or clash with) the new ports and cluster id.
        shutil.rmtree(home, ignore_errors=True)
        for sub in ("conf", "log"):
            (home / sub).mkdir(parents=True, exist_ok=True)
        local = local_config(self.root, node, free_port(), free_port())
        (home / "local.json").write_text(json.dumps(local, indent=2))
        self._launch(binary, node)

    def _launch(self, binary: Path, node: Node) -> None:
        """Starts one node process from the configs already written for it."""
        home = self.root / node.name
        cmd = [str(binary), f"-config={self.root / 'cluster.json'}",
               f"-local_config={home / 'local.json'}", f"-role={node.role}"]
        if node.role == "proxy":
            cmd.append(f"-ntargets={self.ntargets}")
        with open(home / "stdout.log", "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=_node_env(),
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        node.pid = proc.pid
        self._procs[proc.pid] = proc

    def ready(self) -> bool:
        """True when the proxy reports the whole cluster ready (``/v1/health?prr=true``)."""
        return self._get("/v1/health?prr=true") == 200

    def _get(self, path: str, *, port: int | None = None) -> int:
        """Returns the status of GET ``path`` at the endpoint (or at the node on ``port``)."""
        assert self.endpoint
        ctx = None
        if self.endpoint.startswith("https"):
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            if self.tls:  # presented when the nodes require client certificates
                ctx.load_cert_chain(*self.tls)
        base = self.endpoint if port is None else self.endpoint.rsplit(":", 1)[0] + f":{port}"
        try:
            with urllib.request.urlopen(base + path, timeout=2, context=ctx) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except (OSError, ValueError):
            return 0

    def _wait(self, check: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            dead = [n.name for n in self.nodes if n.pid and not _is_alive(n.pid)]
            if dead:
                raise PlaygroundError(
                    f"AIStore node(s) {', '.join(dead)} exited while waiting for {what}; "
                    f"see the logs under {self.root}"
                )
            time.sleep(0.25)
        raise PlaygroundError(
            f"AIStore at {self.endpoint} was not ready after {timeout:.0f} s waiting for {what}; "
            f"see the logs under {self.root}"
        )

    def _report_logs(self, lines: int = 15) -> None:
        for node in self.nodes:
            home = self.root / node.name
            logs = [home / "stdout.log", *sorted((home / "log").glob("*"))]
            for path in logs:
                if path.is_file() and path.stat().st_size:
                    tail = path.read_text(errors="replace").splitlines()[-lines:]
                    self.log(f"--- {node.name}: {path} (last {len(tail)} lines)")
                    for line in tail:
                        self.log(f"    {line}")

    def down(self, *, wipe: bool = False, quiet: bool = False, timeout: float = 20.0) -> None:
        """Stops every node (SIGTERM, then SIGKILL after ``timeout``); ``wipe`` deletes the data."""
        if not self.nodes:
            self._load_state()
        self._check_owner("stop")
        if self.endpoint:  # the local ETLs that read from this cluster go first
            from aisio.localetl import stop_all

            stopped = stop_all(self.endpoint)
            if stopped and not quiet:
                self.log(f"aisio: stopped local ETL(s) {', '.join(stopped)}")
        alive = [n for n in self.nodes if _is_aisnode(n.pid)]
        for node in reversed(alive):  # targets first, the primary proxy last
            with contextlib.suppress(ProcessLookupError):
                os.kill(node.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for node in alive:
            while _is_alive(node.pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _is_alive(node.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(node.pid, signal.SIGKILL)
        for proc in self._procs.values():
            proc.wait()
        self._procs.clear()
        if alive and not quiet:
            self.log(f"aisio: stopped {len(alive)} AIStore node(s) at {self.endpoint}")
        self.state_file.unlink(missing_ok=True)
        self.nodes = []
        self.owner = None
        if wipe:
            shutil.rmtree(self.root, ignore_errors=True)
            if not quiet:
                self.log(f"aisio: wiped {self.root}")

    def status(self) -> dict[str, Any]:
        """Returns the endpoint, readiness and per-node liveness of this playground."""
        if not self._load_state():
            return {"running": False, "root": str(self.root)}
        nodes = [{"name": n.name, "pid": n.pid, "port": n.port, "alive": _is_aisnode(n.pid)}
                 for n in self.nodes]
        assert self.endpoint
        etls = [{"name": e.name, "pid": e.pid, "url": e.url, "source": e.source}
                for e in local_etls(self.endpoint).values()]
        return {"running": any(n["alive"] for n in nodes), "ready": self.ready(),
                "endpoint": self.endpoint, "root": str(self.root), "owner": self.owner,
                "nodes": nodes, "local_etls": etls}

    def kill_node(self, name: str) -> Node:
        """Stops one node abruptly (SIGKILL), for failure tests; returns it for :meth:`restart`."""
        node = next(n for n in self.nodes if n.name == name)
        os.kill(node.pid, signal.SIGKILL)
        proc = self._procs.pop(node.pid, None)
        if proc is not None:
            proc.wait()
        while _is_alive(node.pid):
            time.sleep(0.05)
        return node

    def restart(self, name: str, timeout: float = READY_TIMEOUT) -> None:
        """Starts a stopped node again on its old port and waits for the cluster to be ready."""
        node = next(n for n in self.nodes if n.name == name)
        self._launch(self.binary or build_node(log=self.log), node)
        self._save_state()
        # The proxy may still count a killed target in and call the cluster ready: ask the node.
        deadline = time.monotonic() + timeout
        self._wait(lambda: self._get("/v1/health?prr=true", port=node.port) == 200, timeout,
                   f"{name} to serve")
        self._wait(self.ready, max(1.0, deadline - time.monotonic()), f"{name} to rejoin")

    def __enter__(self) -> Playground:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down(wipe=True, quiet=True)


@contextlib.contextmanager
def cluster_endpoint() -> Iterator[str]:
    """Yields ``AIS_ENDPOINT`` if set, else the endpoint of a playground started for the block.

    The playground (one proxy, one target, in a temporary directory) is stopped and wiped when the
    block ends; scripts and examples use this to run anywhere.

    Example:
        >>> with cluster_endpoint() as endpoint:                           # doctest: +SKIP
        ...     print(list(AISFileLister("ais://bucket", url=endpoint)))
    """
    explicit = os.environ.get("AIS_ENDPOINT")
    if explicit:
        yield explicit
        return
    import tempfile

    with Playground(Path(tempfile.mkdtemp(prefix="aisio-"))) as playground:
        assert playground.endpoint
        yield playground.endpoint


def _node_env() -> dict[str, str]:
    # KUBERNETES_* makes the node try to talk to Kubernetes; AIS_* would reconfigure it.
    return {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "AIS_"))}


def _is_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)  # reap our own children
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    return pid_alive(pid)


def _is_aisnode(pid: int) -> bool:
    if not _is_alive(pid):
        return False
    try:
        return b"aisnode" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
