"""Processes by pid: whether one is still there. The one owner of that check, for the
transport's worker slots, the workers' watch on the training process, the playground's nodes
and the local ETL servers."""

from __future__ import annotations

import os


def pid_alive(pid: int, *, others_count: bool = True) -> bool:
    """Returns whether a process with ``pid`` exists.

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
    return True


__all__ = ["pid_alive"]
