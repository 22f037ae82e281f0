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
    assert log == [] and received.ahead == 2
    received.trained()
    assert log == ["b0"] and received.ahead == 1
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


def called_from(module: str, loader: Loader) -> dict[str, Any]:
    """Calls ``loader.state_dict()`` from code whose module is ``module`` (as a trainer's)."""
    scope: dict[str, Any] = {"__name__": module, "loader": loader}
    exec("def ask():\n    return loader.state_dict()\n", scope)
    return scope["ask"]()  # type: ignore[no-any-return]


@pytest.mark.parametrize("module", ["lightning_fabric.strategies.strategy",
                                    "lightning.fabric.strategies.ddp",
                                    "accelerate.checkpointing"])
def test_a_trainer_that_asks_every_rank_gets_every_ranks_progress(
        module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    gathered: list[dict[str, Any]] = []

    def gather(loader: Any, state: dict[str, Any]) -> dict[str, Any]:
        gathered.append(state)
        return {"rank": "all"}

    monkeypatch.setattr(received_module, "gather_over_ranks", gather)
    loader = Loader()
    assert called_from(module, loader) == {"rank": "all"}
    assert gathered == [{"rank": "mine"}]
    assert called_from("my_training_script", loader) == {"rank": "mine"}  # the user's own call
    assert called_from("accelerated", loader) == {"rank": "mine"}  # a prefix is a module's
    assert len(gathered) == 1


@pytest.mark.parametrize("module, fix", [
    ("pytorch_lightning.utilities.combined_loader", "aisio.trainers.pytorch_lightning"),
    ("lightning.pytorch.utilities.combined_loader", "aisio.trainers.lightning."),
])
def test_lightning_without_the_callback_is_refused_at_its_first_checkpoint(
        module: str, fix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(received_module, "gather_over_ranks", lambda loader, state: state)
    loader = Loader()
    with pytest.raises(UsageError, match="fetcher runs a batch ahead") as caught:
        called_from(module, loader)
    assert f"callbacks=[{fix}" in str(caught.value)
    loader.follow_trainer()  # what the callback does
    assert called_from(module, loader) == {"rank": "mine"}


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
