"""Temporary files a process shares with its workers, named for their owner so that a killed
owner's files do not accumulate: the one owner of that naming.

A file is ``{prefix}{owner pid}-{random}{suffix}`` in the temporary directory. Its owner
deletes it when done (a finalizer), but a process killed with SIGKILL runs none: each new file
first sweeps the files of its prefix whose owner is gone (and, of the unnamed kind older
versions made, ``{prefix}{random}{suffix}``, those a day old).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import time
from pathlib import Path

from aisio.core.system.processes import pid_alive

#: How old a file without an owner in its name must be before a sweep removes it (seconds).
UNOWNED_AGE = 24 * 3600


def owned_temporary(prefix: str, suffix: str, *, directory: str | None = None) -> str:
    """Creates an empty temporary file owned by this process and returns its path, after
    removing the files of ``prefix`` that dead owners left (see the module doc).

    Example:
        >>> path = owned_temporary("aisio-example-", ".json")
        >>> Path(path).name.startswith(f"aisio-example-{os.getpid()}-")
        True
        >>> os.unlink(path)
    """
    where = directory if directory is not None else tempfile.gettempdir()
    sweep(prefix, where)
    fd, name = tempfile.mkstemp(prefix=f"{prefix}{os.getpid()}-", suffix=suffix, dir=where)
    os.close(fd)
    return name


def sweep(prefix: str, directory: str, *, now: float | None = None) -> list[str]:
    """Removes the files of ``prefix`` in ``directory`` whose owner process is gone (and
    unnamed ones older than :data:`UNOWNED_AGE`); returns their names. Files another user
    owns, or that vanish meanwhile, are left alone."""
    owned = re.compile(re.escape(prefix) + r"(\d+)-")
    now = time.time() if now is None else now
    removed = []
    for path in Path(directory).glob(f"{glob_escape(prefix)}*"):
        match = owned.match(path.name)
        try:
            if match is not None:
                if pid_alive(int(match.group(1))):
                    continue
            elif now - path.stat().st_mtime < UNOWNED_AGE:
                continue
            path.unlink()
        except OSError:
            continue
        removed.append(path.name)
    return removed


def glob_escape(text: str) -> str:
    """Returns ``text`` with glob's special characters taken literally."""
    return re.sub(r"([*?\[])", r"[\1]", text)


def remove_owned(path: str, owner: int, *extra_suffixes: str) -> None:
    """Deletes ``path`` (and ``path + suffix`` for each extra suffix) when called in process
    ``owner``: not in a forked worker that inherited the finalizer calling it."""
    if os.getpid() != owner:
        return
    for name in (path, *(path + suffix for suffix in extra_suffixes)):
        with contextlib.suppress(OSError):
            os.unlink(name)


__all__ = ["UNOWNED_AGE", "glob_escape", "owned_temporary", "remove_owned", "sweep"]
