"""What counts as received when a trainer fetches ahead (aisio.core.epochs.received), and how a
loader answers the trainers that checkpoint it on every rank."""

from __future__ import annotations

from typing import Any

import pytest

from aisio.core.epochs import received as received_module
from aisio.core.epochs.received import FollowsTrainer, Received
from aisio.core.faults.errors import UsageError


def recorder(log: list[str], name: str) -> Any:
    return lambda: log.append(name)


def test_a_plain_loop_counts_each_batch_as_it_is_yielded() -> None:
    log: list[str] = []
    received = Received()
    received.start()
    received.add(recorder(log, "b0"))
    received.add(recorder(log, "skipped"), batch=False)
    received.add(recorder(log, "b1"))
    assert log == ["b0", "skipped", "b1"]
    assert received.ahead == 0


def test_a_followed_trainer_counts_only_what_it_trained_on_in_order() -> None:
    log: list[str] = []
    received = Received()
    received.follow()
    received.start()
    received.add(recorder(log, "b0"))
    received.add(recorder(log, "b1"))  # fetched ahead, as Lightning's fetcher does
    assert log == [] and received.ahead == 2 and received.counted == 0
    received.trained()
    assert log == ["b0"] and received.ahead == 1
    assert received.counted == 1  # what a state (and its position) covers: b0, not b1
    received.add(recorder(log, "skipped"), batch=False)  # waits behind b1
    received.add(recorder(log, "b2"))
    assert log == ["b0"]
    received.trained(2)
    assert log == ["b0", "b1", "skipped", "b2"]
    received.add(recorder(log, "b3"))
    received.flush()  # the epoch is over
    assert log == ["b0", "b1", "skipped", "b2", "b3"]


def test_a_trainer_done_with_the_loader_leaves_its_records_in_order() -> None:
    log: list[str] = []
    received = Received()
    received.follow()
    received.start()
    received.add(recorder(log, "b0"))
    received.add(recorder(log, "b1"))
    received.trained()
    received.follow(False)  # the trainer has finished (b1 was fetched, never trained on)
    assert log == ["b0"]
    received.add(recorder(log, "b2"))  # a plain loop takes the loader on: in order
    assert log == ["b0", "b1", "b2"] and received.ahead == 0


def test_each_epoch_counts_anew_and_over_reporting_is_refused() -> None:
    received = Received()
    received.follow()
    received.start()
    received.add(lambda: None)
    received.trained()
    with pytest.raises(UsageError, match="reported 2 batches trained this epoch, but the loader "
                                         "has yielded 1"):
        received.trained()
    received.start()
    with pytest.raises(UsageError):
        received.trained()


class Loader(FollowsTrainer):
    """The surface the front ends' loaders share, over a fixed local state."""

    def __init__(self) -> None:
        self.received = Received()

    def local_state_dict(self) -> dict[str, Any]:
        return {"rank": "mine"}


def test_the_state_covers_the_job_unless_set_to_the_rank_whoever_asks() -> None:
    """What the state covers is the loader's setting alone: a trainer's call, the user's, a
    subclass's or a wrapper's forwarding it all get the job's (issue #37: the call stack
    decided it, and a wrapped loader silently saved one rank's)."""
    gathered: list[dict[str, Any]] = []

    def gather(loader: Any) -> dict[str, Any]:
        gathered.append(loader.local_state_dict())
        return {"rank": "all"}

    class Wrapped(Loader):
        def state_dict(self) -> dict[str, Any]:
            return {"wrapped": super().state_dict()}

    loader, wrapped = Loader(), Wrapped()
    assert loader.state_dict() == {"rank": "mine"}  # nothing passed in: this process's
    loader.gather_over_ranks = wrapped.gather_over_ranks = gather  # as the set-up passes it in
    assert loader.state_scope == "job"
    assert loader.state_dict() == {"rank": "all"}
    assert (lambda: loader.state_dict())() == {"rank": "all"}  # a wrapper forwarding it
    assert wrapped.state_dict() == {"wrapped": {"rank": "all"}}
    assert gathered == [{"rank": "mine"}] * 3
    loader.state_scope = "rank"
    assert loader.state_scope == "rank"
    assert loader.state_dict() == {"rank": "mine"} == loader.local_state_dict()
    assert len(gathered) == 3
    with pytest.raises(UsageError, match="state_scope='ranks' must be one of"):
        loader.state_scope = "ranks"


def test_no_frame_decides_a_state() -> None:
    """The core reads no caller's frame: ``sys._getframe`` appears nowhere in it but in the
    warnings' attribution (aisio.core.faults.policy), and no table of trainers' modules."""
    import pathlib

    import aisio.core

    core = pathlib.Path(aisio.core.__file__).parent
    readers = sorted(str(path.relative_to(core)) for path in core.rglob("*.py")
                     if "_getframe" in path.read_text())
    assert readers == ["faults/policy.py"]
    assert not hasattr(received_module, "TRAINERS")


def test_a_loaders_trained_reports_to_its_received_record() -> None:
    """The loader's own ``trained()`` (what a trainer callback calls) counts one batch by
    default, or as many as it is told."""
    log: list[str] = []
    loader = Loader()
    loader.follow_trainer()
    loader.received.start()
    for name in ("b0", "b1", "b2"):
        loader.received.add(recorder(log, name))
    loader.trained()
    assert log == ["b0"]
    loader.trained(2)
    assert log == ["b0", "b1", "b2"]


def test_a_new_record_counts_from_nothing_before_its_first_start() -> None:
    """A loader makes its Received before its first epoch; until ``start()``, nothing is
    counted yet: the first batch trained on is applied, and none is held ahead."""
    log: list[str] = []
    received = Received()
    assert received.ahead == 0
    received.follow()
    received.add(recorder(log, "b0"))
    received.add(recorder(log, "b1"))
    received.trained()
    assert log == ["b0"] and received.ahead == 1
