"""The loader arms: aisio's pipeline on every PyTorch loader, plain and resumable, side by side.

* **resumable**: the one-call entry points (``webdataset_loader``, ``webdataset_dataloader``,
  ``webdataset_stateful_loader``, ``webdataset_node_loader``), which carry every sample's
  position to the training process so that ``state_dict()`` can resume mid-epoch;
* **plain**: the same DataPipe (``webdataset_pipe``) on the same loader built by hand, with
  workers that live across epochs and no positions: what a user would get without aisio's
  bookkeeping, and what the resumable arm must match.

Each loader arm runs where its torchdata is: DataLoader2 needs torchdata < 0.10 and nodes
torchdata >= 0.10, so when the suite runs in the torchdata 0.9 environment the nodes arms run
in ``.venv-td011`` (see :attr:`~benchmarks.suite.job.Arm.python`).

Every pass of a loader arm is one epoch over a loader that lives across passes; an
``epochs`` arm makes each pass several short epochs and records each epoch's time, to show what
an epoch's start costs (worker processes started again, or not).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import aisio
from aisio.core.pipeline.stages import SampleStage
from aisio.datapipes.pipeline import webdataset_pipe
from benchmarks.suite.job import Arm, Job, LoaderPass, Pass

ENTRY_POINTS = {
    "dataloader2": "webdataset_loader",
    "dataloader": "webdataset_dataloader",
    "stateful": "webdataset_stateful_loader",
    "nodes": "webdataset_node_loader",
}
"""aisio's resumable entry point for each loader."""

_NEEDS = {"dataloader2": "torchdata.dataloader2", "nodes": "torchdata.nodes"}
TD011_PYTHON = Path(__file__).resolve().parents[2] / ".venv-td011" / "bin" / "python"
"""The torchdata 0.11 environment of this checkout (``scripts/bootstrap.sh`` makes it)."""


def available(loader: str) -> bool:
    """Whether this environment's torchdata has the loader (DataLoader2 < 0.10 <= nodes)."""
    needs = _NEEDS.get(loader)
    return needs is None or importlib.util.find_spec(needs) is not None


def where(loader: str) -> tuple[bool, str | None]:
    """Returns ``(runs here or in the other environment, that environment's python or None)``."""
    if available(loader):
        return True, None
    if loader == "nodes" and TD011_PYTHON.exists():
        return True, str(TD011_PYTHON)
    return False, None


def _options(job: Job) -> dict[str, Any]:
    """The pipeline options of a job: raw batches of ``batch``, or decoded, collated tuples."""
    common: dict[str, Any] = {"endpoint": job.endpoint, "shuffle_shards": False,
                              "shuffle_buffer": 0}
    if job.kind == "decode":
        return {**common, "decode": job.options.get("decode", "torchrgb8"),
                "tuple_fields": ("jpg", "cls"), "batch_size": 32}
    return {**common, "batch_size": int(job.options.get("batch", 64)), "collate": False}


def _count(job: Job) -> Any:
    return _decoded_count if job.kind == "decode" else len


def _decoded_count(batch: Any) -> int:
    return len(batch[1])


def _names(job: Job) -> list[str]:
    """The shards one epoch reads: the dataset, or (``long``) the dataset ``epochs`` times."""
    return job.ais_names() * (int(job.options.get("epochs", 1)) if job.options.get("long")
                              else 1)


def _epochs(job: Job) -> int:
    return 1 if job.options.get("long") else int(job.options.get("epochs", 1))


