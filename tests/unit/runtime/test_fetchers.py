"""Lightning's training loop iterating an aisio loader without aisio's callback is refused as
the loader's epoch starts (issue #37: it ran until its first checkpoint)."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from aisio.core.epochs.received import FollowsTrainer, Received
from aisio.core.faults.errors import UsageError
from aisio.runtime.fetchers import check_iteration


class Loader(FollowsTrainer):
    def __init__(self) -> None:
        self.received = Received()


def iterated_from(module: str, loader: Loader) -> None:
    """Runs the check as if code of ``module`` iterated ``loader``."""
    scope: dict[str, Any] = {"__name__": module, "check": check_iteration, "loader": loader}
    exec("def fetch():\n    check(loader)\n", scope)
    scope["fetch"]()


@pytest.mark.parametrize("package, module, fix", [
    ("pytorch_lightning", "pytorch_lightning.loops.fetchers", "aisio.trainers.pytorch_lightning"),
    ("lightning", "lightning.pytorch.loops.training_epoch_loop", "aisio.trainers.lightning."),
])
def test_lightnings_training_loop_without_the_callback_is_refused(
        package: str, module: str, fix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, package, sys.modules.get(package, types.ModuleType(package)))
    loader = Loader()
    with pytest.raises(UsageError, match="fetcher runs a batch ahead") as caught:
        iterated_from(module, loader)
    assert f"callbacks=[{fix}" in str(caught.value)
    loader.follow_trainer()  # what the callback does
    iterated_from(module, loader)


def test_other_loops_iterate_freely(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "lightning", sys.modules.get("lightning",
                                                                  types.ModuleType("lightning")))
    for module in ("my_training_script", "lightning.fabric.wrappers", "lightning_fabric"):
        iterated_from(module, Loader())


def test_with_the_callback_announced_the_loader_follows_from_its_first_batch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Lightning fetches the first batch before any hook can name the loader: a fit with aisio's
    callback announced makes the loader follow as it starts (that batch then counts once the
    trainer reports it trained, not as it is fetched)."""
    from aisio.runtime import fetchers

    monkeypatch.setitem(sys.modules, "lightning", sys.modules.get("lightning",
                                                                  types.ModuleType("lightning")))
    callback, loader = object(), Loader()
    fetchers.announce(callback)
    try:
        iterated_from("lightning.pytorch.loops.fit_loop", loader)
    finally:
        fetchers.withdraw(callback)
    assert loader.received.following
    with pytest.raises(UsageError):
        iterated_from("lightning.pytorch.loops.fit_loop", Loader())
