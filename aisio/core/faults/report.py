"""Where skipped shards are written down, so that a user can read at the end of an epoch what
was left out and why (shard, byte offset, member, reason)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any

from aisio.core.faults.errors import skipped_reason


class ErrorReport:
    """Records of what ``on_error="skip"``/``"warn"`` left out; readable from any process.

    With a ``path``, each record is appended to a JSON-lines file in one ``write`` (atomic for
    lines this short with ``O_APPEND``), so DataLoader2 workers in other processes add to the same
    report the training loop reads. Without one, records stay in this process's memory.

    Example:
        >>> from aisio import AISIOError
        >>> report = ErrorReport.temporary()
        >>> _ = report.record(AISIOError("bad", url="ais://b/s.tar"))
        >>> [r["shard"] for r in report.records()]
        ['ais://b/s.tar']
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._memory: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    @classmethod
    def temporary(cls, name: str | None = None) -> ErrorReport:
        """Returns a report backed by a temporary file (shared with worker processes): ``name``,
        else a new one, named ``aisio-errors-{pid}-...`` for its owner.

        The file is deleted when this report object is garbage collected, or when the process
        exits, whichever is first; copies pickled into worker processes never delete it. The
        loaders name theirs with :func:`~aisio.core.system.tempfiles.owned_temporary`, which
        also deletes the files of owners that were killed.
        """
        if name is None:
            fd, name = tempfile.mkstemp(prefix=f"aisio-errors-{os.getpid()}-", suffix=".jsonl")
            os.close(fd)
        report = cls(name)
        weakref.finalize(report, _remove, name, os.getpid())
        return report

    def record(self, error: BaseException, *, shard: str | None = None,
               samples: int | None = None) -> dict[str, Any]:
        """Writes down one skipped shard (or the rest of one) and returns the record.

        Args:
            error: why; its ``offset`` and ``member`` (if any) say where in the shard.
            shard: the shard's name (default: the error's ``url``).
            samples: how many of the shard's samples were yielded before it was skipped.

        The record also names, in ``given_up``, the key of the sample the fault interrupted
        (not yielded: files of it may lie past the fault), if any.
        """
        entry = {
            "shard": shard or getattr(error, "url", None),
            "offset": getattr(error, "offset", None),
            "member": getattr(error, "member", None),
            "samples": samples,
            "given_up": getattr(error, "given_up", None),
            "error": type(error).__name__,
            "reason": skipped_reason(error),  # without the advice to skip: it was taken
        }
        if self.path is None:
            with self._lock:
                self._memory.append(entry)
        else:
            line = (json.dumps(entry) + "\n").encode()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        return entry

    def records(self) -> list[dict[str, Any]]:
        """Returns every record so far, from all processes when file-backed."""
        if self.path is None:
            with self._lock:
                return list(self._memory)
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def clear(self) -> None:
        """Forgets every record (e.g. at the start of an epoch)."""
        with self._lock:
            self._memory.clear()
        if self.path is not None:
            self.path.write_text("")

    def __len__(self) -> int:
        return len(self.records())

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "memory": self.records() if self.path is None else []}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = state["path"]
        self._memory = list(state["memory"])
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        where = str(self.path) if self.path else "memory"
        return f"ErrorReport({where!r}, {len(self)} record(s))"


def _remove(path: str, owner: int) -> None:
    if os.getpid() == owner:  # not in a forked worker that inherited the finalizer
        with contextlib.suppress(OSError):
            os.unlink(path)
