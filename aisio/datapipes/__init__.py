"""The DataPipes front end: IterDataPipes over the core, and the DataLoader2 pipeline.

- :mod:`~aisio.datapipes.base`: torch's DataPipe classes (works with torchdata 0.9, 0.11 or none).
- :mod:`~aisio.datapipes.pipes`: ``AISFileLister``, ``AISSourceLister``, ``AISFileLoader``,
  ``WebDatasetParser`` and their functional forms (``ais_list_files``, ...).
- :mod:`~aisio.datapipes.pipeline`: :func:`webdataset_pipe`, shards to batches as one DataPipe.
- :mod:`~aisio.datapipes.dataloader2`: reading services and :func:`webdataset_loader` (needs
  torchdata < 0.10; the wrappers here raise :class:`~aisio.LoaderUnavailableError` otherwise).
- :mod:`~aisio.datapipes.mpfix`: the fix for DataLoader2's multiprocessing round robin.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from aisio.core.errors import LoaderUnavailableError
from aisio.datapipes.pipeline import ResampledShards, ToTuple, webdataset_pipe
from aisio.datapipes.pipes import AISFileLister, AISFileLoader, AISSourceLister, WebDatasetParser


def _dataloader2() -> ModuleType:
    try:
        from aisio.datapipes import dataloader2
    except ImportError as exc:
        try:
            from importlib.metadata import version

            found = f"torchdata {version('torchdata')} is installed"
        except Exception:
            found = "torchdata is not installed"
        raise LoaderUnavailableError(
            f"DataLoader2 needs torchdata < 0.10 ({found}): install 'torchdata<0.10', or use the "
            "same pipeline on torch's DataLoader (aisio.webdataset_dataloader), StatefulDataLoader "
            "(aisio.webdataset_stateful_loader) or torchdata.nodes (aisio.webdataset_node_loader)"
        ) from exc
    return dataloader2


def webdataset_loader(shards: Any, **options: Any) -> Any:
    """Returns a DataLoader2 that streams batches from AIStore shards (see
    :func:`aisio.datapipes.dataloader2.webdataset_loader`; needs torchdata < 0.10)."""
    return _dataloader2().webdataset_loader(shards, **options)


def make_loader(pipe: Any, **options: Any) -> Any:
    """Returns a DataLoader2 over ``pipe`` with the right reading service (see
    :func:`aisio.datapipes.dataloader2.make_loader`; needs torchdata < 0.10)."""
    return _dataloader2().make_loader(pipe, **options)


__all__ = [
    "AISFileLister",
    "AISFileLoader",
    "AISSourceLister",
    "ResampledShards",
    "ToTuple",
    "WebDatasetParser",
    "make_loader",
    "webdataset_loader",
    "webdataset_pipe",
]
