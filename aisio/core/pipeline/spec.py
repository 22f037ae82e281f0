"""The pipeline's options, checked once: what every front end builds the same pipeline from.

Every loader entry point (DataLoader2, DataLoader, StatefulDataLoader, torchdata.nodes) takes the
same keyword options as :func:`aisio.webdataset_pipe`; :meth:`PipelineSpec.build` turns them into
one frozen, picklable value, so the rules (defaults, types, what goes with what) live here.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aisio.core.faults.errors import ConfigError
from aisio.core.faults.policy import ErrorPolicy, OnError, check_on_error
from aisio.core.faults.report import ErrorReport
from aisio.core.format.decode import Decoder, field_names
from aisio.core.pipeline.fetch import Fetcher
from aisio.core.pipeline.stages import SampleStage
from aisio.core.store.cache import ShardCache
from aisio.core.store.config import AISConfig, resolve_config
from aisio.core.store.urls import ETL, to_etl
from aisio.core.system.timing import StageTimes

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
    drop_last: bool = False
    on_error: OnError = "raise"
    report: ErrorReport = field(default_factory=ErrorReport)
    concurrency: int = 1
    cache: ShardCache | None = None
    times: StageTimes | None = None
    map: Callable[[Any], Any] | None = None

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
        drop_last: bool = False,
        on_error: OnError = "raise",
        report: ErrorReport | None = None,
        concurrency: int = 1,
        cache: ShardCache | None = None,
        timings: bool = False,
        map: Callable[[Any], Any] | None = None,
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
        if drop_last and not batch_size:
            raise ConfigError("drop_last=True drops each reader's last incomplete batch: it goes "
                              "with batch_size=N (or drop drop_last)")
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
            drop_last=bool(drop_last),
            on_error=on_error,
            report=report,
            concurrency=concurrency,
            cache=cache,
            times=StageTimes.temporary() if timings else None,
            map=check_map(map),
        )

    def stage(self) -> SampleStage | None:
        """Returns the per-sample stage (decode, tuple, under the error policy), if any."""
        if (self.decoder is None and self.tuple_fields is None and self.times is None
                and self.map is None):
            return None
        return SampleStage(self.decoder, self.tuple_fields, on_error=self.on_error,
                           report=self.report, times=self.times, map=self.map)

    def fetcher(self) -> Fetcher:
        """Returns the fetcher that reads this pipeline's shards."""
        return Fetcher(self.config, self.etl, self.concurrency, 0, self.cache,
                       ErrorPolicy(self.on_error, self.report))


def check_map(fn: Any) -> Callable[[Any], Any] | None:
    """Returns ``map=`` as given, or raises ConfigError when it is not a function."""
    if fn is not None and not callable(fn):
        raise ConfigError(
            f"map={fn!r} is not a function; pass a function of one sample (or tuple), e.g. "
            "map=augment, defined with `def` at module level when there are workers")
    return fn


#: Options of torch's ``DataLoader`` that a trainer sets; each loader takes the ones it has (see
#: its ``loader_options``) and refuses the others by name.
LOADER_OPTIONS = ("drop_last", "in_order", "multiprocessing_context", "persistent_workers",
                  "pin_memory", "pin_memory_device", "prefetch_factor", "timeout")

#: webdataset's handlers, by name, and the ``on_error`` policy that does the same.
_HANDLERS = {"reraise_exception": "raise", "warn_and_continue": "warn",
             "ignore_and_continue": "skip"}


def _handler(value: Any) -> str:
    name = value if isinstance(value, str) else getattr(value, "__name__", None)
    policy = _HANDLERS.get(str(name))
    if policy is not None:
        return f'on_error="{policy}"'
    return 'on_error="raise", "warn" (warn_and_continue) or "skip" (ignore_and_continue)'


