"""Processes by pid: whether one is still there. The one owner of that check, for the
transport's worker slots, the workers' watch on the training process, the playground's nodes
and the local ETL servers."""

from __future__ import annotations

import os


def pid_alive(pid: int, *, others_count: bool = True) -> bool:
    """Returns whether a process with ``pid`` exists and has not ended: a zombie (ended, not
    yet reaped by its parent) counts as gone, for nothing it did can go on.

    Args:
        pid: the process id (0 or less: no process).
        others_count: whether a process this user may not signal (another user's) counts.

    Example:
        >>> pid_alive(os.getpid()), pid_alive(0)
        (True, False)
    """
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return others_count
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Returns whether ``pid`` is a zombie or dead (``/proc/<pid>/stat``'s state ``Z`` or
    ``X``); False where there is no ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    after = stat.rfind(b")")  # the command's name, in parentheses, may hold anything
    return stat[after + 2:after + 3] in (b"Z", b"X")


def pid_runs(pid: int, program: str) -> bool:
    """Returns whether ``pid`` is alive and its command line names ``program`` (a pid that the
    system handed to another program since counts as gone); False where there is no ``/proc``."""
    if not pid_alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return program.encode() in fh.read()
    except OSError:
        return False


__all__ = ["pid_alive", "pid_runs"]
