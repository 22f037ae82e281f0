"""The pipeline's options, checked once: what every front end builds the same pipeline from.

Every loader entry point (DataLoader2, DataLoader, StatefulDataLoader, torchdata.nodes) takes the
same keyword options as :func:`aisio.webdataset_pipe`. They are declared once, with their
defaults and docs, as the fields of :class:`PipelineOptions`; the entry points' docs and
:func:`aisio.webdataset_pipe`'s signature are made from it, and :meth:`PipelineSpec.build` checks
them and turns them into one frozen, picklable value: the rules (defaults, types, what goes with
what) live here.
"""

from __future__ import annotations

import difflib
import inspect
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from aisio.core.decode.decoders import Decoder, field_names
from aisio.core.decode.runs import run_plan
from aisio.core.faults.errors import ConfigError
from aisio.core.faults.policy import ErrorPolicy, OnError, check_on_error
from aisio.core.faults.report import ErrorReport
from aisio.core.format.tar.runs import RunPlan
from aisio.core.pipeline.fetch import Fetcher
from aisio.core.pipeline.loader_options import LOADER_OPTIONS, loader_options_doc
from aisio.core.pipeline.stages import SampleStage
from aisio.core.store.cache import ShardCache
from aisio.core.store.config import AISConfig, resolve_config
from aisio.core.store.protocol import ObjectStore
from aisio.core.store.urls import ETL, to_etl
from aisio.core.system.tempfiles import owned_temporary
from aisio.core.system.timing import StageTimes

#: Samples each reading process (worker) holds in its shuffle buffer unless ``shuffle_buffer=``
#: says otherwise: the loaders shuffle by default. The buffer holds undecoded samples, so it costs
#: about this many times the mean sample's size per worker (1000 x 100 KiB JPEGs: ~100 MB each),
#: and the first sample waits until it is full (or the worker's shards run out).
#: ``shuffle_buffer=0`` reads samples in shard order.
DEFAULT_SHUFFLE_BUFFER = 1000


