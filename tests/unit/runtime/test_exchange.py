"""Every rank's state at one step without a collective (aisio.runtime.exchange), over an
in-process store: a rank that does not ask still answers, at a barrier or behind; one that went
on past the step is a UsageError at once (issue #37: accelerator.save_state() under
``if accelerator.is_main_process:`` hung until torch.distributed's timeout)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch.distributed as dist

from aisio.core.faults.errors import ClusterError, UsageError
from aisio.runtime.exchange import StateExchange


class Rank:
    """A loader's surface the exchange reads: its position and state, moved by the test."""

    def __init__(self, rank: int) -> None:
        self.rank, self.position, self.lock = rank, (0, 0), threading.Lock()

    def position_and_state(self) -> tuple[tuple[int, int], dict[str, Any]]:
        with self.lock:
            return self.position, {"rank": self.rank, "at": list(self.position)}


def ranks(world: int, timeout: float = 60.0) -> tuple[list[Rank], list[StateExchange]]:
    store = dist.HashStore()
    loaders = [Rank(rank) for rank in range(world)]
    exchanges = [StateExchange(dist.PrefixStore("t/", store), rank, world, loader,
                               timeout=timeout) for rank, loader in enumerate(loaders)]
    for exchange in exchanges:
        exchange.start()  # (a loader's answering thread starts with the loader's first epoch)
    return loaders, exchanges


def gather_as_it_moves(exchange: StateExchange, loader: Rank, to: tuple[int, int]
                       ) -> list[dict[str, Any]]:
    """Rank 0's gather at ``to`` while ``loader``'s rank, behind it, gets there a moment
    later (from a timer thread: the gather must wait for it, however long that is)."""
    timer = threading.Timer(0.3, lambda: setattr(loader, "position", to))
    timer.start()
    try:
        return exchange.gather(to, {"rank": 0, "at": list(to)})
    finally:
        timer.join()


def test_a_rank_that_waits_at_the_step_answers_for_itself() -> None:
    loaders, exchanges = ranks(3)
    for loader in loaders:
        loader.position = (1, 7)  # rank 0 saves; 1 and 2 wait at a barrier
    states = exchanges[0].gather((1, 7), {"rank": 0, "at": [1, 7]})
    assert states == [{"rank": r, "at": [1, 7]} for r in range(3)]


def test_a_rank_behind_answers_when_it_gets_there() -> None:
    loaders, exchanges = ranks(2)
    loaders[1].position = (1, 6)
    states = gather_as_it_moves(exchanges[0], loaders[1], (1, 7))
    assert states[1] == {"rank": 1, "at": [1, 7]}


def test_a_rank_that_went_on_without_asking_is_named_at_once() -> None:
    loaders, exchanges = ranks(2, timeout=5.0)  # (without the answer: ClusterError after it)
    loaders[1].position = (1, 8)  # it trained on: its save was under is_main_process
    with pytest.raises(UsageError, match=r"rank 1 went on to batch 8 of epoch 1 without asking"
                                         r".*is_main_process") as caught:
        exchanges[0].gather((1, 7), {"rank": 0, "at": [1, 7]})
    assert "state_scope" in str(caught.value)


def test_a_state_of_one_epoch_never_answers_for_the_same_batch_of_the_next() -> None:
    """Rank 1's state at batch 4 of epoch 0 is still in the store when rank 0 asks for batch 4
    of epoch 1, and rank 1 is not there yet: rank 0 waits for it (taking the old one would
    checkpoint rank 1 an epoch back: its samples trained again on resume)."""
    loaders, exchanges = ranks(2)
    for loader in loaders:
        loader.position = (0, 4)
    exchanges[0].gather((0, 4), {"rank": 0, "at": [0, 4]})
    loaders[1].position = (1, 3)
    states = gather_as_it_moves(exchanges[0], loaders[1], (1, 4))
    assert states[1] == {"rank": 1, "at": [1, 4]}


def test_a_rank_that_finished_the_epoch_gives_its_final_state() -> None:
    loaders, exchanges = ranks(2)
    exchanges[1].finished(1, {"rank": 1, "final": True})
    loaders[1].position = (2, 0)
    assert exchanges[0].gather((1, 9), {"rank": 0})[1] == {"rank": 1, "final": True}


