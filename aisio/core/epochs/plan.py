"""The next epoch, as the training process announces it to readers that outlive an epoch.

A loader's worker processes start once and read every epoch. Before each epoch the training
process :meth:`~EpochPlan.publish` es the epoch's number and, when it continues a saved state,
that state; each reader :meth:`~EpochPlan.read` s it when its epoch starts (the first item it
is asked for, always after the loader's ``iter()``, which comes after the publication). With
worker processes the plan is a small temporary file (written whole, then renamed into place);
in one process it stays in memory.
"""

from __future__ import annotations

import json
import os
import weakref
from pathlib import Path
from typing import Any

from aisio.core.system.tempfiles import owned_temporary, remove_owned


class EpochPlan:
    """What the next epoch reads: its number, and the saved state it resumes (or None).

    Example:
        >>> plan = EpochPlan.temporary()
        >>> plan.publish(3, None)
        >>> plan.read()
        (3, None)
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._epoch = 0
        self._resume: dict[str, Any] | None = None

    @classmethod
    def temporary(cls) -> EpochPlan:
        """Returns a plan backed by a new temporary file, shared with worker processes; the
        file is deleted when this object is garbage collected or the process exits (copies
        pickled into workers never delete it), and, when the process was killed, by the next
        process that makes one (:func:`~aisio.core.system.tempfiles.owned_temporary`)."""
        name = owned_temporary("aisio-plan-", ".json")
        plan = cls(name)
        plan.publish(0, None)
        weakref.finalize(plan, remove_owned, name, os.getpid(), ".new")
        return plan

    def publish(self, epoch: int, resume: dict[str, Any] | None) -> None:
        """Makes ``epoch`` (continuing ``resume`` when it is a state of that epoch) what
        readers read next."""
        self._epoch, self._resume = int(epoch), resume
        if self.path is not None:
            staging = self.path.with_name(self.path.name + ".new")
            staging.write_text(json.dumps({"epoch": self._epoch, "resume": resume}))
            os.replace(staging, self.path)

    def read(self) -> tuple[int, dict[str, Any] | None]:
        """Returns ``(epoch, resume state or None)`` as last published."""
        if self.path is None:
            return self._epoch, self._resume
        plan = json.loads(self.path.read_text())
        return int(plan["epoch"]), plan["resume"]

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "epoch": self._epoch, "resume": self._resume}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = state["path"]
        self._epoch, self._resume = state["epoch"], state["resume"]

    def __repr__(self) -> str:
        return f"EpochPlan({str(self.path) if self.path else 'memory'!r})"