@dataclass(frozen=True)
class PipelineOptions:
    """The pipeline's options, as a user passes them: declared here once, with their defaults
    and docs. Every entry point takes them by keyword (:func:`aisio.webdataset_pipe` and every
    loader); their docs (:func:`options_doc`), :func:`aisio.webdataset_pipe`'s signature
    (:func:`options_signature`) and the names an unknown option is matched against
    (:func:`pipeline_options`) are made from these fields, and :meth:`PipelineSpec.build` checks
    them.
    """

    endpoint: str | None = field(default=None, metadata={"doc": (
        "AIStore endpoint (else ``config``, else ``AIS_ENDPOINT``); ``url=`` is accepted too, "
        "as the removed AIStore/torchdata DataPipes spelled it.")})
    url: str | None = field(default=None, metadata={"doc": (
        "the same as ``endpoint`` (the DataPipes' spelling).")})
    config: AISConfig | None = field(default=None, metadata={"doc": "an :class:`AISConfig`."})
    etl: ETL | str | Any | None = field(default=None, metadata={"doc": (
        "an ETL to apply to every shard on the server.")})
    shuffle_shards: bool = field(default=True, metadata={"doc": (
        "shuffle the shard order each epoch (before the shard split).")})
    shuffle_buffer: int = field(default=DEFAULT_SHUFFLE_BUFFER, metadata={"doc": (
        "shuffle samples through a buffer of this many, in each reading process (default 1000, "
        "as every aisio loader; 0: shard order). It holds that many undecoded samples per "
        "worker (1000 x 100 KiB JPEGs: about 100 MB each), and the first sample waits until it "
        "is full or the worker's shards run out.")})
    decode: str | Decoder | None = field(default=None, metadata={"doc": (
        "an image spec for :class:`Decoder` (``\"torchrgb\"``, ``\"pil\"``, ...) or a "
        "Decoder.")})
    decode_threads: int = field(default=0, metadata={"doc": (
        "decode with this many threads per process, in order (image decoders release the GIL, "
        "so this helps where cores are idle); 0 decodes inline.")})
    tuple_fields: Sequence[str] | str | None = field(default=None, metadata={"doc": (
        "fields to turn each sample into a tuple, e.g. ``(\"png;jpg\", \"cls\")`` or "
        "``\"png;jpg cls\"`` (webdataset's spelling); ``__key__`` (and ``__url__``) put each "
        "sample's key (its shard's name) in the batch, a tuple of strings.")})
    batch_size: int | None = field(default=None, metadata={"doc": (
        "batch in the worker (before samples cross to the main process).")})
    collate: bool = field(default=True, metadata={"doc": (
        "collate batches into tensors with torch's default collate.")})
    drop_last: bool = field(default=False, metadata={"doc": (
        "drop each reader's last batch when it has fewer than ``batch_size`` samples (per "
        "worker and per rank, as a DataLoader's batches are made in them).")})
    on_error: OnError = field(default="raise", metadata={"doc": (
        "what to do with a bad or missing shard, and with a bad sample (a field that does not "
        "decode, or lacks a field of ``tuple_fields``): ``raise``, or ``warn``/``skip`` to go "
        "on with the next shard or sample, recorded in ``report`` (shard, offset or "
        "``<key>.<field>``, reason).")})
    report: ErrorReport | None = field(default=None, metadata={"doc": (
        "where skipped shards and samples are recorded; by default a temporary file that "
        "worker processes share, available as ``pipe.report``.")})
    concurrency: int = field(default=1, metadata={"doc": "parallel GETs (for many small shards)."})
    cache: ShardCache | None = field(default=None, metadata={"doc": (
        "a :class:`ShardCache` keeping read shards on local disk for later epochs.")})
    store: ObjectStore | None = field(default=None, metadata={"doc": (
        "where the shards are read and listed from (default: the AIStore cluster of the "
        "endpoint); e.g. a :class:`MemoryStore` in tests. It must pickle, to reach the "
        "workers.")})
    timings: bool = field(default=False, metadata={"doc": (
        "measure where the time goes (network reads, tar parsing, decoding) in every process, "
        "as ``pipe.timings`` (a :class:`~aisio.core.system.timing.StageTimes`).")})
    map: Callable[[Any], Any] | None = field(default=None, metadata={"doc": (
        "a function applied to each sample (or tuple, after ``decode`` and ``tuple_fields``) "
        "before batching, in the workers: webdataset's ``.map`` / ``.map_tuple``. The one-call "
        "loaders stay resumable with it (each result keeps its sample's position). With "
        "workers it must pickle: ``def`` at module level.")})


