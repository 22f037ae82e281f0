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
from typing import TYPE_CHECKING, Any

from aisio.core.faults.errors import LoaderUnavailableError
from aisio.datapipes.pipeline import ResampledShards, ToTuple, webdataset_pipe
from aisio.datapipes.pipes import AISFileLister, AISFileLoader, AISSourceLister, WebDatasetParser

if TYPE_CHECKING:
    from aisio.datapipes.dataloader2 import make_loader, webdataset_loader


def _unavailable() -> LoaderUnavailableError:
    try:
        from importlib.metadata import version

        found = f"torchdata {version('torchdata')} is installed"
    except Exception:
        found = "torchdata is not installed"
    return LoaderUnavailableError(
        f"DataLoader2 needs torchdata < 0.10 ({found}): install 'torchdata<0.10', or use the "
        "same pipeline on torch's DataLoader (aisio.webdataset_dataloader), StatefulDataLoader "
        "(aisio.webdataset_stateful_loader) or torchdata.nodes (aisio.webdataset_node_loader)"
    )


def _dataloader2() -> ModuleType:
    try:
        from aisio.datapipes import dataloader2
    except ImportError as exc:
        raise _unavailable() from exc
    return dataloader2


def _needs_dataloader2(name: str, error: LoaderUnavailableError) -> Any:
    """Returns a stand-in for ``name`` that raises LoaderUnavailableError when called."""

    def unavailable(*args: Any, **options: Any) -> Any:
        raise _unavailable() from error.__cause__

    unavailable.__name__ = unavailable.__qualname__ = name
    unavailable.__doc__ = (f"aisio.{name} runs on DataLoader2, which needs torchdata < 0.10 "
                           f"(here: {_unavailable()})")
    return unavailable


def __getattr__(name: str) -> Any:
    # The real DataLoader2 entry points, with their signatures and full docs (help() shows
    # them), imported on first use: torchdata.dataloader2 is slow to import
    # (benchmarks/README.md, Figures behind the code's comments).
    if name not in ("webdataset_loader", "make_loader"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        value = getattr(_dataloader2(), name)
    except LoaderUnavailableError as exc:
        value = _needs_dataloader2(name, exc)
    globals()[name] = value
    return value


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
