"""A playground's life: start its nodes (fresh, or again from its directory on the same ports),
know who is primary, kill and restart a node, stop them all, keeping the data unless wiped."""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from aisio.core.faults.errors import PlaygroundError
from aisio.core.store.config import (
    PLAYGROUND_STATE,
    default_playground_dir,
    read_playground_state,
)
from aisio.core.store.etl import local_etls
from aisio.core.system.ports import free_port, port_free
from aisio.core.system.processes import pid_alive, pid_runs
from aisio.playground._build import Log, build_node, check_xattr, stderr
from aisio.playground._config import (
    Node,
    cluster_config,
    flag_names,
    local_config,
    smap_nodes,
    smap_sid,
)
from aisio.playground._rest import Answer, call

READY_TIMEOUT = 90.0
STOP_TIMEOUT = 20.0


def _owner() -> dict[str, Any]:
    """Who starts a playground: written to its state, shown to whoever finds it running."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return {"uid": os.getuid(), "user": user, "cwd": os.getcwd(),
            "started": datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")}


class PlaygroundBase:
    """The lifecycle of a local AIStore cluster; :class:`~aisio.playground.Playground` adds the
    cluster's events (nodes joining and leaving, maintenance, redundancy)."""

    def __init__(
        self,
        root: Path | str | None = None,
        ntargets: int | None = None,
        nproxies: int | None = None,
        *,
        tls: tuple[str, str] | None = None,
        auth_secret: str | None = None,
        client_ca: str | None = None,
        binary: Path | str | None = None,
        mountpaths: int = 1,
        log: Log = stderr,
    ) -> None:
        for what, count in (("ntargets", ntargets), ("nproxies", nproxies),
                            ("mountpaths", mountpaths)):
            if count is not None and count < 1:
                raise PlaygroundError(f"{what}={count} must be at least 1")
        self.root = Path(root) if root is not None else default_playground_dir()
        self.ntargets = ntargets
        self.nproxies = nproxies
        self.tls = tls
        self.auth_secret = auth_secret
        if client_ca is not None and tls is None:
            raise PlaygroundError("client_ca (mutual TLS) needs tls=(cert.pem, key.pem)")
        self.client_ca = client_ca
        self.binary = Path(binary) if binary else None
        self.mountpaths = mountpaths
        self.log = log
        self.nodes: list[Node] = []
        #: who started the running playground (``uid``, ``user``, ``cwd``, ``started``)
        self.owner: dict[str, Any] | None = None
        self._primary = "proxy0"  # the primary when last seen
        self._procs: dict[int, subprocess.Popen[bytes]] = {}  # the nodes this object started
        self._rebalances: list[str] = []  # started by this object, not yet seen to end

    # ---- state -------------------------------------------------------------------------------
    @property
    def state_file(self) -> Path:
        return self.root / PLAYGROUND_STATE

    @property
    def endpoint(self) -> str | None:
        """The first proxy's public URL (what ``aisio playground up`` exports), None before
        the playground has nodes."""
        proxies = self._proxies()
        return proxies[0].url if proxies else None

    def _save_state(self) -> None:
        state = {"endpoint": self.endpoint, "tls": self.tls, "primary": self._primary,
                 "mountpaths": self.mountpaths, "nodes": [n.record() for n in self.nodes],
                 "owner": self.owner or _owner()}
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.state_file)

    def _load_state(self) -> bool:
        state = read_playground_state(self.root)
        if state is None:
            return False
        self.tls = (str(state["tls"][0]), str(state["tls"][1])) if state.get("tls") else None
        self.nodes = [Node.from_record(n) for n in state["nodes"]]
        self._primary = state.get("primary") or "proxy0"
        self.mountpaths = int(state.get("mountpaths") or self.mountpaths)
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

    # ---- nodes -------------------------------------------------------------------------------
    def node(self, name: str) -> Node:
        """Returns the node called ``name`` (``"proxy0"``, ``"target2"``)."""
        if not self.nodes:
            self._load_state()
        for node in self.nodes:
            if node.name == name:
                return node
        raise PlaygroundError(f"the playground in {self.root} has no node {name!r}; its nodes: "
                              f"{', '.join(n.name for n in self.nodes) or 'none'}")

    def _proxies(self) -> list[Node]:
        return [n for n in self.nodes if n.role == "proxy"]

    def _targets(self) -> list[Node]:
        return [n for n in self.nodes if n.role == "target"]

    def running_nodes(self) -> list[Node]:
        """Returns the nodes of this playground whose processes are alive."""
        if not self.nodes:
            self._load_state()
        return [n for n in self.nodes if _is_aisnode(n.pid)]

    @property
    def endpoints(self) -> list[str]:
        """Every proxy's public URL, the primary's first (as last seen)."""
        with contextlib.suppress(PlaygroundError):
            self.smap()  # learns who is primary now
        proxies = sorted(self._proxies(), key=lambda n: n.name != self._primary)
        return [n.url for n in proxies]

    def smap(self) -> dict[str, Any]:
        """Returns the cluster map (``GET /v1/daemon?what=smap``): the newest version that any
        live proxy holds, which is the primary's once the map has spread."""
        best: dict[str, Any] | None = None
        live = [n for n in self._proxies() if _is_alive(n.pid)]
        for node in sorted(live, key=lambda n: n.name != self._primary):
            answer = self._call(node.url + "/v1/daemon?what=smap")
            smap = answer.json() if answer.ok else None
            if isinstance(smap, dict) and int(smap.get("version", 0)) > int(
                    (best or {}).get("version", -1)):
                best = smap
        if best is None:
            raise PlaygroundError(f"no proxy of the playground in {self.root} answers "
                                  f"(`aisio playground status --dir {self.root}`)")
        self._learn(best)
        return best

    def _learn(self, smap: dict[str, Any]) -> None:
        """Takes the daemon ids and the primary from a cluster map."""
        for node in self.nodes:
            sid = smap_sid(smap, node.port)
            if sid:
                node.sid = sid
        primary_sid = (smap.get("proxy_si") or {}).get("daemon_id")
        for node in self._proxies():
            if node.sid and node.sid == primary_sid:
                self._primary = node.name

    def primary(self) -> Node:
        """Returns the node that is primary now (as the newest cluster map says)."""
        self.smap()
        return self.node(self._primary)

    def _primary_url(self) -> str:
        """Returns a live proxy's URL, the primary's when it lives."""
        live = [n for n in self._proxies() if _is_alive(n.pid)]
        if not live:
            raise PlaygroundError(f"no proxy of the playground in {self.root} runs")
        return sorted(live, key=lambda n: n.name != self._primary)[0].url

    def _call(self, url: str, method: str = "GET", body: Any = None,
              timeout: float = 2.0) -> Answer:
        return call(url, method, body, tls=self.tls, secret=self.auth_secret, timeout=timeout)

    def ready(self) -> bool:
        """True when a live proxy (the primary first) reports the cluster ready
        (``/v1/health?prr=true``)."""
        live = [n for n in self._proxies() if n.pid and _is_alive(n.pid)] or self._proxies()[:1]
        for node in sorted(live, key=lambda n: n.name != self._primary):
            if self._call(node.url + "/v1/health?prr=true").status == 200:
                return True
        return False

    def _whole(self) -> bool:
        """True when the cluster is ready, every live node of the playground is in its map and
        every node of the map answers."""
        if not self.ready():
            return False
        try:
            smap = self.smap()
        except PlaygroundError:
            return False
        in_map = {str((info.get("public_net") or {}).get("daemon_port"))
                  for info in smap_nodes(smap).values()}
        if any(str(n.port) not in in_map for n in self.nodes if _is_alive(n.pid)):
            return False
        return all(self._call(info["public_net"]["direct_url"] + "/v1/health").ok
                   for info in smap_nodes(smap).values())

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Returns when every node in the cluster map answers and every live node of the
        playground is in it; raises :class:`PlaygroundError` after ``timeout`` seconds."""
        self._wait(self._whole, timeout, "every node to be in the cluster map and answer")

    # ---- lifecycle ---------------------------------------------------------------------------
    def up(self, timeout: float = READY_TIMEOUT) -> str:
        """Returns the endpoint of a ready cluster: the running one, or its nodes started again
        from this directory (same ports, ids and data), or a new cluster."""
        had_state = self._load_state()
        self._check_owner("use")
        alive = self.running_nodes()
        if had_state and self.nodes and len(alive) == len(self.nodes) and self.ready():
            assert self.endpoint
            self.log(f"aisio: attached to the playground already running at {self.endpoint} "
                     f"({self._started_by()}; data in {self.root})")
            return self.endpoint
        if alive:  # a part runs: stop it, start the whole (the data stays)
            self._stop(alive, STOP_TIMEOUT)
        binary = self.binary or build_node(log=self.log)
        self.root.mkdir(parents=True, exist_ok=True)
        check_xattr(self.root)
        self.owner = _owner()
        resumed = had_state and bool(self.nodes)
        try:
            if resumed:
                self._resume(binary, timeout)
            else:
                self._fresh(binary, timeout)
        except BaseException:
            self._report_logs()
            self._stop(self.running_nodes(), STOP_TIMEOUT)
            if not resumed:
                self.state_file.unlink(missing_ok=True)
            raise
        self._save_state()
        assert self.endpoint
        kept = "started again, data kept" if resumed else "new"
        self.log(f"aisio: AIStore playground ready at {self.endpoint} ({kept}: "
                 f"{len(self._proxies())} prox{'y' if len(self._proxies()) == 1 else 'ies'}, "
                 f"{len(self._targets())} target(s); data in {self.root})")
        return self.endpoint

    def _new_node(self, role: str, index: int, taken: set[int]) -> Node:
        ports: list[int] = []
        while len(ports) < 3:
            port = free_port()
            if port not in taken:
                taken.add(port)
                ports.append(port)
        scheme = "https" if self.tls else "http"
        return Node(role, index, ports[0], control_port=ports[1], data_port=ports[2],
                    scheme=scheme)

    def _fresh(self, binary: Path, timeout: float) -> None:
        taken: set[int] = set()
        proxies = [self._new_node("proxy", i, taken) for i in range(self.nproxies or 1)]
        targets = [self._new_node("target", i, taken) for i in range(self.ntargets or 1)]
        self.nodes = [*proxies, *targets]
        self._primary = proxies[0].name
        bundle = None
        if self.client_ca and self.tls:  # the nodes' own certificate is a client's too
            bundle = self.root / "client-ca.pem"
            bundle.write_text(Path(self.client_ca).read_text() + Path(self.tls[0]).read_text())
        config = cluster_config(proxies[0].url, self.tls, self.auth_secret,
                                str(bundle) if bundle else None)
        (self.root / "cluster.json").write_text(json.dumps(config, indent=2))
        for node in self.nodes:
            # A new node: no persisted config, smap or mountpath metadata of an earlier one.
            shutil.rmtree(self.root / node.name, ignore_errors=True)
            self._write_local(node)
        self._start_all(binary, proxies[0], timeout)

    def _resume(self, binary: Path, timeout: float) -> None:
        """Starts the nodes of the state again, on their ports where they are free."""
        for node in self.nodes:
            self._keep_ports(node)
        primary = next((n for n in self._proxies() if n.name == self._primary), None)
        if primary is None:
            primary = self._proxies()[0]
        self._start_all(binary, primary, timeout)
        asked = {"target": self.ntargets or 0, "proxy": self.nproxies or 0}
        for role, want in asked.items():
            have = len([n for n in self.nodes if n.role == role])
            if want > have:
                self.log(f"aisio: the playground in {self.root} had {have} {role}(s); adding "
                         f"{want - have}")
                for _ in range(want - have):
                    self._add(role, binary, timeout)
            elif want and want < have:
                self.log(f"aisio: the playground in {self.root} keeps its {have} {role}(s) "
                         f"(asked for {want}; `aisio playground down --wipe` starts anew)")

    def _keep_ports(self, node: Node) -> None:
        """Keeps the node's ports, or moves it to free ones (and says so) when one is taken."""
        ports = {"public": node.port, "intra-control": node.control_port,
                 "intra-data": node.data_port}
        busy = [f"{what} port {port}" for what, port in ports.items()
                if not port or not port_free(port)]
        if not busy and (self.root / node.name / "local.json").exists():
            return
        moved = self._new_node(node.role, node.index, {n.port for n in self.nodes})
        self.log(f"aisio: {node.name}'s {', '.join(busy) or 'config'} is taken; it moves to "
                 f"port {moved.port} (intra {moved.control_port}, {moved.data_port})"
                 + ("; a client of the old URL must take the new one (AIS_ENDPOINT)"
                    if node.role == "proxy" else ""))
        node.port, node.control_port, node.data_port = (moved.port, moved.control_port,
                                                        moved.data_port)
        self._write_local(node)

    def _write_local(self, node: Node) -> None:
        home = self.root / node.name
        for sub in ("conf", "log"):
            (home / sub).mkdir(parents=True, exist_ok=True)
        local = local_config(self.root, node, mountpaths=self.mountpaths)
        (home / "local.json").write_text(json.dumps(local, indent=2))

    def _start_all(self, binary: Path, primary: Node, timeout: float) -> None:
        """Starts ``primary`` first, then every other node joining it; waits for the whole."""
        deadline = time.monotonic() + timeout
        self._launch(binary, primary, ntargets=len(self._targets()))
        self._wait(lambda: self._call(primary.url + "/v1/health").status == 200,
                   min(30.0, timeout), f"{primary.name} to answer")
        for node in self.nodes:
            if node is not primary:
                self._launch(binary, node, primary_url=primary.url)
        self._save_state()
        self._wait(self._whole, max(1.0, deadline - time.monotonic()),
                   f"{len(self.nodes)} node(s) to join")

    def _launch(self, binary: Path, node: Node, *, ntargets: int | None = None,
                primary_url: str | None = None) -> None:
        """Starts one node process from the configs already written for it; ``ntargets`` for
        a primary that starts a cluster, ``primary_url`` for a node that joins one."""
        home = self.root / node.name
        # Each node its own copy of the cluster config: a node decommissioned with its data
        # deletes the config file it was started with, which no later node could then read.
        config = home / "cluster.json"
        shutil.copyfile(self.root / "cluster.json", config)  # (as the playground has it now)
        cmd = [str(binary), f"-config={config}",
               f"-local_config={home / 'local.json'}", f"-role={node.role}"]
        if ntargets is not None:
            cmd.append(f"-ntargets={ntargets}")
        env = _node_env()
        if primary_url:  # the first URL a joining node tries, before its persisted map's
            env["AIS_PRIMARY_EP"] = primary_url
        with open(home / "stdout.log", "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        node.pid = proc.pid
        self._procs[proc.pid] = proc

    def _wait(self, check: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            dead = [n.name for n in self.nodes if n.pid in self._procs and not _is_alive(n.pid)]
            if dead:
                raise PlaygroundError(
                    f"AIStore node(s) {', '.join(dead)} exited while waiting for {what}; "
                    f"see the logs under {self.root}"
                )
            time.sleep(0.25)
        raise PlaygroundError(
            f"the playground in {self.root} was not ready after {timeout:.0f} s waiting for "
            f"{what}; see the logs under {self.root}"
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

    def _stop(self, nodes: list[Node], timeout: float) -> None:
        """SIGTERMs ``nodes`` (targets first, the primary proxy last), SIGKILLs those left
        after ``timeout`` seconds."""
        for node in sorted(nodes, key=lambda n: (n.role == "proxy", n.name == self._primary)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(node.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for node in nodes:
            while _is_alive(node.pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _is_alive(node.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(node.pid, signal.SIGKILL)
            proc = self._procs.pop(node.pid, None)
            if proc is not None:
                proc.wait()

    def down(self, *, wipe: bool = False, quiet: bool = False,
             timeout: float = STOP_TIMEOUT) -> None:
        """Stops every node (SIGTERM, then SIGKILL after ``timeout``). The directory keeps the
        buckets, objects, node ids and ports for the next :meth:`up`, unless ``wipe``."""
        if not self.nodes:
            self._load_state()
        self._check_owner("stop")
        endpoint = self.endpoint
        if endpoint:  # the local ETLs that read from this cluster go first
            from aisio.localetl import stop_all

            stopped = stop_all(endpoint)
            if stopped and not quiet:
                self.log(f"aisio: stopped local ETL(s) {', '.join(stopped)}")
        alive = [n for n in self.nodes if _is_aisnode(n.pid)]
        with contextlib.suppress(PlaygroundError):
            if alive:
                self.smap()  # the primary now: the one to start first next time
        self._stop(alive, timeout)
        for proc in self._procs.values():
            proc.wait()
        self._procs.clear()
        if alive and not quiet:
            self.log(f"aisio: stopped {len(alive)} AIStore node(s) at {endpoint}"
                     + ("" if wipe else f" (data kept in {self.root}; `up` starts them again)"))
        if wipe:
            self.state_file.unlink(missing_ok=True)  # a --dir that is no directory: one line
            shutil.rmtree(self.root, ignore_errors=True)
            self.nodes = []
            self.owner = None
            if not quiet:
                self.log(f"aisio: wiped {self.root}")
        elif self.nodes and self.root.is_dir():
            for node in self.nodes:
                node.pid = 0
            self._save_state()

    def status(self) -> dict[str, Any]:
        """Returns the endpoint, readiness and every node's role, primary flag and liveness."""
        if not self._load_state():
            return {"running": False, "root": str(self.root)}
        smap: dict[str, Any] = {}
        if any(_is_aisnode(n.pid) for n in self._proxies()):
            with contextlib.suppress(PlaygroundError):
                smap = self.smap()
        in_map = smap_nodes(smap)
        nodes = [{"name": n.name, "role": n.role, "primary": n.name == self._primary and bool(smap),
                  "alive": _is_aisnode(n.pid), "in_map": n.sid in in_map, "sid": n.sid,
                  "url": n.url, "pid": n.pid, "port": n.port,
                  "flags": flag_names(int((in_map.get(n.sid) or {}).get("flags", 0)))}
                 for n in self.nodes]
        endpoint = self.endpoint
        assert endpoint
        etls = [{"name": e.name, "pid": e.pid, "url": e.url, "source": e.source}
                for e in local_etls(endpoint).values()]
        running = any(n["alive"] for n in nodes)
        return {"running": running, "ready": running and self.ready(), "endpoint": endpoint,
                "endpoints": [n.url for n in sorted(self._proxies(),
                                                    key=lambda n: n.name != self._primary)],
                "cluster": smap.get("uuid"), "smap_version": smap.get("version"),
                "root": str(self.root), "owner": self.owner, "nodes": nodes, "local_etls": etls}

    # ---- a node fails, a node comes back -----------------------------------------------------
    def kill(self, name: str) -> Node:
        """Stops one node abruptly (SIGKILL) and returns it, for :meth:`restart`; the cluster
        notices when its keepalive drops the node from the map (a few seconds)."""
        node = self.node(name)
        with contextlib.suppress(ProcessLookupError):
            os.kill(node.pid, signal.SIGKILL)
        proc = self._procs.pop(node.pid, None)
        if proc is not None:
            proc.wait()
        deadline = time.monotonic() + 10.0
        while _is_alive(node.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        return node

    kill_node = kill  # its first name

    def restart(self, name: str, wait: bool = True, timeout: float = READY_TIMEOUT) -> Node:
        """Starts a stopped node again on its old ports, joining the live primary; with
        ``wait``, returns once it serves and the cluster is whole again."""
        node = self.node(name)
        if _is_aisnode(node.pid):
            raise PlaygroundError(f"{name} runs (pid {node.pid}): kill it first")
        others = [n for n in self._proxies() if n is not node and _is_alive(n.pid)]
        binary = self.binary or build_node(log=self.log)
        if others:
            self._launch(binary, node, primary_url=self._primary_url())
        else:  # no other proxy: a proxy restarts as the primary of its map
            self._launch(binary, node, ntargets=len(self._targets()) if node.role == "proxy"
                         else None)
        self._save_state()
        if wait:
            # The proxy may still count a killed target in and call the cluster ready: ask the
            # node itself first.
            deadline = time.monotonic() + timeout
            self._wait(lambda: self._call(node.url + "/v1/health?prr=true").status == 200,
                       timeout, f"{name} to serve")
            self._wait(self._whole, max(1.0, deadline - time.monotonic()), f"{name} to rejoin")
            self._save_state()
        return node

    def __enter__(self) -> PlaygroundBase:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down(wipe=True, quiet=True)

    def _add(self, role: str, binary: Path, timeout: float) -> Node:
        """Starts a new node of ``role`` that joins the running cluster; returns it once it is
        in the cluster map and answers."""
        used = [n.index for n in self.nodes if n.role == role]
        used += [int(p.name[len(role):]) for p in self.root.glob(f"{role}*")
                 if p.name[len(role):].isdigit()]  # a decommissioned node's directory stays
        node = self._new_node(role, max(used, default=-1) + 1, {n.port for n in self.nodes})
        self.nodes.append(node)
        self._write_local(node)
        self._launch(binary, node, primary_url=self._primary_url())
        self._save_state()
        self._wait(lambda: self._whole() and bool(node.sid), timeout, f"{node.name} to join")
        self._save_state()
        return node


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
    return _is_alive(pid) and pid_runs(pid, "aisnode")
