"""``order="deterministic"`` as a loader: the readers' side, the training loop, the options.

Every one-call loader takes ``order="fast"`` (the default: each worker's own exactly-once
stream, :class:`~aisio.core.pipeline.loop.ResumableLoader`) or ``order="deterministic"`` (the
design in
:mod:`aisio.core.order.streams`). In the deterministic order a front end supplies only the plumbing:

* :class:`OrderSetup` (picklable) is what every reader needs; its :meth:`~OrderSetup.rounds`
  is what one reader (a worker, or the training process) iterates each epoch: the chunks of its
  streams, a pack per group of rounds, for the epoch the training process published on its
  :class:`~aisio.core.epochs.plan.EpochPlan` (so that workers live across epochs).
* :class:`DeterministicOrder` is the training side: the backend of the one loader class,
  :class:`~aisio.core.pipeline.loop.ResumableLoader`, in this order: each ``iter()`` is an
  epoch of the rank's batches, put back in order by a
  :class:`~aisio.core.order.reorder.Reorderer`, collated here.

Framework-free: the front end passes its loader (``open_epoch``) and its collate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from aisio.core.epochs.plan import EpochPlan
from aisio.core.faults.errors import AISIOError, ConfigError, StateMismatchError
from aisio.core.faults.policy import SKIPPED, warn_in_user_code
from aisio.core.order.reader import Chunk, reader_rounds, reorder_window, rounds_per_item
from aisio.core.order.reorder import Reorderer
from aisio.core.order.streams import OrderPlan, check_order_state, merge_order_states
from aisio.core.pipeline.loop import NOTHING, raise_failure
from aisio.core.pipeline.spec import PipelineSpec
from aisio.core.store.sources import ObjectRef
from aisio.core.transport.delivery import Failure, ship_errors

ORDERS = ("fast", "deterministic")
"""The values of ``order=``."""

STREAMS_CAP = 8
"""Without ``streams=``, ``K`` is the largest divisor of the global batch size up to this and
up to the number of shards (a stream without a shard would leave its share of every batch
empty) that the ranks divide (:func:`default_streams`)."""


def default_streams(batch: int, shards: int, world: int) -> int | None:
    """Returns ``K`` when ``streams=`` is not given: the largest divisor of ``batch`` that is
    at most :data:`STREAMS_CAP` and ``shards`` and a multiple of ``world`` (None: there is
    none, and the caller names what fits)."""
    cap = max(1, min(STREAMS_CAP, shards))
    fits = [k for k in range(1, cap + 1) if batch % k == 0 and k % world == 0]
    return max(fits) if fits else None


def uneven_streams(batch: int, shards: int, streams: int) -> str | None:
    """Returns why every batch of ``streams`` over fewer ``shards`` is short, and which
    ``streams=`` is not, or None when every stream has a shard."""
    if shards >= streams:
        return None  # (uneven shard counts shrink only the last rounds: see the docs)
    why = (f"{streams - shards} of the {streams} streams have no shard, so every batch has at "
           f"most {batch * shards // streams} of the {batch} samples asked for")
    even = [k for k in range(1, min(batch, shards) + 1) if batch % k == 0 and shards % k == 0]
    return (f"streams={streams} over {shards} shards: {why}; streams={max(even)} gives "
            f"batches of {batch} wherever the shards' samples allow (streams= divides both "
            "batch_size and the number of shards)")


def is_deterministic(order: str, where: str) -> bool:
    """Returns whether ``order`` asks for the deterministic order.

    Raises:
        ConfigError: ``order`` is not one of :data:`ORDERS`.
    """
    if order not in ORDERS:
        raise ConfigError(f"{where}() has no order={order!r}: pass order=\"fast\" (the default) "
                          "or order=\"deterministic\" (the same batches on any workers and "
                          "ranks, and after any resume)")
    return order == "deterministic"


def refuse_streams(streams: int | None, where: str) -> None:
    """Raises a ConfigError when ``streams=`` is given without ``order="deterministic"``."""
    if streams is not None:
        raise ConfigError(f"{where}(): streams= goes with order=\"deterministic\" (the canonical "
                          "streams); pass both, or drop streams=")


#: Pipeline options the deterministic order cannot honour, and why.
_REFUSED = {
    "drop_last": "the deterministic order's last rounds are short by design (streams run out "
                 "unevenly) and dropping them per rank would break the order across ranks; "
                 "drop drop_last (skip short batches in the loop if you must)",
    "decode_threads": "in the deterministic order each reader decodes its samples as they "
                      "leave its streams' buffers; use more num_workers instead",
    "resampled": "resampled shards have no fixed order to reproduce; use order=\"fast\"",
}


def check_ordered_options(options: dict[str, Any], where: str) -> None:
    """Raises a ConfigError for a pipeline option the deterministic order cannot honour."""
    for name, why in _REFUSED.items():
        if options.get(name):
            raise ConfigError(f"{where}(order=\"deterministic\") cannot honour {name}=: {why}")
    if not options.get("batch_size"):
        raise ConfigError(f"{where}(order=\"deterministic\") needs batch_size=G, the global "
                          "batch size (each of R ranks yields G/R samples a step)")


@dataclass(frozen=True)
class OrderSetup:
    """What the readers of one rank need, the same in every process (pickled to workers).

    Args:
        shards: the loader's shard list.
        spec: the pipeline's options (``shuffle_buffer`` is each stream's buffer).
        seed: the run's seed (the same on every rank).
        streams: ``K``, the canonical streams (None: :data:`STREAMS_CAP`'s rule).
        batch: ``G``, the global batch size.
        rank: this rank.
        world: the number of ranks.
        epochs: where the training process publishes each epoch (and a resumed state).

    Raises:
        ConfigError: ``K`` does not divide ``G``, or the number of ranks does not divide ``K``.
    """

    shards: tuple[ObjectRef, ...]
    spec: PipelineSpec
    seed: int
    streams: int
    batch: int
    rank: int
    world: int
    epochs: EpochPlan

    @classmethod
    def build(cls, shards: Sequence[ObjectRef], spec: PipelineSpec, *, seed: int,
              streams: int | None, rank: int, world: int, epochs: EpochPlan,
              where: str) -> OrderSetup:
        """Returns the setup, the streams and batch size checked against the ranks."""
        batch = int(spec.batch_size or 0)
        k = (default_streams(batch, len(shards), world) or math.gcd(batch, STREAMS_CAP)
             if streams is None else int(streams))
        if k < 1 or batch % k:
            divisors = [d for d in range(1, min(batch, 64) + 1) if batch % d == 0]
            raise ConfigError(
                f"{where}(order=\"deterministic\"): streams={k} must divide the global "
                f"batch_size={batch}; pass streams= one of {divisors}")
        if k % world:
            raise ConfigError(
                f"{where}(order=\"deterministic\"): {world} ranks cannot share streams={k} "
                f"evenly; pass streams= a multiple of {world} that divides batch_size={batch} "
                "(the order depends on streams, not on the number of ranks)")
        if batch % world:
            raise ConfigError(f"{where}(order=\"deterministic\"): {world} ranks cannot share "
                              f"the global batch_size={batch}; pass a multiple of {world}")
        shrink = uneven_streams(batch, len(shards), k)
        if shrink is not None:
            warn_in_user_code(f"{where}(order=\"deterministic\"): {shrink}")
        return cls(tuple(shards), spec, seed, k, batch, rank, world, epochs)

    def plan(self, epoch: int) -> OrderPlan:
        """Returns epoch ``epoch``'s plan."""
        return OrderPlan(self.shards, seed=self.seed, epoch=epoch, streams=self.streams,
                         batch=self.batch, buffer=self.spec.shuffle_buffer,
                         shuffle_shards=self.spec.shuffle_shards)

    def rounds(self, worker: int = 0, workers: int = 1, *, stage: bool = True
               ) -> Iterator[Any]:
        """Yields what reader ``worker`` of ``workers`` sends in the published epoch: a
        pack of chunks per group of rounds (:func:`~aisio.core.order.reader.reader_rounds`);
        an aisio error ends it as a last :class:`~aisio.core.transport.delivery.Failure`. With
        ``stage=False`` the samples are left undecoded (the front end applies
        :meth:`stage_pack`)."""
        epoch, state = self.epochs.read()
        plan = self.plan(epoch)
        streams = plan.reader_streams(self.rank, self.world, worker, workers)
        group = rounds_per_item(plan, plan.rank_streams(self.rank, self.world), workers)
        fetcher = self.spec.fetcher()
        return ship_errors(reader_rounds(
            plan, streams, fetcher.open, state=state, policy=fetcher.policy,
            stage=self.spec.stage() if stage else None, group=group))

    def read(self, worker: int = 0, workers: int = 1) -> Iterator[Any]:
        """Same as :meth:`rounds` (what every reader of :mod:`aisio.core.pipeline.epoch`
        has)."""
        return self.rounds(worker, workers)

    def stage_pack(self, pack: Any) -> Any:
        """Applies the per-sample stage to a pack of chunks from ``rounds(stage=False)``; an
        aisio error becomes a :class:`~aisio.core.transport.delivery.Failure`."""
        stage = self.spec.stage()
        if stage is None or isinstance(pack, Failure):
            return pack
        try:
            for chunk in pack:
                chunk.values = [stage(value) for value in chunk.values]
        except AISIOError as exc:
            return Failure.of(exc)
        return pack


class DeterministicOrder:
    """The deterministic order as a :class:`~aisio.core.pipeline.loop.ResumableLoader`'s
    backend: each epoch yields this rank's batches, the readers' packs put back in order by a
    :class:`~aisio.core.order.reorder.Reorderer` and collated here. Rank ``r`` of ``R`` yields
    its ``G/R`` part of each global batch (smaller in the last rounds, when streams have run
    out).

    Args:
        setup: the rank's :class:`OrderSetup`.
        collate: makes a batch of a list of samples (None: the list as it is).
        window: the most items (groups of rounds, :func:`rounds_per_item`) that may wait for
            an earlier one.
    """

    resumable = True

    def __init__(self, setup: OrderSetup, *, collate: Callable[[list[Any]], Any] | None = None,
                 window: int = 64) -> None:
        self.setup = setup
        self.shards = list(setup.shards)
        self.seed = setup.seed
        self.collate = collate
        plan = setup.plan(0)
        self.window = reorder_window(plan, plan.rank_streams(setup.rank, setup.world), window)

    def start(self, epoch: int, resume: dict[str, Any] | None) -> _OrderedEpoch:
        if resume is not None and resume.get("epoch") != epoch:
            resume = None
        setup = self.setup
        reorderer = Reorderer(setup.plan(epoch), setup.rank, setup.world, state=resume,
                              window=self.window)
        return _OrderedEpoch(reorderer, resume, self.collate)

    def state_at(self, epoch: int, loaded: dict[str, Any] | None) -> dict[str, Any]:
        setup = self.setup
        fresh = Reorderer(setup.plan(epoch), setup.rank, setup.world).state_dict()
        if loaded is not None:  # loaded, not started: this rank's streams of it
            fresh["state"] = {k: loaded["state"][k] for k in fresh["state"]}
        return fresh

    def checked(self, state: dict[str, Any] | Sequence[dict[str, Any]]) -> dict[str, Any]:
        if not isinstance(state, dict):
            state = merge_order_states(list(state))
        epoch = state.get("epoch")
        if not isinstance(epoch, int):
            raise StateMismatchError(
                "this is not an aisio deterministic-order state (it names no epoch); pass what "
                "the loader's state_dict() returned with order=\"deterministic\"")
        check_order_state(state, self.setup.plan(epoch))
        return state

    def describe(self) -> str:
        return f", {self.setup.streams} streams, batch {self.setup.batch}"


class _OrderedEpoch:
    """An epoch of :class:`DeterministicOrder`: the rank's rounds, in order, as batches."""

    def __init__(self, reorderer: Reorderer, resume: dict[str, Any] | None,
                 collate: Callable[[list[Any]], Any] | None) -> None:
        self.reorderer = reorderer
        self.resume = resume
        self.collate = collate

    def batches(self, items: Iterable[Any]) -> Iterator[tuple[Any, Callable[[], None]]]:
        collate = self.collate
        for batch, receive in self.reorderer.rounds(_packs(items)):
            # a round with none of this rank's samples, or all of them skipped (on_error)
            values = [value for value in batch if value is not SKIPPED]
            if not values:
                yield NOTHING, receive
                continue
            yield (collate(values) if collate is not None else values), receive

    def state_dict(self) -> dict[str, Any]:
        return self.reorderer.state_dict()

    def held(self) -> int | None:
        return None  # (the deterministic order does not count what a stop drops)


def _packs(items: Iterable[Any]) -> Iterator[list[Chunk]]:
    """Yields the readers' packs; a :class:`Failure` raises its error here."""
    for item in items:
        if isinstance(item, Failure):
            raise_failure(item)
        yield item


__all__ = ["ORDERS", "STREAMS_CAP", "DeterministicOrder", "OrderSetup", "check_ordered_options",
           "default_streams", "uneven_streams",
           "is_deterministic", "refuse_streams"]
