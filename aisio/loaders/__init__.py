"""Front ends beside DataLoader2: the same pipeline on torch's ``DataLoader``, torchdata's
``StatefulDataLoader`` and ``torchdata.nodes``, each resumable mid-epoch.

- :mod:`~aisio.loaders.torch`: :func:`webdataset_dataloader`, :func:`webdataset_stateful_loader`.
- :mod:`~aisio.loaders.nodes`: :class:`ShardSamples` (a node) and :func:`webdataset_node_loader`.
- :mod:`~aisio.runtime.ordered`: the torch part of ``order="deterministic"`` (the collate in
  the training process), shared with DataLoader2's and the nodes' front ends.
- :func:`gather_state` (from :mod:`aisio.runtime.dist`, which DataLoader2 shares).
"""

from aisio.loaders.nodes import ShardSamples, webdataset_node_loader
from aisio.loaders.torch import webdataset_dataloader, webdataset_stateful_loader
from aisio.runtime.dist import gather_state

__all__ = [
    "ShardSamples",
    "gather_state",
    "webdataset_dataloader",
    "webdataset_node_loader",
    "webdataset_stateful_loader",
]
