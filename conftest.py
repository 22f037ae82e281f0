"""pytest, for the whole checkout: the doctests of the package's modules are collected too."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

# Which tests run in which environment (make test's two passes): see tests/environments.py.
pytest_plugins = ["tests.environments"]

# The DataLoader2 front end imports torchdata.dataloader2 (torchdata < 0.10): in the torchdata
# 0.11 environment its modules have nothing to collect.
_NEEDS_DATALOADER2 = {Path("aisio/datapipes/dataloader2.py"), Path("aisio/datapipes/mpfix.py")}


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if importlib.util.find_spec("torchdata.dataloader2") is not None:
        return None
    relative = collection_path.relative_to(config.rootpath) if collection_path.is_relative_to(
        config.rootpath) else collection_path
    return True if relative in _NEEDS_DATALOADER2 else None
