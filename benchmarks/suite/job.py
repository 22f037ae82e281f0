"""What every arm is given and returns: the :class:`Job`, the :class:`Arm`, a loader's pass."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from aisio.core.store.urls import AISPath, Bucket, object_url

MiB = 1 << 20
Counts = tuple[int, int]
"""What one pass read: (bytes, samples); for plain objects, samples are objects."""
Pass = Callable[[], Counts]


@dataclass(frozen=True)
class Job:
    """Everything an arm needs, picklable: the cluster, the dataset and the arm's options.

    Attributes:
        kind: ``shards``, ``objects`` or ``decode``.
        workload: the workload's name (``large``, ``small``, ``objects``, ``decode``, ``mem-...``).
        arm: the arm's name (a key of :data:`ARMS` for ``kind``).
        endpoint: the AIStore endpoint.
        bucket: the suite's bucket name.
        prefix: the prefix that lists exactly the dataset's objects.
        names: the dataset's object names, in order.
        nbytes: the dataset's total size.
        samples: the dataset's sample (or object) count.
        repeat: timed passes.
        warmup: untimed passes before them.
        options: arm options (``concurrency``, ``workers``, ``batch``, ``batch_objects``, ...).
    """

    kind: str
    workload: str
    arm: str
    endpoint: str
    bucket: str
    prefix: str
    names: tuple[str, ...]
    nbytes: int
    samples: int
    repeat: int = 3
    warmup: int = 1
    options: dict[str, Any] = field(default_factory=dict)

    def urls(self) -> list[str]:
        """Returns the HTTP GET URLs of the dataset's objects (what AISSourceLister yields)."""
        bucket = Bucket(self.bucket)
        return [object_url(self.endpoint, AISPath(bucket, name)) for name in self.names]

    def ais_names(self) -> list[str]:
        """Returns the dataset's objects as ``ais://bucket/name``."""
        return [f"ais://{self.bucket}/{name}" for name in self.names]


class Arm(NamedTuple):
    """An arm: its table label (formatted with the job's options), setup, note and options."""

    label: str
    setup: Callable[[Job], Pass]
    note: str = ""
    options: dict[str, Any] = {}  # noqa: RUF012 - read-only defaults
    #: the interpreter the arm runs in, when not this one (a torchdata 0.11 arm run from the
    #: torchdata 0.9 environment: ``.venv-td011/bin/python``)
    python: str | None = None


class LoaderPass:
    """A pass is one epoch of a loader that lives across passes; ``close`` stops its workers.

    With ``epochs`` > 1 a pass is that many epochs, and :attr:`epoch_times` holds the last
    pass's seconds per epoch (what each epoch's start costs shows in the first of them).
    """

    def __init__(self, loader: Any, count: Callable[[Any], int], nbytes: int, *,
                 epochs: int = 1) -> None:
        self.loader = loader
        self.count = count
        self.nbytes = nbytes
        self.epochs = epochs
        self.epoch_times: list[float] = []

    def __call__(self) -> Counts:
        samples, self.epoch_times = 0, []
        for _ in range(self.epochs):
            start = time.perf_counter()
            samples += sum(self.count(batch) for batch in self.loader)
            self.epoch_times.append(time.perf_counter() - start)
        return self.nbytes * self.epochs, samples

    def close(self) -> None:
        for name in ("shutdown", "close"):
            stop = getattr(self.loader, name, None)
            if stop is not None:
                stop()
                return


__all__ = ["Arm", "Counts", "Job", "LoaderPass", "MiB", "Pass"]
