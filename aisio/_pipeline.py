"""From ``"ais://bucket/shard-{000..099}.tar"`` to training batches through DataLoader2.

The pipeline is the one the AIStore + WebDataset articles build, in DataPipes::

    shard names -> shuffle shards -> sharding_filter -> AISFileLoader -> WebDatasetParser
      -> shuffle samples (buffer) -> decode -> to_tuple -> batch -> collate

``sharding_filter`` sits at shard level, so each shard is read by exactly one worker of one rank.
Everything random is seeded by DataLoader2: ``loader.seed(n)`` makes an epoch reproducible, and
each new epoch reshuffles.
"""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from typing import Any, Literal

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    import torch.distributed as dist
    import torch.utils.data.graph_settings
    from torch.utils.data.datapipes.iter.sharding import SHARDING_PRIORITIES
    from torchdata.dataloader2 import (
        DataLoader2,
        DistributedReadingService,
        MultiProcessingReadingService,
        SequentialReadingService,
    )
    from torchdata.dataloader2.reading_service import ReadingServiceInterface
    from torchdata.datapipes.iter import IterableWrapper, IterDataPipe

from aisio._cache import ShardCache
from aisio._config import AISConfig, resolve_config
from aisio._datapipes import AISFileLister, AISFileLoader, OnError, WebDatasetParser
from aisio._decode import Decoder, to_tuple
from aisio._errors import ObjectNotFoundError
from aisio._mpfix import install as _install_round_robin_fix
from aisio._report import ErrorReport
from aisio._sources import as_sources, expand, to_paths
from aisio._urls import ETL

Uneven = Literal["drop", "keep"]


class ToTuple:
    """Returns ``to_tuple(sample, *fields)``: a picklable map function for DataPipes.

    Example:
        >>> ToTuple("png;jpg", "cls")({"png": 1, "cls": 2, "__key__": "k"})
        (1, 2)
    """

    def __init__(self, *fields: str) -> None:
        self.fields = fields

    def __call__(self, sample: dict[str, Any]) -> tuple[Any, ...]:
        return to_tuple(sample, *self.fields)

    def __repr__(self) -> str:
        return f"ToTuple{self.fields!r}"


def shard_names(sources: Any, config: AISConfig | None = None) -> list[str]:
    """Returns the ``ais://`` names of the shards that sources stand for.

    Templates are expanded and SDK objects converted without I/O; a bucket or prefix
    (``ais://b/train/``) is listed once, here, rather than in every worker and every epoch.
    """
    names: list[str] = []
    for source in as_sources(sources):
        for path in to_paths(source):
            if path.is_template or (path.obj and not path.obj.endswith("/") and
                                    not isinstance(source, str)):
                names.extend(each.uri() for each in expand(path))
            elif isinstance(source, str) and path.obj and not path.obj.endswith("/"):
                names.append(path.uri())
            else:
                listed = list(AISFileLister([path.uri()], config=config))
                if not listed:
                    raise ObjectNotFoundError(
                        f"there are no objects under {path.uri()}; upload shards there or "
                        "fix the bucket/prefix", url=path.uri())
                names.extend(listed)
    return names


class ResampledShards(IterDataPipe):
    """Yields shard names drawn with replacement, forever: for multi-node epochs of fixed length.

    Seeded by DataLoader2 (a different stream in every worker of every rank).
    """

    def __init__(self, names: Sequence[str], seed: int = 0) -> None:
        if not names:
            raise ValueError("ResampledShards needs at least one shard name")
        self.names = list(names)
        self.seed = seed
        self._rng = random.Random(seed)

    def set_seed(self, seed: int) -> ResampledShards:
        self._rng = random.Random(seed)
        return self

    def __iter__(self) -> Iterator[str]:
        while True:
            yield self._rng.choice(self.names)