def resumable(job: Job) -> Pass:
    """aisio's one-call, resumable entry point of the ``loader`` option, ``workers`` workers
    (with the ``order`` option, in that order: ``"deterministic"``)."""
    make = getattr(aisio, ENTRY_POINTS[job.options["loader"]])
    order = {"order": job.options["order"]} if job.options.get("order") else {}
    loader = make(_names(job), num_workers=int(job.options.get("workers", 2)), seed=0,
                  **_options(job), **order)
    return LoaderPass(loader, _count(job), job.nbytes // _epochs(job), epochs=_epochs(job))


def plain(job: Job) -> Pass:
    """``webdataset_pipe`` on the ``loader`` option's loader, built by hand as a user would,
    its workers kept across epochs."""
    name = job.options["loader"]
    workers = int(job.options.get("workers", 2))
    options = _options(job)
    loader: Any
    if name == "dataloader2":
        from aisio.datapipes.dataloader2 import make_loader

        loader = make_loader(webdataset_pipe(_names(job), **options), num_workers=workers,
                             seed=0)
    elif name in ("dataloader", "stateful"):
        loader = _torch_loader(name, webdataset_pipe(_names(job), **options), workers)
    else:
        loader = _nodes_loader(_names(job), options, workers)
    return LoaderPass(loader, _count(job), job.nbytes // _epochs(job), epochs=_epochs(job))


def _torch_loader(name: str, pipe: Any, workers: int) -> Any:
    from torch.utils.data import DataLoader

    cls: Any = DataLoader
    if name == "stateful":
        from torchdata.stateful_dataloader import StatefulDataLoader

        cls = StatefulDataLoader
    extra = {"persistent_workers": True, "prefetch_factor": 2} if workers else {}
    return cls(pipe, batch_size=None, num_workers=workers, collate_fn=_as_is, **extra)


def _as_is(item: Any) -> Any:
    return item


class _BatchStage:
    """The per-sample stage over a batch, then collate (picklable, for nodes' mappers)."""

    def __init__(self, stage: Any, collate: Any) -> None:
        self.stage, self.collate = stage, collate

    def __call__(self, batch: list[Any]) -> Any:
        values = [self.stage(sample) for sample in batch]
        return self.collate(values) if self.collate is not None else values


def _nodes_loader(names: list[str], options: dict[str, Any], workers: int) -> Any:
    """torchdata.nodes over aisio's samples: batches, the per-sample stage and collate a batch
    at a time in ``workers`` threads (``ParallelMapper``, as ``webdataset_node_loader`` does),
    prefetch."""
    from torch.utils.data import default_collate
    from torchdata.nodes import Batcher, IterableWrapper, Loader, Mapper, ParallelMapper, Prefetcher

    batch_size, collate = options.pop("batch_size"), options.pop("collate", True)
    decode, fields = options.pop("decode", None), options.pop("tuple_fields", None)
    sample_stage = SampleStage(aisio.Decoder(decode) if decode else None, fields)
    stage = _BatchStage(sample_stage, default_collate if collate else None)
    node: Any = Batcher(IterableWrapper(webdataset_pipe(names, **options)), batch_size,
                        drop_last=False)
    node = ParallelMapper(node, stage, num_workers=workers) if workers else Mapper(node, stage)
    return Loader(Prefetcher(node, 2))


def loader_arms(note: str, options: dict[str, Any], *, plain_arms: bool = True,
                one_worker: tuple[str, ...] = (), ordered: bool = False) -> dict[str, Arm]:
    """Arms for every loader on the same options, 2 workers each: plain then resumable, a
    1-worker resumable arm for the loaders in ``one_worker``, and with ``ordered`` the
    resumable loader in the deterministic order (8 streams, global batches)."""
    arms: dict[str, Arm] = {}
    for name in ENTRY_POINTS:
        ok, python = where(name)
        if not ok:
            continue
        if plain_arms:
            arms[f"plain-{name}"] = Arm(f"aisio {name} (plain), {{workers}} workers", plain,
                                        note, {**options, "loader": name, "workers": 2}, python)
        arms[f"loader-{name}"] = Arm(f"aisio {name} (resumable), {{workers}} workers",
                                     resumable, note, {**options, "loader": name, "workers": 2},
                                     python)
        if ordered:
            arms[f"ordered-{name}"] = Arm(
                f"aisio {name} (order=\"deterministic\"), {{workers}} workers", resumable,
                note, {**options, "loader": name, "workers": 2, "order": "deterministic"},
                python)
        if name in one_worker:
            arms[f"loader-{name}-w1"] = Arm(f"aisio {name} (resumable), 1 worker", resumable,
                                            note, {**options, "loader": name, "workers": 1},
                                            python)
    return arms


def epoch_arms(epochs: int = 5) -> dict[str, Arm]:
    """For every loader, resumable and plain: ``epochs`` short epochs per pass, and one long
    epoch over the same shards listed ``epochs`` times (the rate an epoch's start should not
    dent)."""
    arms: dict[str, Arm] = {}
    for name in ENTRY_POINTS:
        ok, python = where(name)
        if not ok:
            continue
        base = {"batch": 64, "loader": name, "workers": 2, "epochs": epochs}
        for kind, setup in (("plain", plain), ("loader", resumable)):
            what = "plain" if kind == "plain" else "resumable"
            arms[f"{kind}-{name}-long"] = Arm(
                f"aisio {name} ({what}), 1 long epoch", setup,
                f"the shards listed {epochs} times", {**base, "long": True}, python)
            arms[f"{kind}-{name}"] = Arm(
                f"aisio {name} ({what}), {epochs} short epochs", setup,
                "a pass is the epochs in a row", base, python)
    return arms


__all__ = ["ENTRY_POINTS", "available", "epoch_arms", "loader_arms", "plain", "resumable",
           "where"]
