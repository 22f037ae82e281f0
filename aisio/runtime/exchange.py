"""Every rank's state of a loader at one step, through torch.distributed's key-value store, with
no collective: what ``state_dict()`` returns under several ranks (:func:`aisio.gather_state`).

A rank that asks for the job's state publishes its own at its position (the epoch and the
batches its state covers) and asks the others for theirs at that position. Each rank answers
from a thread of its own (:class:`StateExchange` starts it), so a rank that does not call
``state_dict()`` at that step still answers, as long as it is there:

- at the same position (it waits at a barrier, as after ``accelerator.save_state()`` called
  ``if accelerator.is_main_process:`` and ``wait_for_everyone()``): it answers with its state;
- behind it (a slower rank): it answers when it gets there;
- past it (it went on without a checkpoint at that step): it says so, and the asking rank
  raises :class:`~aisio.UsageError` naming the line to change, at once, not at
  torch.distributed's timeout;
- having received all of its share of the epoch (``uneven="keep"``): its final state of the
  epoch stands in for it.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import threading
import time
import weakref
from collections import deque
from typing import Any

from aisio.core.faults.errors import ClusterError, UsageError

Position = tuple[int, int]
"""``(epoch, batches)``: the epoch a loader's state is in and how many of its batches it covers."""

#: Seconds between the answering thread's looks at the store: ``_POLL`` while an ask is open,
#: doubling up to ``_IDLE`` while none is. Every rank looks at rank 0's store: at 1,024 ranks a
#: look every 20 ms would be ~51,000 requests a second, for as long as the job runs; idle, ~500.
#: An answer is needed only from a rank that does not save at that step itself (a save on the
#: main process alone), where up to ``_IDLE`` seconds more is nothing beside the save.
_POLL = 0.02
_IDLE = 2.0


#: The exchanges whose answering thread runs (held weakly), stopped at exit by one handler.
_ANSWERING: weakref.WeakSet[StateExchange] = weakref.WeakSet()
_STOP_AT_EXIT = False


def _stop_all() -> None:
    for exchange in list(_ANSWERING):
        exchange.stop()