def webdataset_pipe(
    shards: Any,
    *,
    url: str | None = None,
    config: AISConfig | None = None,
    etl: ETL | str | None = None,
    shuffle_shards: bool = True,
    shuffle_buffer: int = 0,
    decode: str | Decoder | None = None,
    decode_threads: int = 0,
    tuple_fields: Sequence[str] | None = None,
    batch_size: int | None = None,
    collate: bool = True,
    on_error: OnError = "raise",
    report: ErrorReport | None = None,
    resampled: bool = False,
    concurrency: int = 1,
    cache: ShardCache | None = None,
) -> IterDataPipe:
    """Returns the DataPipe from shard names to samples, tuples or batches (see module doc).

    Args:
        shards: shard names or templates (``"ais://b/train-{0000..0099}.tar"``), a list of them,
            or SDK objects.
        url: AIStore endpoint (else ``config``, else ``AIS_ENDPOINT``).
        config: an :class:`AISConfig`.
        etl: an ETL to apply to every shard on the server.
        shuffle_shards: shuffle the shard order each epoch (before the shard split).
        shuffle_buffer: shuffle samples through a buffer of this many (0: off). Memory grows
            with it: it holds that many undecoded samples.
        decode: an image spec for :class:`Decoder` (``"torchrgb"``, ``"pil"``, ...) or a Decoder.
        decode_threads: decode with this many threads per process, in order (image decoders
            release the GIL, so this helps where cores are idle; on the 2-core benchmark
            machine, shared with the AIStore node, it did not); 0 decodes inline.
        tuple_fields: fields to turn each sample into a tuple, e.g. ``("png;jpg", "cls")``.
        batch_size: batch in the worker (before samples cross to the main process).
        collate: collate batches into tensors with torch's default collate.
        on_error: what to do with a bad or missing shard: ``raise``, or ``warn``/``skip`` to
            go on with the next one, recorded in ``report``.
        report: where skipped shards are recorded; by default a temporary file that worker
            processes share, available as ``pipe.report``.
        resampled: draw shards with replacement forever (cap the epoch with ``.header(n)`` or
            :func:`webdataset_loader`'s ``samples_per_epoch``).
        concurrency: parallel GETs (for many small shards).
        cache: a :class:`ShardCache` keeping read shards on local disk for later epochs.
    """
    cfg = resolve_config(url, config)
    names = shard_names(shards, cfg)
    if report is None:
        report = ErrorReport.temporary() if on_error != "raise" else ErrorReport()
    pipe: IterDataPipe
    if resampled:
        pipe = ResampledShards(names)
    else:
        pipe = IterableWrapper(names, deepcopy=False)
        if shuffle_shards:
            pipe = pipe.shuffle(buffer_size=len(names))
        pipe = pipe.sharding_filter()
    pipe = AISFileLoader(pipe, config=cfg, etl=etl, concurrency=concurrency, on_error=on_error,
                         report=report, cache=cache)
    pipe = WebDatasetParser(pipe, on_error=on_error, report=report)
    if shuffle_buffer:
        pipe = pipe.shuffle(buffer_size=shuffle_buffer)
    if decode is not None:
        decoder = decode if isinstance(decode, Decoder) else Decoder(decode)
        if decode_threads:
            pipe = pipe.threadpool_map(decoder, max_workers=decode_threads)
        else:
            pipe = pipe.map(decoder)
    if tuple_fields:
        pipe = pipe.map(ToTuple(*tuple_fields))
    if batch_size:
        pipe = pipe.batch(batch_size)
        if collate:
            pipe = pipe.collate()
    pipe.report = report
    return pipe


class KeepUnevenReadingService(DistributedReadingService):
    """Splits the pipe across ranks and shares rank 0's seed, like DistributedReadingService, but
    without its ``fullsync``: each rank reads all of its share, so ranks may end at different
    steps (use ``torch.distributed.algorithms.Join`` around DDP training)."""

    def initialize(self, datapipe: IterDataPipe) -> IterDataPipe:
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("torch.distributed must be initialised before the loader is built")
        self._world_size = dist.get_world_size()
        self._rank = dist.get_rank()
        self._pg = dist.new_group(backend="gloo", timeout=timedelta(seconds=self._timeout))
        torch.utils.data.graph_settings.apply_sharding(
            datapipe, self._world_size, self._rank, SHARDING_PRIORITIES.DISTRIBUTED
        )
        self._datapipe = datapipe
        return datapipe


def reading_service(num_workers: int = 0, *, uneven: Uneven = "drop", worker_prefetch: int = 10,
                    main_prefetch: int = 10) -> ReadingServiceInterface | None:
    """Returns the reading service for ``num_workers`` processes, distributed when initialised.

    With ``torch.distributed`` initialised, shards are split across ranks (rank 0's seed is
    shared, so every rank agrees on the shuffled shard order), then across each rank's workers.
    Ranks rarely get equal numbers of samples; ``uneven`` says what happens then:

    * ``"drop"``: every rank yields the same number of items per epoch (torchdata's ``fullsync``):
      when the first rank runs out, all stop, and the others' surplus is dropped for this epoch
      (a different surplus each epoch, as shards are reshuffled). DDP never hangs.
    * ``"keep"``: every item is yielded exactly once across ranks; ranks may stop at different
      steps, so DDP training needs ``torch.distributed.algorithms.Join``.
    """
    if uneven not in ("drop", "keep"):
        raise ValueError(f"uneven={uneven!r} must be 'drop' or 'keep'")
    mp = MultiProcessingReadingService(num_workers=num_workers,
                                       worker_prefetch_cnt=worker_prefetch,
                                       main_prefetch_cnt=main_prefetch) if num_workers else None
    if dist.is_available() and dist.is_initialized():
        dist_rs = DistributedReadingService() if uneven == "drop" else KeepUnevenReadingService()
        return SequentialReadingService(dist_rs, mp) if mp else dist_rs
    return mp


