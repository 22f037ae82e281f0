"""A fix for DataLoader2's multiprocessing round robin (torchdata 0.9, its last release).

torchdata's ``_IterateQueueDataPipes.__iter__`` collects items from the worker processes in turn.
Once one worker is exhausted, it sends the next request to the wrong worker (the request index
runs on past the exhausted one) and then waits for an answer from a worker it never asked, which
raises "Can not expect any response without submitted request". It happens whenever workers yield
different numbers of items: e.g. 9 shards read by 2 workers, or more workers than shards
(pytorch/data#1198, #1228 report the hangs and errors this causes).

:func:`install` replaces that one method with a plain round robin: each live worker has at most
one request in flight; items are taken worker by worker, skipping exhausted ones, so the order is
deterministic for a given seed. Pause/resume buffers and the request limit keep their meaning.
torchdata is pinned below 0.10 (DataPipes were removed after 0.9), so the patched code is frozen.

It also makes worker faults visible instead of silent:

* a worker that dies (SIGKILL from the OOM killer, a crash) raises :class:`WorkerDiedError`
  naming the worker and the signal, instead of a wait that never ends;
* an exception raised in a worker reaches the training loop as the original object (type,
  message, ``url``/``offset``/``member``), not rebuilt from a message; the worker's traceback is
  its ``__cause__`` and a note names the worker;
* workers exit when the training process dies (``PR_SET_PDEATHSIG`` on Linux, plus a thread that
  watches the parent), instead of living on under PID 1;
* ``shutdown()`` gives workers a short grace (:data:`SHUTDOWN_GRACE` seconds) to stop, then
  terminates the ones still stuck (in a stalled read, say) instead of waiting for their timeouts.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pickle
import queue
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from torchdata.dataloader2 import MultiProcessingReadingService, communication
    from torchdata.dataloader2.communication.iter import _IterateQueueDataPipes
    from torchdata.dataloader2.communication.protocol import IterDataPipeQueueProtocolServer

from aisio.core.faults.errors import WorkerTraceback
from aisio.runtime.workers import (
    collect_before_fork,
    die_with_parent,
    keep_inherited,
    prepare_process,
    set_worker_id,
    worker_died,
)

_POLL_SECONDS = 0.0001
_LIVENESS_SECONDS = 0.05  # how often a wait on a worker checks that it is still alive
#: Seconds ``shutdown()`` waits for workers to stop by themselves before terminating them.
SHUTDOWN_GRACE = 1.0


_RemoteTraceback = WorkerTraceback  # the traceback of an exception raised in a worker


_GONE = (ConnectionError, EOFError, FileNotFoundError)
"""What unpickling a worker's answer raises when the worker died while passing a file
descriptor (a shared-memory handle) with it."""


def _raise_if_dead(index: int, processes: list[Any], cause: BaseException) -> None:
    """Raises :func:`~aisio.runtime.workers.worker_died` for worker ``index`` if it has exited
    (waiting a moment for the exit to be seen)."""
    process = processes[index] if index < len(processes) else None
    if process is None:
        return
    process.join(timeout=1.0)
    if process.exitcode is not None:
        raise worker_died("DataLoader2", index, process) from cause


def _reraise(wrapper: Any, index: int) -> None:
    """Raises the worker's original exception if it travelled pickled, else torchdata's copy."""
    blob = getattr(wrapper, "aisio_original", None)
    error = None
    if blob is not None:
        with contextlib.suppress(Exception):
            error = pickle.loads(blob)
    if not isinstance(error, BaseException):
        wrapper.reraise()
        return
    if hasattr(error, "add_note"):  # Python >= 3.11
        error.add_note(f"(raised in DataLoader2 worker process {index})")
    raise error from _RemoteTraceback(f"in DataLoader2 worker process {index}:\n"
                                      f"{wrapper.exc_msg}")


def _round_robin(self: Any) -> Iterator[Any]:
    count = self._num_processes
    done = [False] * count
    live = count
    messages = communication.messages
    processes = _PROCESSES.get(id(self), [])

    def ask(i: int) -> None:
        """Keeps one request in flight for worker ``i`` so that every worker stays busy."""
        protocol = self.datapipes[i].protocol
        if done[i] or self.res_buffers[i] or protocol.waiting_for_response():
            return
        if self._limit is None or self._request_cnt < self._limit:
            protocol.request_next()
            self._request_cnt += 1

    for i in range(count):
        ask(i)
    idx = 0
    while live and not self._terminated:
        if done[idx]:
            idx = (idx + 1) % count
            continue
        protocol = self.datapipes[idx].protocol
        if self.res_buffers[idx]:
            response = self.res_buffers[idx].popleft()
        elif not protocol.waiting_for_response():
            return  # the request limit is reached
        else:
            checked = time.monotonic()
            while True:
                if self._terminated:
                    return
                try:
                    response = protocol.get_response_next(block=False)
                    break
                except communication.protocol.EmptyQueue:
                    time.sleep(_POLL_SECONDS)
                except _GONE as exc:  # unpickling reached for a handle the dead worker held
                    _raise_if_dead(idx, processes, exc)
                    raise
                now = time.monotonic()
                if now - checked > _LIVENESS_SECONDS:
                    checked = now
                    process = processes[idx] if idx < len(processes) else None
                    if process is not None and process.exitcode is not None:
                        try:  # an answer it sent before dying may still be in the pipe
                            response = protocol.get_response_next(block=True, timeout=0.1)
                            break
                        except communication.protocol.EmptyQueue:
                            raise worker_died("DataLoader2", idx, process) from None
                        except _GONE as exc:
                            raise worker_died("DataLoader2", idx, process) from exc
        if isinstance(response, messages.InvalidStateResponse):
            raise communication.iter.InvalidStateResetRequired
        if isinstance(response, messages.TerminateResponse):
            raise communication.iter.TerminateRequired
        if isinstance(response, messages.WorkerExceptionResponse):
            _reraise(response.exc, idx)
        if isinstance(response, messages.StopIterationResponse):
            done[idx] = True
            live -= 1
        else:
            ask(idx)
            yield response.value
        idx = (idx + 1) % count


# ---- worker side ---------------------------------------------------------------------------


def _send_original(self: Any, exception: Any) -> None:
    """Sends a worker's exception with the original object pickled beside torchdata's copy."""
    error = sys.exc_info()[1]  # called inside the worker loop's ``except`` block
    if error is not None:
        with contextlib.suppress(Exception):
            exception.aisio_original = pickle.dumps(error)
    _SEND_EXCEPTION(self, exception)


_SEND_EXCEPTION = IterDataPipeQueueProtocolServer.response_worker_exception


def _worker_init(datapipe: Any, worker_info: Any, *, parent: int, kernel: bool,
                 user_fn: Callable[[Any, Any], Any] | None) -> Any:
    """Runs first in every worker process (DataLoader2's ``worker_init_fn``)."""
    keep_inherited()
    die_with_parent(parent, kernel)
    set_worker_id(worker_info.worker_id)
    prepare_process()
    # (this worker's own copy of torchdata: its protocol server is made inside torchdata's
    # worker loop, with no parameter for another class; see install())
    IterDataPipeQueueProtocolServer.response_worker_exception = _send_original
    return user_fn(datapipe, worker_info) if user_fn is not None else datapipe


# ---- main side -----------------------------------------------------------------------------
#: The worker processes behind each round robin (by id: a DataPipe is pickled when DataLoader2
#: walks its graph, and a Process refuses to be pickled), until the reading service finalizes.
_PROCESSES: dict[int, list[Any]] = {}
_INITIALIZE = MultiProcessingReadingService.initialize


def _initialize(self: Any, datapipe: Any) -> Any:
    user_fn = self.worker_init_fn
    if isinstance(user_fn, functools.partial) and user_fn.func is _worker_init:
        user_fn = user_fn.keywords["user_fn"]
    # PR_SET_PDEATHSIG fires when the *thread* that started the worker ends: only ask the kernel
    # when that thread is the main thread (the parent-watch thread covers the other cases).
    self.worker_init_fn = functools.partial(
        _worker_init, parent=os.getpid(),
        kernel=threading.current_thread() is threading.main_thread(), user_fn=user_fn)
    collect_before_fork()
    end = _INITIALIZE(self, datapipe)
    if self._worker_consumer_datapipe is not None:
        _PROCESSES[id(self._worker_consumer_datapipe)] = [p for p, _, _ in self._worker_processes]
    return end


def _stop(process: Any, deadline: float) -> None:
    process.join(max(0.0, deadline - time.monotonic()))
    if process.is_alive():
        process.terminate()
        process.join(1.0)
    if process.is_alive():
        process.kill()
        process.join(1.0)


def _finalize(self: Any) -> None:
    """torchdata's ``finalize`` with bounded waits: stuck workers are terminated after a grace.

    torchdata's version first waits, without a timeout, for the answer to each request in
    flight (so a worker stalled in a read blocks it for the read timeout, a dead one forever),
    then joins each worker for 20 s.
    """
    if self._finalized:
        return
    self._finalized = True
    deadline = time.monotonic() + SHUTDOWN_GRACE
    consumer = self._worker_consumer_datapipe
    _PROCESSES.pop(id(consumer), None)
    if self.num_workers > 0 and consumer is not None:
        consumer._terminated = True
        for dp in consumer.datapipes:
            protocol = dp.protocol
            if protocol.waiting_for_response():
                if sys.is_finalizing():
                    # at interpreter exit: an answer would be unpickled by modules already
                    # torn down ("import of torch.storage halted"); the workers are ended below
                    continue
                try:
                    timeout = max(0.01, deadline - time.monotonic())
                    protocol.request_served(protocol.response_queue.get(timeout=timeout))
                except (queue.Empty, OSError, EOFError, ValueError, ImportError):
                    continue  # stuck or dead: terminated below
            with contextlib.suppress(Exception):
                protocol.request_terminate()
    for process, req_queue, _ in self._worker_processes:
        _stop(process, deadline)
        req_queue.close()
    if self._dispatch_process is not None:
        _stop(self._dispatch_process[0], deadline)
        for req_queue in self._dispatch_process[1]:
            req_queue.close()
    self._worker_processes = []
    self._dispatch_process = None


def install() -> None:
    """Installs the fixes above into torchdata's DataLoader2 (idempotent). Called where a
    loader is built, never at import: by aisio's DataLoader2 loaders
    (:func:`~aisio.datapipes.dataloader2.make_loader`, ``webdataset_loader``) and as an aisio
    DataPipe is built (once torchdata's DataLoader2 is imported, so that a DataLoader2 the user
    builds over aisio's DataPipes gets them too).

    This is the one place aisio replaces another package's methods, and it cannot be a
    subclass passed in: torchdata makes the round robin (``_IterateQueueDataPipes``) inside
    ``MultiProcessingReadingService.initialize``, and each worker's protocol server inside its
    worker loop, with no parameter for another class; and a DataLoader2 built with torchdata's
    own ``MultiProcessingReadingService`` (the user's) must finish as well. torchdata is
    pinned below 0.10, its last release with DataLoader2, so the replaced code is frozen."""
    if getattr(_IterateQueueDataPipes.__iter__, "__name__", "") != "_round_robin":
        _IterateQueueDataPipes.__iter__ = _round_robin
    if MultiProcessingReadingService.initialize is not _initialize:
        MultiProcessingReadingService.initialize = _initialize
        MultiProcessingReadingService.finalize = _finalize
