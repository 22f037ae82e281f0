"""pytest, for the whole checkout: the doctests of the package's modules are collected too."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

# Which tests run in which environment (make test's two passes): see tests/environments.py.
pytest_plugins = ["tests.environments"]

# The DataLoader2 front end imports torchdata.dataloader2 (torchdata < 0.10): in the torchdata
# 0.11 environment its modules have nothing to collect.
# The trainer integrations import their trainer (an optional extra): where it is missing, so
# is anything to collect.
_NEEDS = {
    Path("aisio/datapipes/dataloader2.py"): "torchdata.dataloader2",
    Path("aisio/datapipes/mpfix.py"): "torchdata.dataloader2",
    Path("aisio/trainers/lightning.py"): "lightning",
    Path("aisio/trainers/pytorch_lightning.py"): "pytorch_lightning",
}


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    relative = collection_path.relative_to(config.rootpath) if collection_path.is_relative_to(
        config.rootpath) else collection_path
    module = _NEEDS.get(relative)
    if module is None:
        return None
    return True if importlib.util.find_spec(module.split(".")[0]) is None or (
        importlib.util.find_spec(module) is None) else None
