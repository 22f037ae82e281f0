"""The parts of aisio and the one direction their imports may take: written once, as data.

``LAYERS`` lists aisio's parts from the top down. A module belongs to the part whose name is
the longest prefix of its own; it may import modules of its own part and of any part in a lower
layer, never one above it nor a neighbour in its own layer. ``tests/unit/test_layers.py`` holds
the whole package to this (imports inside functions count too), and the docs' architecture page
draws the same map from this list.
"""

from __future__ import annotations

LAYERS: tuple[tuple[str, ...], ...] = (
    # the package's front: what ``import aisio`` re-exports, lazily where it needs torch
    ("aisio",),
    # human tools: the ``aisio`` command, Jupyter views (not the library)
    ("aisio.tools",),
    # importing on first use (keeps `import aisio` and the command free of torch)
    ("aisio._lazy",),
    # trainers that checkpoint a loader: Lightning, Fabric, accelerate (optional extras)
    ("aisio.trainers",),
    # front ends: one per loader framework, each a thin layer over the core (neighbours: the
    # one-call loaders of either run the core's reader, never the other's plumbing)
    ("aisio.loaders", "aisio.datapipes"),
    # what every front end needs from torch while it runs; a real AIStore on loopback
    ("aisio.runtime", "aisio.playground"),
    ("aisio.localetl",),
    # the framework-free core, top down
    ("aisio.core.order",),      # order="deterministic": canonical streams, readers, reorder
    ("aisio.core.pipeline",),   # options, fetch, parse, shuffle, sample stages, the training loop
    # a sample's fields decoded (the stage's decoders); what leaves a reader: collated batches,
    # deliveries, shared memory (neighbours: neither imports the other)
    ("aisio.core.decode", "aisio.core.transport"),
    ("aisio.core.epochs",),     # epochs, positions and resume state; the next epoch's plan
    ("aisio.core.store",),      # AIStore names, sources, the HTTP client, Get-Batch, the cache
    ("aisio.core.format",),     # tar shards read into WebDataset samples (bytes, undecoded)
    ("aisio.core.faults", "aisio.core.system"),  # errors and on_error; processes, memory, time
)


def part_of(module: str) -> str | None:
    """Returns the part ``module`` belongs to (the longest part name it starts with), or None."""
    best = None
    for layer in LAYERS:
        for part in layer:
            if (module == part or module.startswith(part + ".")) and len(part) > len(best or ""):
                best = part
    return best


def layer_of(part: str) -> int:
    """Returns the index of ``part``'s layer in :data:`LAYERS` (0 is the top)."""
    return next(i for i, layer in enumerate(LAYERS) if part in layer)


def may_import(importer: str, imported: str) -> bool:
    """Returns whether module ``importer`` may import module ``imported``."""
    a, b = part_of(importer), part_of(imported)
    if a is None or b is None:
        return False
    return a == b or layer_of(b) > layer_of(a)