@dataclass(frozen=True)
class PipelineSpec:
    """Everything between a shard and a batch, except the shards and the loader: the
    :class:`PipelineOptions` checked and resolved (the endpoint to a config, ``decode`` to a
    :class:`Decoder`, ``timings`` to the shared :class:`StageTimes`, ...).

    Build it with :meth:`build`, which takes the pipeline options by keyword.
    """

    config: AISConfig
    etl: ETL | None
    shuffle_shards: bool
    shuffle_buffer: int
    decoder: Decoder | None
    decode_threads: int
    tuple_fields: tuple[str, ...] | None
    batch_size: int | None
    collate: bool
    drop_last: bool
    on_error: OnError
    report: ErrorReport
    concurrency: int
    cache: ShardCache | None
    times: StageTimes | None
    map: Callable[[Any], Any] | None
    store: ObjectStore | None

    @classmethod
    def build(cls, **options: Any) -> PipelineSpec:
        """Returns the spec for these options (the fields of :class:`PipelineOptions`): the
        one place they are checked.

        Raises:
            ValueError: an option is out of range.
            ConfigError: an option it does not know, or no endpoint is given or set.
        """
        check_options(options, where="PipelineSpec.build")
        given = PipelineOptions(**options)
        check_on_error(given.on_error)
        if given.shuffle_buffer < 0 or given.decode_threads < 0:
            raise ValueError("shuffle_buffer and decode_threads must be >= 0")
        batch_size = given.batch_size
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size={batch_size} must be at least 1 (None: no batches)")
        if given.drop_last and not batch_size:
            raise ConfigError("drop_last=True drops each reader's last incomplete batch: it goes "
                              "with batch_size=N (or drop drop_last)")
        fields = (None if given.tuple_fields is None
                  else field_names(given.tuple_fields, what="tuple_fields"))
        report = given.report
        if report is None:
            report = (ErrorReport.temporary(owned_temporary("aisio-errors-", ".jsonl"))
                      if given.on_error != "raise" else ErrorReport())
        decode = given.decode
        return cls(
            config=resolve_config(given.url, given.config, endpoint=given.endpoint),
            etl=to_etl(given.etl),
            shuffle_shards=given.shuffle_shards,
            shuffle_buffer=given.shuffle_buffer,
            decoder=decode if isinstance(decode, Decoder) or decode is None else Decoder(decode),
            decode_threads=given.decode_threads,
            tuple_fields=tuple(fields) if fields else None,
            batch_size=batch_size,
            collate=given.collate,
            drop_last=bool(given.drop_last),
            on_error=given.on_error,
            report=report,
            concurrency=given.concurrency,
            cache=given.cache,
            times=StageTimes.temporary() if given.timings else None,
            map=check_map(given.map),
            store=check_store(given.store),
        )

    def stage(self) -> SampleStage | None:
        """Returns the per-sample stage (decode, tuple, under the error policy), if any."""
        if (self.decoder is None and self.tuple_fields is None and self.times is None
                and self.map is None):
            return None
        return SampleStage(self.decoder, self.tuple_fields, on_error=self.on_error,
                           report=self.report, times=self.times, map=self.map)

    def runs(self) -> RunPlan | None:
        """Returns what the resumable loaders' parser may give at once for runs of regular
        samples (:mod:`aisio.core.format.tar.runs`): the stage's tuple of picked fields, when that
        is all the stage does and every batch is collated from such tuples as they come; else
        None (per sample: a sample shuffle, decode threads, ``map``, ``drop_last``, alternatives
        between fields, a decoder a run does not give)."""
        if (not self.batch_size or not self.collate or self.shuffle_buffer or self.decode_threads
                or self.drop_last or self.map is not None or self.tuple_fields is None):
            return None
        return run_plan(self.decoder, self.tuple_fields)

    def fetcher(self) -> Fetcher:
        """Returns the fetcher that reads this pipeline's shards."""
        return Fetcher(self.config, self.etl, self.concurrency, 0, self.cache,
                       ErrorPolicy(self.on_error, self.report), self.store)


def check_store(store: Any) -> ObjectStore | None:
    """Returns ``store=`` as given, or raises ConfigError when it is not an object store."""
    if store is not None and not isinstance(store, ObjectStore):
        raise ConfigError(
            f"store={store!r} is not an object store: pass aisio.MemoryStore(...), or an object "
            "with the methods of aisio.core.store.protocol.ObjectStore (open, version, "
            "get_batch, list_pages, bucket_names); leave it out to read from AIStore")
    return store


def check_map(fn: Any) -> Callable[[Any], Any] | None:
    """Returns ``map=`` as given, or raises ConfigError when it is not a function."""
    if fn is not None and not callable(fn):
        raise ConfigError(
            f"map={fn!r} is not a function; pass a function of one sample (or tuple), e.g. "
            "map=augment, defined with `def` at module level when there are workers")
    return fn


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
    """Returns the names of the pipeline's options (the fields of :class:`PipelineOptions`)."""
    return tuple(option.name for option in fields(PipelineOptions))


#: The width of the option docs made for the entry points' docstrings.
_DOC_WIDTH = 96