class EpochLoader(DataLoader2):
    """A DataLoader2 whose seed advances every epoch.

    DataLoader2 seeded with ``seed(n)`` replays the same shuffles every epoch when the shuffles
    run in worker processes (the main process's seed generator never advances). Here epoch ``e``
    is seeded from ``(seed, e)``: a run is reproducible, and each epoch is shuffled anew.
    ``set_epoch(e)`` picks the epoch explicitly (e.g. when resuming).
    """

    def __init__(self, pipe: IterDataPipe, reading_service: ReadingServiceInterface | None,
                 seed: int | None) -> None:
        super().__init__(pipe, reading_service=reading_service)
        self.base_seed = seed
        self.epoch = 0
        #: what ``on_error="skip"``/``"warn"`` left out (set by :func:`webdataset_loader`).
        self.report: ErrorReport | None = None

    def set_epoch(self, epoch: int) -> None:
        """Makes the next iteration epoch ``epoch``."""
        self.epoch = epoch

    def __iter__(self) -> Any:
        if self.base_seed is not None:
            self.seed(random.Random(f"{self.base_seed}:{self.epoch}").getrandbits(63))
        self.epoch += 1
        return super().__iter__()


def make_loader(pipe: IterDataPipe, *, num_workers: int = 0, seed: int | None = None,
                uneven: Uneven = "drop", worker_prefetch: int = 10,
                main_prefetch: int = 10) -> EpochLoader:
    """Returns a DataLoader2 over ``pipe`` with the right reading service (see above).

    ``seed`` makes every epoch reproducible; each epoch still reshuffles (see EpochLoader).
    """
    _install_round_robin_fix()
    return EpochLoader(pipe, reading_service(num_workers, uneven=uneven,
                                             worker_prefetch=worker_prefetch,
                                             main_prefetch=main_prefetch), seed)


def webdataset_loader(
    shards: Any,
    *,
    num_workers: int = 0,
    seed: int | None = None,
    uneven: Uneven = "drop",
    samples_per_epoch: int | None = None,
    post: Callable[[IterDataPipe], IterDataPipe] | None = None,
    **pipe_options: Any,
) -> EpochLoader:
    """Returns a DataLoader2 that streams batches from AIStore shards: the one-call entry point.

    Args:
        shards: as for :func:`webdataset_pipe`.
        num_workers: worker processes (0: read in the main process).
        seed: makes the shuffles reproducible (each epoch still reshuffles).
        uneven: with torch.distributed, ``"drop"`` or ``"keep"`` (see :func:`reading_service`).
        samples_per_epoch: with ``resampled=True``, the epoch length per rank (in items the
            pipe yields: batches when ``batch_size`` is set); split across workers.
        post: a function applied to the pipe last (e.g. extra maps), still inside the workers.
        **pipe_options: passed to :func:`webdataset_pipe` (url, etl, decode, batch_size, ...).

    Example:
        >>> loader = webdataset_loader("ais://b/train-{000..099}.tar", decode="torchrgb",
        ...     tuple_fields=("png", "cls"), batch_size=64, num_workers=2)   # doctest: +SKIP
    """
    pipe = webdataset_pipe(shards, **pipe_options)
    report: ErrorReport = pipe.report
    if samples_per_epoch is not None:
        if not pipe_options.get("resampled"):
            raise ValueError("samples_per_epoch goes with resampled=True (exact epochs end "
                             "when the shards do)")
        # Each worker yields its part; the total is rounded up to a multiple of num_workers.
        pipe = pipe.header(math.ceil(samples_per_epoch / max(1, num_workers)))
    if post is not None:
        pipe = post(pipe)
    loader = make_loader(pipe, num_workers=num_workers, seed=seed, uneven=uneven)
    loader.report = report
    return loader
