"""A ``torchdata.nodes`` mapper whose threads or processes live across epochs.

nodes' ``ParallelMapper`` starts its workers at every ``reset()`` (each epoch) and stops the old
ones by joining threads that poll with a 0.1 s timeout, which delays each later epoch's first
batch (benchmarks/README.md, Figures behind the code's comments), and new processes every epoch
with ``method="process"``. :class:`PoolMapper` keeps
one ``concurrent.futures`` pool for the loader's life: ``reset()`` drops what the last epoch
had in flight and goes on with the same workers.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import multiprocessing
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from aisio.core.faults.errors import WorkerDiedError
from aisio.core.transport.delivery import Failure
from aisio.runtime.workers import EndsWithParent, collect_before_fork, widen_pipe

try:
    from torchdata.nodes import BaseNode as _Node
except ImportError:  # torchdata < 0.10: aisio.webdataset_node_loader says so when asked for
    _Node = object

_FN: Callable[[Any], Any] | None = None  # a pool process's function (set once, at its start)


def _install(fn: Callable[[Any], Any]) -> None:
    global _FN
    _FN = fn


def _call(item: Any) -> Any:
    assert _FN is not None, "the pool process was started without its function"
    return _FN(item)


class PoolMapper(_Node):
    """Maps the items of ``source`` with ``fn`` in ``workers`` threads or processes that live
    across resets (epochs), at most ``2 x workers`` items in flight, handed out in order (or as
    they finish with ``in_order=False``). Its state is nothing: aisio's loop keeps the epoch's.

    Args:
        source: the node whose items are mapped (read in the thread that calls :meth:`next`).
        fn: the function; with ``method="process"`` it is sent to each process once, at its
            start (so a large closure is not pickled per item), and the processes end with
            the training process.
        workers: threads or processes.
        method: ``"thread"`` or ``"process"``.
        in_order: hand the results out in the source's order.
        multiprocessing_context: the start method of the processes (default: the platform's).
    """

    def __init__(self, source: Any, fn: Callable[[Any], Any], workers: int, *,
                 method: str = "thread", in_order: bool = True,
                 multiprocessing_context: str | None = None) -> None:
        super().__init__()
        if method not in ("thread", "process"):
            raise ValueError(f"method={method!r}: 'thread' or 'process'")
        self.source = source
        self.fn = fn
        self.workers = workers
        self.method = method
        self.in_order = in_order
        self.context = multiprocessing_context
        self._pool: cf.Executor | None = None
        self._pending: collections.deque[cf.Future[Any]] = collections.deque()
        self._ended = False

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._drop_pending()
        self.source.reset()
        self._ended = False

    def _drop_pending(self) -> None:
        while self._pending:
            self._pending.popleft().cancel()  # running ones finish; their results are dropped

    def _executor(self) -> cf.Executor:
        if self._pool is None:
            if self.method == "thread":
                self._pool = cf.ThreadPoolExecutor(self.workers, thread_name_prefix="aisio-map")
            else:
                context = multiprocessing.get_context(self.context)
                collect_before_fork()
                pool = cf.ProcessPoolExecutor(self.workers, mp_context=context,
                                              initializer=_install,
                                              initargs=(EndsWithParent(self.fn),))
                # Batches go to the processes and back through two pipes, each shared by
                # every process (see widen_pipe).
                widen_pipe(getattr(pool, "_call_queue", None))
                widen_pipe(getattr(pool, "_result_queue", None))
                self._pool = pool
        return self._pool

    def next(self) -> Any:
        """Returns the next result; a pool process that died ends the epoch as a
        :class:`~aisio.core.transport.delivery.Failure` of :class:`~aisio.WorkerDiedError` (an item,
        not an exception: nodes' prefetch thread would rebuild it from its message)."""
        try:
            return self._next()
        except BrokenProcessPool:
            self._pending.clear()
            self._ended = True
            self._pool = None  # the next epoch starts a new pool
            return Failure(WorkerDiedError(
                "a torchdata.nodes mapper process (method=\"process\") ended without being "
                "asked to (killed, e.g. by the OOM killer); the samples it had were not "
                "delivered: resume from loader.state_dict(), or use method=\"thread\""))

    def _next(self) -> Any:
        pool = self._executor()
        call = _call if self.method == "process" else self.fn
        while not self._ended and len(self._pending) < 2 * self.workers:
            try:
                item = self.source.next()
            except StopIteration:
                self._ended = True
                break
            self._pending.append(pool.submit(call, item))
        if not self._pending:
            raise StopIteration
        future = self._pending[0]
        if not self.in_order and not future.done():
            finished, _ = cf.wait(self._pending, return_when=cf.FIRST_COMPLETED)
            future = next(f for f in self._pending if f in finished)
        self._pending.remove(future)
        return future.result()

    def get_state(self) -> dict[str, Any]:
        return {}

    def shutdown(self) -> None:
        """Stops the pool's threads or processes (the next epoch starts new ones)."""
        self._drop_pending()
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


__all__ = ["PoolMapper"]
