"""The loaders' own options (torch ``DataLoader``'s, where each loader has them), as one table.

Besides the pipeline options (:mod:`aisio.core.pipeline.spec`) and ``resampled`` /
``samples_per_epoch``, each one-call loader passes some of ``DataLoader``'s options to the
loader underneath and refuses by name the ones it cannot honour. :data:`LOADER_OPTIONS` says
which, once: the set-up splits what a loader is given with :func:`split_loader_options`, and
the entry points' docstrings (:func:`loader_options_doc`) and the docs' table
(docs/guide/loaders.md, :func:`options_table`) are drawn from it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DATALOADER = "webdataset_dataloader"
STATEFUL = "webdataset_stateful_loader"
NODES = "webdataset_node_loader"
DATALOADER2 = "webdataset_loader"
#: The one-call loaders, by entry point, and the loader each is built on (the docs' columns).
FRONT_ENDS = {DATALOADER: "DataLoader", STATEFUL: "StatefulDataLoader",
              NODES: "torchdata.nodes", DATALOADER2: "DataLoader2"}
_TORCH = frozenset((DATALOADER, STATEFUL))


@dataclass(frozen=True)
class LoaderOption:
    """One option a loader may take besides the pipeline's.

    Attributes:
        takes: the entry points that take it (the rest do not know it).
        refused: entry point -> why it cannot honour it, and what to do instead.
        workers_only: it goes with worker processes (a DataLoader without them refuses it).
        note: what the docs' table adds about it (a default, a condition).
    """

    takes: frozenset[str]
    refused: Mapping[str, str] = field(default_factory=dict)
    workers_only: bool = False
    note: Mapping[str, str] = field(default_factory=dict)


_NO_PIN = "DataLoader2 does not pin memory; use aisio.webdataset_dataloader"

#: DataLoader's options as the one-call loaders take them (see the module doc).
LOADER_OPTIONS: dict[str, LoaderOption] = {
    "pin_memory": LoaderOption(_TORCH | {NODES}, refused={DATALOADER2: (
        "DataLoader2 does not pin memory; use aisio.webdataset_dataloader(..., "
        "pin_memory=True) (torch's DataLoader), or pin each batch in the loop")}),
    "pin_memory_device": LoaderOption(_TORCH | {NODES}, refused={DATALOADER2: _NO_PIN}),
    "persistent_workers": LoaderOption(
        _TORCH | {DATALOADER2}, workers_only=True,
        refused={NODES: "webdataset_node_loader's mapper threads (or processes) always live "
                        "across epochs, until loader.shutdown(); drop the option"},
        note={DATALOADER: "default True", STATEFUL: "default True",
              DATALOADER2: "default True"}),
    "prefetch_factor": LoaderOption(_TORCH | {DATALOADER2, NODES}, workers_only=True),
    "multiprocessing_context": LoaderOption(_TORCH | {DATALOADER2, NODES}, workers_only=True,
                                            note={NODES: "with `method=\"process\"`"}),
    "timeout": LoaderOption(_TORCH, refused={
        NODES: "torchdata.nodes has no per-batch timeout; reads are bounded by "
               "AISConfig(read_timeout=...)",
        DATALOADER2: "DataLoader2 has no per-batch timeout; reads are bounded by "
                     "AISConfig(read_timeout=...) and a dead worker raises WorkerDiedError"}),
    "in_order": LoaderOption(_TORCH | {DATALOADER2, NODES}, note={
        STATEFUL: "torchdata >= 0.10",
        DATALOADER2: "True only: its round robin is in order"}),
    "worker_init_fn": LoaderOption(_TORCH),
}

def taken_by(where: str) -> tuple[str, ...]:
    """Returns the loader options entry point ``where`` takes (none for a pipe)."""
    return tuple(name for name, option in LOADER_OPTIONS.items() if where in option.takes)


def refused_by(where: str) -> dict[str, str]:
    """Returns the loader options ``where`` refuses by name -> why."""
    return {name: option.refused[where] for name, option in LOADER_OPTIONS.items()
            if where in option.refused}


def workers_only(names: Any) -> list[str]:
    """Returns those of ``names`` that go with worker processes, in the table's order."""
    return [name for name, option in LOADER_OPTIONS.items()
            if option.workers_only and name in names]


def split_loader_options(options: dict[str, Any], where: str) -> dict[str, Any]:
    """Takes the loader options ``where`` takes out of ``options`` (which keeps the rest) and
    returns them. ``options`` is checked first (:func:`~aisio.core.pipeline.spec.check_options`).
    """
    return {name: options.pop(name) for name in taken_by(where) if name in options}


def loader_options_doc(where: str, width: int = 96) -> str:
    """Returns what ``where``'s docstring says of its loader options, from the table: the
    ones it passes on (with their notes) and the ones it refuses by name."""
    taken = [f"``{name}``" + (f" ({option.note[where]})" if where in option.note else "")
             for name, option in LOADER_OPTIONS.items() if where in option.takes]
    refused = [f"``{name}``" for name in refused_by(where)]
    text = (f"{', '.join(taken) or 'none'}, passed to {FRONT_ENDS[where]}"
            + (f"; refused by name, with what to do instead: {', '.join(refused)}"
               if refused else "") + ".")
    return textwrap.fill(text, width=width, initial_indent=" " * 8, subsequent_indent=" " * 8,
                         break_on_hyphens=False, break_long_words=False)


def options_table() -> str:
    """Returns the docs' table of :data:`LOADER_OPTIONS`: per option, per loader, "yes" (with
    its note), "refused by name" or "no" (a Markdown table)."""
    fronts = list(FRONT_ENDS)
    rows = ["| option | " + " | ".join(FRONT_ENDS[f] for f in fronts) + " |",
            "| --- |" + " --- |" * len(fronts)]
    for name, option in LOADER_OPTIONS.items():
        cells = []
        for front in fronts:
            note = option.note.get(front)
            if front in option.takes:
                cells.append(f"yes ({note})" if note else "yes")
            elif front in option.refused:
                cells.append("refused by name")
            else:
                cells.append("no")
        rows.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return "\n".join(rows)


__all__ = ["DATALOADER", "DATALOADER2", "FRONT_ENDS", "LOADER_OPTIONS", "NODES", "STATEFUL",
           "LoaderOption", "loader_options_doc", "options_table", "refused_by",
           "split_loader_options", "taken_by", "workers_only"]
