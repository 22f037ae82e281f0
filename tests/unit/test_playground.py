"""One user's playground never belongs to another by accident: its state names who started
it; `up` and `down` refuse another user's running playground, and `up` says when it attaches
to one of the same user's instead of starting one (#29 item 4). The pure parts of a playground
of any shape (#38) that keeps its data (#41): configs, its state, finding the running one."""

from __future__ import annotations

import json
import logging
import os
import socket
from pathlib import Path

import pytest

from aisio.core.faults.errors import ConfigError, PlaygroundError
from aisio.core.store import config as config_module
from aisio.core.store.config import AISConfig
from aisio.core.system.ports import free_port, port_free
from aisio.playground import Node, Playground, cluster_config, default_playground_dir, local_config
from aisio.playground import _base as pg_module
from aisio.playground._config import flag_names, smap_sid


def running(root: Path, uid: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Leaves the state of a running playground in ``root``, started by ``uid`` (the node
    processes faked: their pids are this test's)."""
    root.mkdir(parents=True, exist_ok=True)
    state = {"endpoint": "http://127.0.0.1:9", "tls": None,
             "nodes": [{"role": "proxy", "index": 0, "port": 9, "pid": os.getpid()}],
             "owner": {"uid": uid, "user": "someone", "cwd": "/their/project",
                       "started": "2026-11-25T10:00:00+00:00"}}
    (root / "state.json").write_text(json.dumps(state))
    monkeypatch.setattr(pg_module, "_is_aisnode", lambda pid: True)
    monkeypatch.setattr(Playground, "ready", lambda self: True)


def test_another_users_running_playground_is_neither_used_nor_stopped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    running(tmp_path, os.getuid() + 1, monkeypatch)
    for action in (lambda p: p.up(), lambda p: p.down()):
        with pytest.raises(PlaygroundError, match=r"another user's \(started by someone at "
                                                  r"2026-11-25T10:00:00\+00:00 from "
                                                  r"/their/project\).*--dir DIR"):
            action(Playground(tmp_path))
    assert (tmp_path / "state.json").exists()


def test_attaching_to_ones_own_running_playground_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    running(tmp_path, os.getuid(), monkeypatch)
    said: list[str] = []
    assert Playground(tmp_path, log=said.append).up() == "http://127.0.0.1:9"
    assert said == [f"aisio: attached to the playground already running at "
                    f"http://127.0.0.1:9 (started by someone at 2026-11-25T10:00:00+00:00 "
                    f"from /their/project; data in {tmp_path})"]


def test_the_default_directory_is_this_users(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AISIO_PLAYGROUND_DIR", raising=False)
    assert default_playground_dir().name == f"playground-{os.getuid()}"


# ---- issue #38: a playground of any shape; issue #41: it keeps its data ----------------------
def duration(text: str) -> float:
    return float(text.removesuffix("s"))


def test_the_keepalive_settings_keep_aistores_rules() -> None:
    """AIStore refuses a config whose keepalive interval is below timeout.max_keepalive (or
    outside [1 s, 1 min]), or whose max_keepalive is below 2 x cplane_operation."""
    config = cluster_config("http://127.0.0.1:9", None)
    timeout, keepalive = config["timeout"], config["keepalivetracker"]
    assert duration(timeout["max_keepalive"]) >= 2 * duration(timeout["cplane_operation"])
    for tracker in ("proxy", "target"):
        interval = duration(keepalive[tracker]["interval"])
        assert 1 <= interval <= 60 and interval >= duration(timeout["max_keepalive"])
        assert interval * keepalive[tracker]["factor"] <= 120
    assert 1 <= keepalive["num_retries"] <= 10 and 1 <= keepalive["retry_factor"] <= 10


def test_local_config_gives_targets_their_mountpaths_and_proxies_none(tmp_path: Path) -> None:
    target = Node("target", 2, 1001, control_port=1002, data_port=1003)
    local = local_config(tmp_path, target, mountpaths=3)
    assert local["host_net"]["port"] == "1001"
    assert (local["host_net"]["port_intra_control"], local["host_net"]["port_intra_data"]) == (
        "1002", "1003")
    assert local["test_fspaths"] == {"root": str(tmp_path / "target2" / "mpaths"), "count": 3,
                                     "instance": 2}
    assert local_config(tmp_path, Node("proxy", 0, 1), 2, 3)["test_fspaths"]["count"] == 0


def test_the_state_round_trips(tmp_path: Path) -> None:
    """What `down` leaves is what `up` (in another process) starts again: the nodes, their
    ports and ids, the primary, the mountpaths."""
    pg = Playground(tmp_path, mountpaths=2)
    pg.nodes = [Node("proxy", 0, 11, 0, 12, 13, "p0sid"), Node("proxy", 1, 21, 7, 22, 23, "p1"),
                Node("target", 0, 31, 8, 32, 33, "t0sid", scheme="http")]
    pg._primary = "proxy1"
    pg._save_state()
    again = Playground(tmp_path)
    assert again._load_state()
    assert again.nodes == pg.nodes and again._primary == "proxy1" and again.mountpaths == 2
    assert again.endpoint == "http://127.0.0.1:11"  # the first proxy's, whoever is primary
    assert [n.url for n in again.nodes] == [f"http://127.0.0.1:{p}" for p in (11, 21, 31)]


def test_a_state_of_the_first_format_loads(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text(json.dumps({
        "endpoint": "http://127.0.0.1:9", "tls": None, "unknown": 1,
        "nodes": [{"role": "proxy", "index": 0, "port": 9, "pid": 5, "new_key": "x"}]}))
    pg = Playground(tmp_path)
    assert pg._load_state()
    assert pg.nodes == [Node("proxy", 0, 9, 5)] and pg.node("proxy0").sid == ""
    with pytest.raises(PlaygroundError, match="no node 'target7'; its nodes: proxy0"):
        pg.node("target7")


def test_down_without_wipe_keeps_the_state_for_the_next_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AISIO_CACHE_DIR", str(tmp_path / "cache"))  # local ETLs' registry
    running(tmp_path, os.getuid(), monkeypatch)
    monkeypatch.setattr(pg_module, "_is_aisnode", lambda pid: False)  # nothing left to stop
    Playground(tmp_path, log=lambda _: None).down()
    state = json.loads((tmp_path / "state.json").read_text())
    assert [(n["port"], n["pid"]) for n in state["nodes"]] == [(9, 0)]
    Playground(tmp_path, log=lambda _: None).down(wipe=True)
    assert not tmp_path.exists()


def test_cluster_map_helpers() -> None:
    smap = {"pmap": {"P1": {"public_net": {"daemon_port": "9"}, "flags": 2}},
            "tmap": {"T1": {"public_net": {"daemon_port": "10"}, "flags": 4 | 16}}}
    assert smap_sid(smap, 10) == "T1" and smap_sid(smap, 9) == "P1" and smap_sid(smap, 1) is None
    assert flag_names(4 | 16) == ["maintenance", "maintenance-post-rebalance"]


def fake_playground(root: Path, pids: dict[str, int], primary: str = "proxy0") -> None:
    root.mkdir(parents=True, exist_ok=True)
    nodes = [{"role": "proxy", "index": i, "port": 9000 + i, "pid": pids.get(f"proxy{i}", 0)}
             for i in range(2)]
    (root / "state.json").write_text(json.dumps({"tls": None, "primary": primary,
                                                 "nodes": nodes}))


def test_the_running_default_playground_is_found_when_ais_endpoint_is_unset(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(config_module, "pid_runs", lambda pid, program: pid > 0)
    monkeypatch.setattr(config_module, "_announced", set())
    monkeypatch.setenv("AISIO_PLAYGROUND_DIR", str(tmp_path / "default"))
    monkeypatch.delenv("AIS_ENDPOINT", raising=False)
    assert AISConfig.from_env().endpoint is None  # none there yet
    fake_playground(tmp_path / "default", {"proxy0": 5, "proxy1": 6}, primary="proxy1")
    with caplog.at_level(logging.WARNING, logger="aisio"):
        assert AISConfig.from_env().endpoint == "http://127.0.0.1:9001"  # the primary
        assert AISConfig.from_env().endpoint == "http://127.0.0.1:9001"
    assert [r.getMessage() for r in caplog.records] == [
        "aisio: using the playground at http://127.0.0.1:9001 (AIS_ENDPOINT is unset)"]  # once
    fake_playground(tmp_path / "default", {"proxy0": 5}, primary="proxy1")  # proxy1 died
    assert AISConfig.from_env().endpoint == "http://127.0.0.1:9000"
    # Explicit wins: an argument, then AIS_ENDPOINT; a mapping given is read alone.
    assert AISConfig.from_env(endpoint="http://h:1").endpoint == "http://h:1"
    assert AISConfig.from_env({}).endpoint is None
    monkeypatch.setenv("AIS_ENDPOINT", "http://elsewhere:8080")
    assert AISConfig.from_env().endpoint == "http://elsewhere:8080"
    monkeypatch.delenv("AIS_ENDPOINT")
    fake_playground(tmp_path / "default", {})  # stopped (down): its state stays, no endpoint
    with pytest.raises(ConfigError, match="no AIStore endpoint"):
        AISConfig.from_env().require_endpoint()


def test_a_node_whose_port_is_taken_moves_and_says_so(tmp_path: Path) -> None:
    """`up` keeps each node's ports when they are free; a node whose port another process
    holds moves to free ones, its local config rewritten, and `up` says what it did."""
    said: list[str] = []
    pg = Playground(tmp_path, log=said.append)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        free = Node("target", 0, free_port(), control_port=free_port(), data_port=free_port())
        proxy = Node("proxy", 0, busy, control_port=free_port(), data_port=free_port())
        pg.nodes = [proxy, free]
        for node in pg.nodes:
            pg._write_local(node)
        before = (free.port, free.control_port, free.data_port)
        pg._keep_ports(free)
        pg._keep_ports(proxy)
    assert (free.port, free.control_port, free.data_port) == before
    assert proxy.port != busy and port_free(proxy.port)
    local = json.loads((tmp_path / "proxy0" / "local.json").read_text())
    assert local["host_net"]["port"] == str(proxy.port)
    assert said == [f"aisio: proxy0's public port {busy} is taken; it moves to port "
                    f"{proxy.port} (intra {proxy.control_port}, {proxy.data_port}); a client "
                    "of the old URL must take the new one (AIS_ENDPOINT)"]