def test_every_rank_asking_at_once_gets_the_same_states() -> None:
    loaders, exchanges = ranks(3)
    for loader in loaders:
        loader.position = (0, 4)
    results: list[Any] = [None] * 3

    def ask(rank: int) -> None:
        results[rank] = exchanges[rank].gather((0, 4), {"rank": rank, "at": [0, 4]})

    threads = [threading.Thread(target=ask, args=(rank,)) for rank in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert results[0] == results[1] == results[2] == [{"rank": r, "at": [0, 4]}
                                                      for r in range(3)]


def test_an_idle_rank_looks_at_the_store_less_and_less_and_often_while_an_ask_is_open(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every rank looks at rank 0's store: every 20 ms for the whole job would be ~51,000
    requests a second at 1,024 ranks. Idle, the looks back off to one every _IDLE seconds;
    while an ask is open (a rank behind the asked step), they come every _POLL seconds."""
    import json

    from aisio.runtime import exchange as module

    class Stop(Exception):
        pass

    store = dist.HashStore()
    loader = Rank(1)  # at (0, 0): behind the step it will be asked for
    answering = StateExchange(dist.PrefixStore("t/", store), 1, 2, loader)
    pauses: list[float] = []

    def pause(seconds: float) -> bool:  # the thread's wait between looks (False: not stopped)
        pauses.append(seconds)
        if len(pauses) == 10:  # rank 0 asks for step 5 of epoch 0
            asker = dist.PrefixStore("t/", store)
            asker.set(f"ask/{int(asker.add('asks', 1))}", json.dumps([0, 5]))
        if len(pauses) == 14:
            raise Stop
        return False

    monkeypatch.setattr(answering._stop, "wait", pause)
    with pytest.raises(Stop):
        answering._answer()  # the answering thread's loop, here
    assert pauses[:10] == [0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.0, 2.0, 2.0, 2.0]
    assert pauses[10:] == [module._POLL] * 4


def test_a_loader_that_cannot_give_its_state_fails_the_asking_rank_by_name() -> None:
    class Broken(Rank):
        def position_and_state(self) -> tuple[tuple[int, int], dict[str, Any]]:
            raise RuntimeError("no state here")

    store = dist.HashStore()
    loaders = [Rank(0), Broken(1)]  # (an exchange holds its loader weakly)
    exchanges = [StateExchange(dist.PrefixStore("t/", store), rank, 2, loader, timeout=60.0)
                 for rank, loader in enumerate(loaders)]
    exchanges[1].start()
    with pytest.raises(ClusterError, match="rank 1 could not give its loader state: "
                                           "RuntimeError: no state here"):
        exchanges[0].gather((0, 3), {"rank": 0})


def test_a_rank_that_asked_at_one_step_answers_at_the_next() -> None:
    """Each rank's answering thread sees every ask, its own ones too (it published its state
    itself): it goes on answering the asks that follow."""
    loaders, exchanges = ranks(2)
    results: dict[int, Any] = {}

    def ask(rank: int) -> None:
        results[rank] = exchanges[rank].gather((0, 4), {"rank": rank, "at": [0, 4]})

    for loader in loaders:
        loader.position = (0, 4)
    threads = [threading.Thread(target=ask, args=(rank,)) for rank in range(2)]
    for thread in threads:  # both save at step 4
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert results[0] == results[1] == [{"rank": r, "at": [0, 4]} for r in range(2)]
    for step in (5, 6):  # then rank 0 saves alone; rank 1 waits at a barrier
        for loader in loaders:
            loader.position = (0, step)
        states = exchanges[0].gather((0, step), {"rank": 0, "at": [0, step]})
        assert states[1] == {"rank": 1, "at": [0, step]}


def test_the_answering_thread_has_a_store_connection_of_its_own() -> None:
    """A store's client is not to be shared between threads (one blocked in a call holds the
    other's): the answering thread uses a clone where the store can make one."""

    class Cloning:
        def clone(self) -> Any:
            return "the clone"

    assert StateExchange(Cloning(), 0, 2, Rank(0))._answer_store == "the clone"

    class Refusing:
        def clone(self) -> Any:
            raise RuntimeError("cannot clone")

    store = Refusing()
    assert StateExchange(store, 0, 2, Rank(0))._answer_store is store
    plain = object()  # a store without clone()
    assert StateExchange(plain, 0, 2, Rank(0))._answer_store is plain


def test_stop_ends_the_answering_thread_at_once() -> None:
    """At exit (atexit) the thread is stopped and joined, not left inside a call of the store
    as the interpreter tears down (a 2-rank job aborted so)."""
    loader = Rank(1)
    exchange = StateExchange(dist.PrefixStore("s/", dist.HashStore()), 1, 2, loader)
    exchange.start()
    exchange.stop()
    assert exchange._thread is not None and not exchange._thread.is_alive()


def test_the_exit_handler_stops_every_answering_thread() -> None:
    from aisio.runtime import exchange as module

    loader = Rank(1)
    exchange = StateExchange(dist.PrefixStore("x/", dist.HashStore()), 1, 2, loader)
    exchange.start()
    module._stop_all()  # what atexit runs
    assert exchange._thread is not None and not exchange._thread.is_alive()
