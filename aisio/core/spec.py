"""The pipeline's options, checked once: what every front end builds the same pipeline from.

Every loader entry point (DataLoader2, DataLoader, StatefulDataLoader, torchdata.nodes) takes the
same keyword options as :func:`aisio.webdataset_pipe`; :meth:`PipelineSpec.build` turns them into
one frozen, picklable value, so the rules (defaults, types, what goes with what) live here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aisio.core.cache import ShardCache
from aisio.core.config import AISConfig, resolve_config
from aisio.core.decode import Decoder, field_names
from aisio.core.fetch import ErrorPolicy, Fetcher, OnError, check_on_error
from aisio.core.report import ErrorReport
from aisio.core.stages import SampleStage
from aisio.core.timing import StageTimes
from aisio.core.urls import ETL, to_etl

#: Samples each reading process (worker) holds in its shuffle buffer unless ``shuffle_buffer=``
#: says otherwise: the loaders shuffle by default. The buffer holds undecoded samples, so it costs
#: about this many times the mean sample's size per worker (1000 x 100 KiB JPEGs: ~100 MB each),
#: and the first sample waits until it is full (or the worker's shards run out).
#: ``shuffle_buffer=0`` reads samples in shard order.
DEFAULT_SHUFFLE_BUFFER = 1000


@dataclass(frozen=True)
class PipelineSpec:
    """Everything between a shard and a batch, except the shards and the loader.

    Build it with :meth:`build`, which takes the keyword options of
    :func:`aisio.webdataset_pipe`.
    """

    config: AISConfig
    etl: ETL | None = None
    shuffle_shards: bool = True
    shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER
    decoder: Decoder | None = None
    decode_threads: int = 0
    tuple_fields: tuple[str, ...] | None = None
    batch_size: int | None = None
    collate: bool = True
    on_error: OnError = "raise"
    report: ErrorReport = field(default_factory=ErrorReport)
    concurrency: int = 1
    cache: ShardCache | None = None
    times: StageTimes | None = None

    @classmethod
    def build(
        cls,
        *,
        endpoint: str | None = None,
        url: str | None = None,
        config: AISConfig | None = None,
        etl: ETL | str | Any | None = None,
        shuffle_shards: bool = True,
        shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
        decode: str | Decoder | None = None,
        decode_threads: int = 0,
        tuple_fields: Sequence[str] | str | None = None,
        batch_size: int | None = None,
        collate: bool = True,
        on_error: OnError = "raise",
        report: ErrorReport | None = None,
        concurrency: int = 1,
        cache: ShardCache | None = None,
        timings: bool = False,
    ) -> PipelineSpec:
        """Returns the spec for these options (see :func:`aisio.webdataset_pipe`).

        Raises:
            ValueError: an option is out of range.
            ConfigError: no endpoint is given or set.
        """
        check_on_error(on_error)
        if shuffle_buffer < 0 or decode_threads < 0:
            raise ValueError("shuffle_buffer and decode_threads must be >= 0")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size={batch_size} must be at least 1 (None: no batches)")
        fields = None if tuple_fields is None else field_names(tuple_fields, what="tuple_fields")
        if report is None:
            report = ErrorReport.temporary() if on_error != "raise" else ErrorReport()
        return cls(
            config=resolve_config(url, config, endpoint=endpoint),
            etl=to_etl(etl),
            shuffle_shards=shuffle_shards,
            shuffle_buffer=shuffle_buffer,
            decoder=decode if isinstance(decode, Decoder) or decode is None else Decoder(decode),
            decode_threads=decode_threads,
            tuple_fields=tuple(fields) if fields else None,
            batch_size=batch_size,
            collate=collate,
            on_error=on_error,
            report=report,
            concurrency=concurrency,
            cache=cache,
            times=StageTimes.temporary() if timings else None,
        )

    def stage(self) -> SampleStage | None:
        """Returns the per-sample stage (decode, tuple, under the error policy), if any."""
        if self.decoder is None and self.tuple_fields is None and self.times is None:
            return None
        return SampleStage(self.decoder, self.tuple_fields, on_error=self.on_error,
                           report=self.report, times=self.times)

    def fetcher(self) -> Fetcher:
        """Returns the fetcher that reads this pipeline's shards."""
        return Fetcher(self.config, self.etl, self.concurrency, 0, self.cache,
                       ErrorPolicy(self.on_error, self.report))


__all__ = ["DEFAULT_SHUFFLE_BUFFER", "PipelineSpec"]
