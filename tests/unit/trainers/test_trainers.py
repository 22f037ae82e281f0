"""The trainer integrations are optional extras: aisio imports without them, and importing an
integration whose trainer is missing names what to install."""

from __future__ import annotations

import importlib
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from aisio.core.epochs.received import FollowsTrainer, Received
from aisio.core.faults.errors import LoaderUnavailableError, UsageError
from aisio.trainers.callback import TrainedBatches


@pytest.mark.parametrize("module, blocked, names", [
    ("aisio.trainers.pytorch_lightning", "pytorch_lightning", "pip install 'aisio[lightning]'"),
    ("aisio.trainers.lightning", "lightning", "pip install lightning"),
])
def test_a_missing_trainer_names_the_extra(module: str, blocked: str, names: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, blocked, None)  # as if it were not installed
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(LoaderUnavailableError, match="needs") as caught:
        importlib.import_module(module)
    assert names in str(caught.value)


def test_aisio_imports_no_trainer() -> None:
    code = ("import sys, aisio, aisio.trainers; "
            "print(sorted(m for m in ('lightning', 'pytorch_lightning', 'lightning_fabric', "
            "'accelerate') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


class Loader(FollowsTrainer):
    def __init__(self) -> None:
        self.received = Received()


def test_the_callback_follows_the_aisio_train_loader_and_counts_each_step() -> None:
    a = Loader()
    trainer = SimpleNamespace(train_dataloader={"a": a, "rest": [object()]})
    callback = TrainedBatches()
    callback.on_train_start(trainer, None)
    assert a.received.following
    a.received.start()
    a.received.add(lambda: None)
    a.received.add(lambda: None)  # fetched ahead
    callback.on_train_batch_end(trainer, None, None, None, 0)
    assert a.received.ahead == 1
    # ModelCheckpoint(save_last=True) saves in its on_train_end, after this callback's: the
    # loader follows the trainer until teardown (#41 item 7: the README's Lightning snippet)
    getattr(callback, "on_train_end", lambda *args: None)(trainer, None)
    assert a.received.following
    callback.teardown(trainer, None, "fit")  # the loader is the user's again
    assert not a.received.following


def test_the_callback_refuses_several_aisio_train_loaders() -> None:
    trainer = SimpleNamespace(train_dataloader={"a": Loader(), "b": [Loader()]})
    with pytest.raises(UsageError, match="2 aisio train loaders"):
        TrainedBatches().on_train_start(trainer, None)


def test_the_callback_tolerates_a_trainer_without_loaders() -> None:
    callback = TrainedBatches()
    trainer: Any = SimpleNamespace(train_dataloader=None)
    callback.on_train_epoch_start(trainer, None)
    callback.on_train_batch_end(trainer, None, None, None, 0)


def test_the_callback_is_announced_for_its_fit_only() -> None:
    """Lightning fetches the first batch before ``on_train_start``: the callback announces
    itself as the fit starts (the loader then follows from that batch) and withdraws at
    teardown (a later loop in the process, without it, is refused again)."""
    from aisio.runtime import fetchers

    callback, trainer = TrainedBatches(), SimpleNamespace(train_dataloader=None)
    callback.on_fit_start(trainer, None)
    assert fetchers._ANNOUNCED[-1:] == [callback]
    callback.teardown(trainer, None, "fit")
    assert callback not in fetchers._ANNOUNCED and None not in fetchers._ANNOUNCED
