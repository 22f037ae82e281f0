"""Tests for aisio.core.system.processes: which processes count as alive."""

from __future__ import annotations

import os
import sys
import time

import pytest

from aisio.core.system.processes import pid_alive


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")
def test_a_zombie_is_not_alive() -> None:
    """An ended child not yet reaped (a zombie) is gone: a worker that watches its training
    process by pid must end when that process has ended, even before its launcher reaps it
    (a launcher that reads the worker's pipes first would otherwise wait for ever)."""
    child = os.fork()
    if child == 0:  # the child ends at once
        os._exit(0)
    try:
        for _ in range(10_000):  # until the kernel shows it ended (bounded)
            with open(f"/proc/{child}/stat", "rb") as fh:
                if fh.read().rsplit(b")", 1)[1][1:2] == b"Z":
                    break
            time.sleep(0.001)
        else:
            pytest.fail("the child never ended")
        assert not pid_alive(child)
    finally:
        os.waitpid(child, 0)
    assert not pid_alive(child)  # reaped: no such process
    assert pid_alive(os.getpid())