def options_doc(*, exclude: Iterable[str] = (),
                extra: Iterable[tuple[str, str]] = ()) -> str:
    """Returns the pipeline options as the entries of a Google-style "Args:" section (indented
    for a function's docstring), from their one declaration (:class:`PipelineOptions`):
    every option but ``exclude``, then the ``(name, doc)`` pairs of ``extra``."""
    skip = set(exclude)
    entries = [(option.name, option.metadata["doc"]) for option in fields(PipelineOptions)
               if option.name not in skip]
    return "\n".join(
        textwrap.fill(f"{name}: {doc}", width=_DOC_WIDTH, initial_indent=" " * 8,
                      subsequent_indent=" " * 12, break_on_hyphens=False,
                      break_long_words=False)
        for name, doc in [*entries, *extra])


def options_signature(fn: Callable[..., Any]) -> inspect.Signature:
    """Returns ``fn``'s signature with its ``**options`` spelled out as the pipeline options
    (keyword-only, with their declared defaults and types): what ``help()`` and ``inspect``
    show for an entry point that passes its ``**options`` on to :meth:`PipelineSpec.build`."""
    signature = inspect.signature(fn)
    options = [inspect.Parameter(option.name, inspect.Parameter.KEYWORD_ONLY,
                                 default=option.default, annotation=option.type)
               for option in fields(PipelineOptions)]
    parameters: list[inspect.Parameter] = []
    for parameter in signature.parameters.values():
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            parameters += options
        else:
            parameters.append(parameter)
    return signature.replace(parameters=parameters)


F = TypeVar("F", bound=Callable[..., Any])


def documents_options(*, exclude: Sequence[str] = (), extra: Iterable[tuple[str, str]] = (),
                      signature: bool = False, loader: bool = True,
                      where: str | None = None) -> Callable[[F], F]:
    """Appends the pipeline options (:func:`options_doc`) to an entry point's docstring, so
    that ``help(aisio.webdataset_dataloader)`` shows every option it takes, not a pointer, and
    the ConfigError it raises (a ``loader``'s set-up also raises it for ranks given other
    shards); with ``where`` (a one-call loader's name), also its loader options, from their
    table (:data:`~aisio.core.pipeline.loader_options.LOADER_OPTIONS`); with ``signature``,
    also gives it :func:`options_signature` (for an entry point whose ``**options`` are the
    pipeline options alone)."""
    ranks = ("; or, under torch.distributed, ranks given other shards than rank 0"
             if loader else "")
    raises = textwrap.fill(
        f"ConfigError: an option it does not take, named with the one to use (webdataset's "
        f"spellings get aisio's){ranks}.", width=_DOC_WIDTH, initial_indent=" " * 8,
        subsequent_indent=" " * 12, break_on_hyphens=False)

    passed = ("" if where is None else "\n\n    Loader options (DataLoader's, by keyword):\n"
              + loader_options_doc(where, width=_DOC_WIDTH))

    def document(fn: F) -> F:
        fn.__doc__ = (f"{(fn.__doc__ or '').rstrip()}\n\n    Pipeline options (by keyword, "
                      f"the same for every loader):\n"
                      f"{options_doc(exclude=exclude, extra=extra)}{passed}\n\n"
                      f"    Raises:\n{raises}\n")
        if signature:
            fn.__signature__ = options_signature(fn)  # type: ignore[attr-defined]
        return fn

    return document


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


# help(PipelineSpec.build) shows the options it takes
PipelineSpec.build.__func__.__signature__ = options_signature(  # type: ignore[attr-defined]
    PipelineSpec.build.__func__)  # type: ignore[attr-defined]


__all__ = ["DEFAULT_SHUFFLE_BUFFER", "FOREIGN_OPTIONS", "LOADER_OPTIONS", "PipelineOptions",
           "PipelineSpec", "check_map", "check_options", "check_store", "documents_options",
           "options_doc", "options_signature", "pipeline_options"]
