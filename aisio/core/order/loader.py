"""``order="deterministic"`` as a loader: the readers' side, the training loop, the options.

Every one-call loader takes ``order="fast"`` (the default: each worker's own exactly-once
stream, :class:`~aisio.core.pipeline.loop.ResumableLoader`) or ``order="deterministic"`` (the
design in
:mod:`aisio.core.order.streams`). In the deterministic order a front end supplies only the plumbing:

* :class:`OrderSetup` (picklable) is what every reader needs; its :meth:`~OrderSetup.rounds`
  is what one reader (a worker, or the training process) iterates each epoch: the chunks of its
  streams, a pack per group of rounds, for the epoch the training process published on its
  :class:`~aisio.core.epochs.plan.EpochPlan` (so that workers live across epochs).
* :class:`OrderedLoader` is the training side every front end shares, with the surface of
  :class:`~aisio.core.pipeline.loop.ResumableLoader`: each ``iter()`` is an epoch of the rank's
  batches, put back in order by a :class:`~aisio.core.order.reorder.Reorderer`, collated here.

Framework-free: the front end passes its loader (``open_epoch``) and its collate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from aisio.core.epochs.plan import EpochPlan
from aisio.core.epochs.received import FollowsTrainer, Received
from aisio.core.faults.errors import AISIOError, ConfigError, StateMismatchError, WorkerTraceback
from aisio.core.faults.policy import SKIPPED, check_epoch, warn_in_user_code
from aisio.core.order.reader import Chunk, reader_rounds, reorder_window, rounds_per_item
from aisio.core.order.reorder import Reorderer
from aisio.core.order.streams import OrderPlan, check_order_state, merge_order_states
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


OpenEpoch = Callable[[int, "dict[str, Any] | None"], Iterable[Any]]


class OrderedLoader(FollowsTrainer):
    """Iterates epochs of the deterministic order: each ``iter()`` yields this rank's batches.

    The same surface as :class:`~aisio.core.pipeline.loop.ResumableLoader` (``epoch``,
    ``set_epoch``,
    ``state_dict``, ``load_state_dict``, ``close``/``shutdown``, ``report``, ``timings``).
    Rank ``r`` of ``R`` yields its ``G/R`` part of each global batch (smaller in the last
    rounds, when streams have run out).

    Args:
        setup: the rank's :class:`OrderSetup`.
        open_epoch: ``(epoch, state or None) -> iterable of packs`` (lists of chunks) from
            every reader of the rank; it publishes the epoch to the readers.
        collate: makes a batch of a list of samples (None: the list as it is).
        close: stops the loader's worker processes, if any.
        end_epoch: what ends with each epoch, if any.
        sync: with ``uneven="drop"`` across ranks: ``sync(have_batch) -> all ranks have one``.
        window: the most items (groups of rounds, :func:`rounds_per_item`) that may wait for
            an earlier one.
    """

    def __init__(self, setup: OrderSetup, *, open_epoch: OpenEpoch,
                 collate: Callable[[list[Any]], Any] | None = None,
                 close: Callable[[], None] | None = None,
                 end_epoch: Callable[[], None] | None = None,
                 sync: Callable[[bool], bool] | None = None, window: int = 64) -> None:
        self.setup = setup
        self.shards = list(setup.shards)
        self.seed = setup.seed
        self.epoch = 0
        self.report = setup.spec.report
        #: per-stage times with ``timings=True``, of the current (or last) epoch
        self.timings = setup.spec.times
        self.resumable = True
        self._open_epoch = open_epoch
        self._collate = collate
        self._close = close
        self._end_epoch = end_epoch
        self._sync = sync
        plan = setup.plan(0)
        self._window = reorder_window(plan, plan.rank_streams(setup.rank, setup.world), window)
        self._resume: dict[str, Any] | None = None
        self._reorderer: Reorderer | None = None
        #: what counts as received: each batch as it is yielded, or as a trainer trains on it
        self.received = Received()
        #: the underlying loader, kept across epochs
        self.current: Any = None
        #: called with ``(epoch, state)`` when this rank has received all of its share
        self.on_finish: Callable[[int, dict[str, Any]], None] | None = None

    def set_epoch(self, epoch: int) -> None:
        """Makes the next iteration epoch ``epoch`` (from its start)."""
        with self.received.lock:
            self.epoch, self._resume, self._reorderer = epoch, None, None

    def __iter__(self) -> Iterator[Any]:
        if self.check_iteration is not None:  # a trainer that fetches ahead, unfollowed
            self.check_iteration(self)
        epoch, state = self.epoch, self._resume
        if state is not None and state.get("epoch") != epoch:
            state = None
        setup = self.setup
        reorderer = Reorderer(setup.plan(epoch), setup.rank, setup.world, state=state,
                              window=self._window)
        received = self.received
        with received.lock:
            self._resume, self._reorderer = None, reorderer
            received.start()
        skipped_before = len(self.report) if self.report is not None else 0
        if self.timings is not None:
            self.timings.reset()
        self.current = self._open_epoch(epoch, state)
        rounds = reorderer.rounds(_packs(self.current))
        yielded, finished = 0, False
        try:
            while True:
                batch, receive = next(rounds, (None, _nothing))
                while batch is not None and not batch:  # nothing of this rank in the round
                    received.add(receive, batch=False)
                    batch, receive = next(rounds, (None, _nothing))
                if self._sync is not None and not self._sync(batch is not None):
                    break  # uneven="drop": a rank ran out, every rank stops here
                if batch is None:
                    finished = True
                    break
                values = [value for value in batch if value is not SKIPPED]
                if not values:  # every sample of the round was skipped (on_error)
                    received.add(receive, batch=False)
                    continue
                received.add(receive)
                yielded += 1
                yield self._collate(values) if self._collate is not None else values
        finally:
            if self._end_epoch is not None:
                self._end_epoch()
        received.flush()  # the epoch is over: a trainer has what it fetched
        if finished and self.on_finish is not None:
            self.on_finish(epoch, reorderer.state_dict())
        with received.lock:
            self.epoch, self._reorderer = epoch + 1, None
        check_epoch(yielded, self.report, skipped_before=skipped_before)

    def position(self) -> tuple[int, int]:
        """Returns ``(epoch, batches)`` of :meth:`local_state_dict` (see
        :meth:`~aisio.core.epochs.received.FollowsTrainer.position`)."""
        return (self.epoch, self.received.counted if self._reorderer is not None else 0)

    def local_state_dict(self) -> dict[str, Any]:
        """Returns what this rank's training loop received (or trained on, under a trainer
        integration), never gathered over the ranks: its streams (merge every rank's with
        :func:`aisio.gather_state`, or pass the list to :meth:`load_state_dict`). Between
        epochs: the start of the next one."""
        if self._reorderer is not None:
            return self._reorderer.state_dict()
        setup = self.setup
        fresh = Reorderer(setup.plan(self.epoch), setup.rank, setup.world).state_dict()
        if self._resume is not None:  # loaded, not started: this rank's streams of it
            fresh["state"] = {k: self._resume["state"][k] for k in fresh["state"]}
        return fresh

    def load_state_dict(self, state: dict[str, Any] | Sequence[dict[str, Any]]) -> None:
        """Makes the next iteration continue the saved epoch with exactly the batches the
        uninterrupted run would have yielded next, on any number of workers and ranks.

        Args:
            state: a state from :meth:`state_dict` (merged over the ranks), or every rank's.

        Raises:
            StateMismatchError: the state is of another run or plan (seed, shards, streams,
                batch size, buffer), a fast-order state, or lacks a rank's part.
        """
        if not isinstance(state, dict):
            state = merge_order_states(list(state))
        epoch = state.get("epoch")
        if not isinstance(epoch, int):
            raise StateMismatchError(
                "this is not an aisio deterministic-order state (it names no epoch); pass what "
                "the loader's state_dict() returned with order=\"deterministic\"")
        check_order_state(state, self.setup.plan(epoch))
        with self.received.lock:
            self.epoch, self._resume, self._reorderer = epoch, state, None

    def close(self) -> None:
        """Stops the loader's worker processes (the next epoch starts them again)."""
        if self._close is not None:
            self._close()

    def shutdown(self) -> None:
        """Same as :meth:`close` (the DataLoader2 spelling)."""
        self.close()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({len(self.shards)} shards, epoch {self.epoch}, "
                f"seed {self.seed}, {self.setup.streams} streams, batch {self.setup.batch})")


def _nothing() -> None:
    """The record of the end of the epoch."""


def _packs(items: Iterable[Any]) -> Iterator[list[Chunk]]:
    """Yields the readers' packs; a :class:`Failure` raises its error here."""
    for item in items:
        if isinstance(item, Failure):
            if item.traceback is None:
                raise item.error
            raise item.error from WorkerTraceback(item.traceback)
        yield item


__all__ = ["ORDERS", "STREAMS_CAP", "OrderSetup", "OrderedLoader", "check_ordered_options",
           "default_streams", "uneven_streams",
           "is_deterministic", "refuse_streams"]
