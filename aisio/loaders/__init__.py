"""Front ends beside DataLoader2: the same pipeline on torch's ``DataLoader``, torchdata's
``StatefulDataLoader`` and ``torchdata.nodes``, each resumable mid-epoch.

- :mod:`~aisio.loaders.torch`: :func:`webdataset_dataloader`, :func:`webdataset_stateful_loader`.
- :mod:`~aisio.loaders.nodes`: :class:`ShardSamples` (a node) and :func:`webdataset_node_loader`.
- :mod:`~aisio.loaders.dist`: rank, shared seed, ``uneven="drop"``, :func:`gather_state`.
"""

from aisio.loaders.dist import gather_state
from aisio.loaders.nodes import ShardSamples, webdataset_node_loader
from aisio.loaders.torch import webdataset_dataloader, webdataset_stateful_loader

__all__ = [
    "ShardSamples",
    "gather_state",
    "webdataset_dataloader",
    "webdataset_node_loader",
    "webdataset_stateful_loader",
]
