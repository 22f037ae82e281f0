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
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from typing import Any

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from torchdata.dataloader2 import communication
    from torchdata.dataloader2.communication.iter import _IterateQueueDataPipes

_POLL_SECONDS = 0.0001


def _round_robin(self: Any) -> Iterator[Any]:
    count = self._num_processes
    done = [False] * count
    live = count
    messages = communication.messages

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
            while True:
                if self._terminated:
                    return
                try:
                    response = protocol.get_response_next(block=False)
                    break
                except communication.protocol.EmptyQueue:
                    time.sleep(_POLL_SECONDS)
        if isinstance(response, messages.InvalidStateResponse):
            raise communication.iter.InvalidStateResetRequired
        if isinstance(response, messages.TerminateResponse):
            raise communication.iter.TerminateRequired
        if isinstance(response, messages.WorkerExceptionResponse):
            response.exc.reraise()
        if isinstance(response, messages.StopIterationResponse):
            done[idx] = True
            live -= 1
        else:
            ask(idx)
            yield response.value
        idx = (idx + 1) % count


def install() -> None:
    """Replaces torchdata's round robin with :func:`_round_robin` (idempotent)."""
    if getattr(_IterateQueueDataPipes.__iter__, "__name__", "") != "_round_robin":
        _IterateQueueDataPipes.__iter__ = _round_robin
