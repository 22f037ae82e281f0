"""What ``on_error`` does with an error: the one place that decides it.

:class:`ErrorPolicy` decides per error: ``"raise"`` raises it; ``"skip"``/``"warn"`` record a
missing object or bad data in the :class:`~aisio.ErrorReport` and go on, but never a usage or
cluster error (:func:`~aisio.core.faults.errors.is_skippable`): an outage must not look like an
empty dataset. A stage that skips one sample leaves :data:`SKIPPED` in its place;
:func:`check_epoch` refuses an epoch that every shard was skipped out of.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from aisio.core.faults.errors import AISIOError, EmptyEpochError, is_skippable, skipped_reason
from aisio.core.faults.report import ErrorReport

log = logging.getLogger("aisio")

OnError = Literal["raise", "warn", "skip"]


def check_on_error(on_error: str) -> None:
    """Raises ValueError unless ``on_error`` is ``"raise"``, ``"warn"`` or ``"skip"``."""
    if on_error not in ("raise", "warn", "skip"):
        raise ValueError(f"on_error={on_error!r} must be 'raise', 'warn' or 'skip'")


@dataclass
class ErrorPolicy:
    """What ``on_error`` does with an error met while reading a shard.

    Args:
        on_error: ``"raise"``; or ``"skip"``/``"warn"`` (also warns) a missing object or bad
            data, recorded in ``report``. Usage and cluster errors always raise.
        report: where skipped shards are recorded.
    """

    on_error: OnError = "raise"
    report: ErrorReport = field(default_factory=ErrorReport)

    def __post_init__(self) -> None:
        check_on_error(self.on_error)

    def handle(self, error: AISIOError, shard: str | None, *, samples: int | None = None,
               sample: str | None = None) -> None:
        """Raises ``error``, or records it as skipped and returns: a shard, the rest of one, or
        (with ``sample``) one sample.

        Args:
            error: what went wrong; its ``offset`` (if any) says where reading stopped.
            shard: the shard's name.
            samples: how many samples of the shard were yielded before the error.
            sample: the key of the one sample skipped.
        """
        if self.on_error == "raise" or not is_skippable(error):
            raise error
        self.report.record(error, shard=shard, samples=samples)
        partly = bool(getattr(error, "offset", None)) or bool(samples)
        what = (f"sample {sample!r} of " if sample is not None
                else "the rest of " if partly else "")
        message = f"aisio skipped {what}{shard}: {skipped_reason(error)}"
        if self.on_error == "warn":
            warn_in_user_code(message)
        log.info("%s", message)


def _library_dirs() -> tuple[str, ...]:
    dirs = []
    for name in ("aisio", "torch", "torchdata"):
        path = getattr(sys.modules.get(name), "__file__", None)
        if path:
            dirs.append(os.path.dirname(path) + os.sep)
    return tuple(dirs)


#: Warnings of this worker process on their way to the training loop (see
#: :func:`carrying_warnings`), and how many delivery streams carry them now.
_CARRIED: list[tuple[type[Warning], str]] = []
_CARRYING = 0


@contextlib.contextmanager
def carrying_warnings() -> Iterator[None]:
    """While open in a worker process, :func:`warn_in_user_code` keeps its warnings for
    :func:`carried_warnings` instead of warning there: the stream of deliveries takes them to
    the training process, which warns at the user's loop (in a worker no frame of the user's
    exists: the warning named ``multiprocessing/process.py:108``)."""
    global _CARRYING
    _CARRYING += 1
    try:
        yield
    finally:
        _CARRYING -= 1


def carried_warnings() -> tuple[tuple[type[Warning], str], ...]:
    """Returns (and forgets) the warnings kept since the last call, as ``(category,
    message)``."""
    taken = tuple(_CARRIED)
    del _CARRIED[: len(taken)]
    return taken


def warn_in_user_code(message: str, category: type[Warning] = UserWarning) -> None:
    """Warns, attributing the warning to the first frame outside aisio, torch and torchdata
    (the user's ``for batch in loader:``), not to a DataPipe's iterator hook. In a worker
    process whose deliveries carry warnings (:func:`carrying_warnings`) the warning is kept
    for the training process to give; in a thread, where no frame of the user's exists, it
    names the outermost one."""
    if _CARRYING and multiprocessing.parent_process() is not None:
        _CARRIED.append((category, message))
        return
    library = _library_dirs()
    frame = sys._getframe(1)
    level = 2  # warnings.warn's stacklevel of our caller's frame
    while frame.f_back is not None and frame.f_code.co_filename.startswith(library):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)


def check_epoch(yielded: int, report: ErrorReport | None, *, skipped_before: int = 0) -> None:
    """Raises :class:`EmptyEpochError` when an epoch yielded nothing because every shard was
    skipped: a dataset that is all bad must not look like an empty one.

    Args:
        yielded: how many items the epoch yielded.
        report: the epoch's skip report.
        skipped_before: how many records the report held when the epoch began.
    """
    if yielded or report is None:
        return
    records = report.records()[skipped_before:]
    if records:
        first = records[0]
        raise EmptyEpochError(
            f"the epoch yielded no sample: all {len(records)} shard(s) were skipped (first: "
            f"{first['shard']}: {skipped_reason(first['reason'])}); fix or remove them (see the "
            "loader's report)",
            url=first["shard"],
        )


class _Skipped:
    """The marker a stage returns for a skipped sample (one per process; compare with ``is``)."""

    def __repr__(self) -> str:
        return "SKIPPED"

    def __reduce__(self) -> str:
        return "SKIPPED"


SKIPPED = _Skipped()
"""What :class:`~aisio.core.pipeline.stages.SampleStage` returns in place of a skipped sample."""


def is_kept(item: Any) -> bool:
    """Returns whether ``item`` is not :data:`SKIPPED` (a picklable filter function)."""
    return item is not SKIPPED