class StateExchange:
    """Every rank's state of one loader at a position (see the module's doc).

    Args:
        store: the job's key-value store (torch.distributed's), prefixed for this loader: the
            same key space on every rank.
        rank: this process's rank.
        world: the number of ranks.
        loader: the loader (a :class:`~aisio.core.epochs.received.FollowsTrainer`); held
            weakly, its ``position_and_state()`` read under its lock.
        timeout: seconds a call waits for a rank that is behind.
    """

    def __init__(self, store: Any, rank: int, world: int, loader: Any,
                 timeout: float = 1800.0) -> None:
        self.store = store
        self.rank, self.world = rank, world
        self.timeout = timeout
        self._loader = weakref.ref(loader)
        self._published: deque[str] = deque()
        self._finals: dict[int, dict[str, Any]] = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        # The answering thread's own connection: a store's client is not to be shared between
        # threads (one blocked in a call holds the other's).
        clone = getattr(store, "clone", None)
        try:
            self._answer_store = clone() if clone is not None else store
        except RuntimeError:  # (a store that cannot be cloned is used from one place at a time)
            self._answer_store = store
        self._lock = threading.Lock()

    def finished(self, epoch: int, state: dict[str, Any]) -> None:
        """Publishes this rank's final state of ``epoch`` (it received all of its share)."""
        self._finals[epoch] = state
        self.store.set(f"final/{epoch}/{self.rank}", json.dumps(state))

    def gather(self, position: Position, state: dict[str, Any]) -> list[dict[str, Any]]:
        """Returns every rank's state at ``position`` (this rank's is ``state``).

        Raises:
            UsageError: a rank went past this position without asking.
            ClusterError: a rank stayed behind it for ``timeout`` seconds.
        """
        self.start()
        epoch, batches = position
        self._publish(self.store, position, state)
        ask = int(self.store.add("asks", 1))
        self.store.set(f"ask/{ask}", json.dumps([epoch, batches]))
        deadline = time.monotonic() + self.timeout
        return [state if rank == self.rank else self._wait(position, rank, deadline)
                for rank in range(self.world)]

    def start(self) -> None:
        """Starts this rank's answering thread (once; it ends with the loader)."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._answer, daemon=True,
                                                name="aisio-state-exchange")
                self._thread.start()
                # Ended before the interpreter tears down: a daemon thread left inside a call
                # of torch's store as the process exits can abort it ("terminate called
                # without an active exception", seen in 2-rank jobs). One handler for all,
                # holding none: an exchange whose loader is gone is not kept to the end.
                global _STOP_AT_EXIT
                if not _STOP_AT_EXIT:
                    atexit.register(_stop_all)
                    _STOP_AT_EXIT = True
                _ANSWERING.add(self)

    def stop(self) -> None:
        """Ends the answering thread (at exit; it also ends with the loader or the store)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)

    def _publish(self, store: Any, position: Position, state: dict[str, Any]) -> None:
        key = _key(position, self.rank)
        store.set(key, json.dumps(state))
        with self._lock:
            if key not in self._published:
                self._published.append(key)
            while len(self._published) > 8:  # (every rank has read those long ago)
                old = self._published.popleft()
                with contextlib.suppress(Exception):
                    store.delete_key(old)

    def _wait(self, position: Position, rank: int, deadline: float) -> dict[str, Any]:
        epoch, batches = position
        key, final = _key(position, rank), f"final/{epoch}/{rank}"
        passed = f"passed/{epoch}/{batches}/{rank}"
        pause = 0.001
        while True:
            for name in (key, final):
                if self.store.check([name]):
                    return dict(json.loads(self.store.get(name)))
            failed = f"failed/{epoch}/{batches}/{rank}"
            if self.store.check([failed]):
                raise ClusterError(f"rank {rank} could not give its loader state: "
                                   f"{self.store.get(failed).decode()}")
            if self.store.check([passed]):
                at = json.loads(self.store.get(passed))
                raise UsageError(
                    f"rank {self.rank} asked for the loader's state at batch {batches} of epoch "
                    f"{epoch}, but rank {rank} went on to batch {at[1]} of epoch {at[0]} without "
                    "asking: a checkpoint's save (accelerator.save_state(), fabric.save(), "
                    "state_dict()) must run on every process at the same step; move it out of "
                    "'if accelerator.is_main_process:' (or 'if rank == 0:'), or give this loader "
                    "state_scope=\"rank\" and save every rank's own state")
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"the loader's state waited {self.timeout:.0f} s for rank {rank}, which "
                    f"neither reached batch {batches} of epoch {epoch} nor finished the epoch")
            time.sleep(pause)
            pause = min(2 * pause, 0.05)

    def _answer(self) -> None:
        """The answering thread: each ask, once this rank is at its position or past it."""
        store, seen, pending, pause = self._answer_store, 0, [], _POLL
        while not self._stop.is_set():
            loader = self._loader()
            if loader is None:
                return
            try:
                asks = int(store.add("asks", 0))
                if seen < asks:
                    pause = _POLL
                while seen < asks and store.check([f"ask/{seen + 1}"]):  # (set after the count)
                    seen += 1
                    pending.append(tuple(json.loads(store.get(f"ask/{seen}"))))
                pending = [p for p in pending if not self._answered(store, loader, p)]
            except Exception:  # the store is gone: the job is ending
                return
            del loader
            pause = _POLL if pending else min(2 * pause, _IDLE)
            if self._stop.wait(pause):
                return

    def _answered(self, store: Any, loader: Any, position: tuple[int, ...]) -> bool:
        """Answers one ask if this rank can now; returns whether it did."""
        epoch, batches = position
        if epoch in self._finals:
            return True  # (the final state stands in)
        if store.check([_key((epoch, batches), self.rank)]):
            return True
        try:
            mine, state = loader.position_and_state()
        except Exception as exc:  # (a loader that cannot say: the asking rank raises too)
            store.set(f"failed/{epoch}/{batches}/{self.rank}", f"{type(exc).__name__}: {exc}")
            return True
        if mine == (epoch, batches):
            self._publish(store, mine, state)
            return True
        if mine > (epoch, batches):
            store.set(f"passed/{epoch}/{batches}/{self.rank}", json.dumps(list(mine)))
            return True
        return False


def _key(position: Position, rank: int) -> str:
    return f"state/{position[0]}/{position[1]}/{rank}"


__all__ = ["Position", "StateExchange"]
