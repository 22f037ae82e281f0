"""aisio: AIStore for PyTorch — list, stream and parse WebDataset shards into any PyTorch loader.

The user's API is what this module re-exports in ``__all__``. The package's parts and the one
direction of imports between them are written once, in :mod:`aisio._layers`, and drawn in
docs/design/architecture.md.

Example:
    >>> import aisio                                                        # doctest: +SKIP
    >>> urls = aisio.AISSourceLister("ais://bucket/shard-{000..099}.tar")   # doctest: +SKIP
"""

from typing import TYPE_CHECKING

from aisio._lazy import lazy_attribute as _lazy_attribute
from aisio._lazy import register_datapipes_with_torch as _register_datapipes_with_torch
from aisio.core.faults.errors import (
    AISConnectionError,
    AISIOError,
    AISRequestError,
    AuthError,
    BucketNotFoundError,
    ClusterError,
    ClusterWaitWarning,
    ConfigError,
    DataError,
    DecodeError,
    EmptyEpochError,
    ETLNotFoundError,
    ETLTransformError,
    ETLUnavailableError,
    InvalidURLError,
    LoaderUnavailableError,
    NotFoundError,
    ObjectChangedError,
    ObjectNotFoundError,
    PlaygroundError,
    ShardFormatError,
    StateMismatchError,
    UsageError,
    WorkerDiedError,
    WorkerTraceback,
)

if TYPE_CHECKING:
    from aisio import localetl as localetl
    from aisio import playground as playground
    from aisio import tools as tools
    from aisio.core.decode.decoders import Decoder, to_tuple
    from aisio.core.epochs.progress import merge_states
    from aisio.core.faults.report import ErrorReport
    from aisio.core.pipeline.loop import ResumableLoader
    from aisio.core.store.cache import ShardCache
    from aisio.core.store.config import AISConfig
    from aisio.core.store.memory import MemoryStore
    from aisio.core.store.protocol import ObjectStore
    from aisio.core.store.urls import ETL
    from aisio.datapipes import (
        AISFileLister,
        AISFileLoader,
        AISSourceLister,
        ResampledShards,
        ToTuple,
        WebDatasetParser,
        make_loader,
        webdataset_loader,
        webdataset_pipe,
    )
    from aisio.loaders import (
        ShardSamples,
        gather_state,
        webdataset_dataloader,
        webdataset_node_loader,
        webdataset_stateful_loader,
    )

# Every name but the errors is imported on first use (``aisio.AISFileLoader``): the front ends
# import torch, the resumable loop numpy, the shard cache the HTTP client. The DataPipes are
# registered with torch as soon as torch is imported (see aisio._lazy), so `aisio --help` and
# the light commands pay only for what they use (tests/unit/test_import_time.py).
_LAZY = {
    "Decoder": "aisio.core.decode.decoders",
    "to_tuple": "aisio.core.decode.decoders",
    "merge_states": "aisio.core.epochs.progress",
    "ErrorReport": "aisio.core.faults.report",
    "ResumableLoader": "aisio.core.pipeline.loop",
    "ShardCache": "aisio.core.store.cache",
    "AISConfig": "aisio.core.store.config",
    "MemoryStore": "aisio.core.store.memory",
    "ObjectStore": "aisio.core.store.protocol",
    "ETL": "aisio.core.store.urls",
    **dict.fromkeys(
        ("AISFileLister", "AISFileLoader", "AISSourceLister", "ResampledShards", "ToTuple",
         "WebDatasetParser", "make_loader", "webdataset_loader", "webdataset_pipe"),
        "aisio.datapipes",
    ),
    **dict.fromkeys(
        ("ShardSamples", "gather_state", "webdataset_dataloader", "webdataset_node_loader",
         "webdataset_stateful_loader"),
        "aisio.loaders",
    ),
}
_register_datapipes_with_torch()

__version__ = "0.1.0"

__all__ = [
    "AISConfig",
    "AISConnectionError",
    "AISFileLister",
    "AISFileLoader",
    "AISIOError",
    "AISRequestError",
    "AISSourceLister",
    "AuthError",
    "BucketNotFoundError",
    "ClusterError",
    "ClusterWaitWarning",
    "ConfigError",
    "DataError",
    "DecodeError",
    "Decoder",
    "ETL",
    "ETLNotFoundError",
    "ETLTransformError",
    "ETLUnavailableError",
    "EmptyEpochError",
    "ErrorReport",
    "InvalidURLError",
    "LoaderUnavailableError",
    "MemoryStore",
    "NotFoundError",
    "ObjectChangedError",
    "ObjectNotFoundError",
    "ObjectStore",
    "PlaygroundError",
    "ResampledShards",
    "ResumableLoader",
    "ShardCache",
    "ShardFormatError",
    "ShardSamples",
    "StateMismatchError",
    "ToTuple",
    "UsageError",
    "WebDatasetParser",
    "WorkerDiedError",
    "WorkerTraceback",
    "gather_state",
    "make_loader",
    "merge_states",
    "to_tuple",
    "webdataset_dataloader",
    "webdataset_loader",
    "webdataset_node_loader",
    "webdataset_pipe",
    "webdataset_stateful_loader",
]


def __getattr__(name: str) -> object:
    if name in ("tools", "playground", "localetl"):
        # The tools, the playground and its ETL runtime are not the library: imported on first
        # use only.
        import importlib

        return importlib.import_module(f"aisio.{name}")
    return _lazy_attribute(__name__, name, _LAZY)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
