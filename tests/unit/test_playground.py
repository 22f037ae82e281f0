"""One user's playground never belongs to another by accident: its state names who started
it; `up` and `down` refuse another user's running playground, and `up` says when it attaches
to one of the same user's instead of starting one (#29 item 4)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from aisio.core.faults.errors import PlaygroundError
from aisio.playground import Playground, default_playground_dir
from aisio.playground import _base as pg_module


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
