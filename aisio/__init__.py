"""aisio: AIStore for PyTorch — TorchData DataPipes that list, stream and parse shards from AIStore.

Example:
    >>> import aisio                                                        # doctest: +SKIP
    >>> urls = aisio.AISSourceLister("ais://bucket/shard-{000..099}.tar")   # doctest: +SKIP
"""

from aisio._cache import ShardCache
from aisio._config import AISConfig
from aisio._datapipes import AISFileLister, AISFileLoader, AISSourceLister, WebDatasetParser
from aisio._decode import Decoder, to_tuple
from aisio._errors import (
    AISConnectionError,
    AISIOError,
    AISRequestError,
    BucketNotFoundError,
    ConfigError,
    DecodeError,
    ETLNotFoundError,
    ETLUnavailableError,
    InvalidURLError,
    ObjectChangedError,
    ObjectNotFoundError,
    PlaygroundError,
    ShardFormatError,
)
from aisio._explore import BucketSummary, Listing, list_buckets, ls, stat, summarize
from aisio._pipeline import (
    ResampledShards,
    ToTuple,
    make_loader,
    webdataset_loader,
    webdataset_pipe,
)
from aisio._playground import Playground, cluster_endpoint
from aisio._preview import Samples, SampleView, head, image_grid, show_samples
from aisio._report import ErrorReport
from aisio._urls import ETL

__version__ = "0.1.0"

__all__ = [
    "AISConfig",
    "AISConnectionError",
    "AISFileLister",
    "AISFileLoader",
    "AISIOError",
    "AISRequestError",
    "AISSourceLister",
    "BucketNotFoundError",
    "BucketSummary",
    "ConfigError",
    "DecodeError",
    "Decoder",
    "ETL",
    "ETLNotFoundError",
    "ETLUnavailableError",
    "ErrorReport",
    "InvalidURLError",
    "Listing",
    "ObjectChangedError",
    "ObjectNotFoundError",
    "Playground",
    "PlaygroundError",
    "ResampledShards",
    "SampleView",
    "Samples",
    "ShardCache",
    "ShardFormatError",
    "ToTuple",
    "WebDatasetParser",
    "cluster_endpoint",
    "head",
    "image_grid",
    "list_buckets",
    "ls",
    "make_loader",
    "show_samples",
    "stat",
    "summarize",
    "to_tuple",
    "webdataset_loader",
    "webdataset_pipe",
]