def _shuffle(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value > 1:
        return f"shuffle_buffer={value} (samples; shuffle_shards=True shuffles the shard order)"
    return "shuffle_buffer=N to shuffle samples through N, shuffle_shards=True for shard order"


_SPLIT = "nothing: aisio splits shards across ranks, then workers, itself (each read once)"

#: Other libraries' spellings (webdataset, the AIStore DataPipes and articles) -> where they
#: come from, and the aisio option to pass instead (given the value passed). One table: every
#: entry point answers with it.
FOREIGN_OPTIONS: dict[str, tuple[str, Callable[[Any], str]]] = {
    "handler": ("webdataset", _handler),
    "shardshuffle": ("webdataset", lambda v: f"shuffle_shards={bool(v)}"),
    "shuffle": ("webdataset's .shuffle(n)", _shuffle),
    "etl_name": ("the AIStore DataPipes", lambda v: f"etl={v!r}"),
    "etl_args": ("the AIStore DataPipes", lambda v: f"etl=aisio.ETL(name, {v!r})"),
    "ais_sources": ("AISSourceLister", lambda v: "the shards as the first argument"),
    "prefix": ("AISSourceLister", lambda v: f'the prefix in the name ("ais://bucket/{v}")'),
    "decoder": ("webdataset's .decode()", lambda v: f"decode={v!r}"),
    "to_tuple": ("webdataset's .to_tuple()", lambda v: f"tuple_fields={v!r}"),
    "batched": ("webdataset's .batched(n)", lambda v: f"batch_size={v!r}"),
    "batchsize": ("webdataset", lambda v: f"batch_size={v!r}"),
    "collation_fn": ("webdataset's .batched()", lambda v: "collate=True (torch's default "
                     "collate) or collate=False (lists), and post= for your own"),
    "nodesplitter": ("webdataset", lambda v: _SPLIT),
    "workersplitter": ("webdataset", lambda v: _SPLIT),
    "split_by_node": ("webdataset", lambda v: _SPLIT),
    "split_by_worker": ("webdataset", lambda v: _SPLIT),
    "with_epoch": ("webdataset", lambda v: f"resampled=True, samples_per_epoch={v!r}"),
    "epoch_size": ("webdataset", lambda v: f"resampled=True, samples_per_epoch={v!r}"),
    "cache_dir": ("webdataset", lambda v: f"cache=aisio.ShardCache({v!r})"),
}


def pipeline_options() -> tuple[str, ...]:
    """Returns the names of the pipeline's options (:meth:`PipelineSpec.build`'s)."""
    return tuple(name for name, p in inspect.signature(PipelineSpec.build).parameters.items()
                 if p.kind is inspect.Parameter.KEYWORD_ONLY)


def check_options(options: Mapping[str, Any], *, where: str, known: Iterable[str] = (),
                  refused: Mapping[str, str] | None = None) -> None:
    """Raises a :class:`ConfigError` for the first option that ``where`` does not take, naming
    the aisio option to use: another library's spelling gets its aisio name, a DataLoader
    option this loader has no use for says why (``refused``), a typo gets the nearest name.

    Args:
        options: the keyword options passed.
        where: the entry point's name, for the message.
        known: what it takes besides the pipeline's options.
        refused: options it knows but cannot honour -> why and what to do instead.

    Raises:
        ConfigError: an option is not one ``where`` takes.
    """
    valid = set(pipeline_options()) | set(known)
    for name, value in options.items():
        if name in valid:
            continue
        if refused and name in refused:
            raise ConfigError(f"{where}() cannot honour {name}=: {refused[name]}")
        if name in FOREIGN_OPTIONS:
            origin, fix = FOREIGN_OPTIONS[name]
            raise ConfigError(f"{where}() has no option {name}= ({origin}'s spelling): pass "
                              f"{fix(value)}")
        if name in LOADER_OPTIONS:
            raise ConfigError(
                f"{where}() has no option {name}= (a DataLoader option): pass it to a loader "
                "(aisio.webdataset_dataloader, webdataset_stateful_loader, ...)")
        near = difflib.get_close_matches(name, sorted(valid), n=1)
        hint = (f"did you mean {near[0]}=?" if near
                else f"its options are {', '.join(sorted(valid))}")
        raise ConfigError(f"{where}() has no option {name}=; {hint}")


__all__ = ["DEFAULT_SHUFFLE_BUFFER", "FOREIGN_OPTIONS", "LOADER_OPTIONS", "PipelineSpec",
           "check_map", "check_options", "pipeline_options"]
