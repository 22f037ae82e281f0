"""Keeps ``import aisio`` (and so the ``aisio`` command) free of torch, while DataPipes still
find aisio's functional forms.

The DataPipes front end imports torch (about 2 s). :mod:`aisio` imports it on first use of one of
its names (PEP 562), and registers the functional forms (``ais_list_files``, ...) as soon as torch
is there: at once when torch was imported before aisio, else right after ``import torch``
finishes, through a one-shot import hook. DataPipes only exist once torch is imported, so
``IterableWrapper([...]).ais_list_files()`` works after a bare ``import aisio`` either way.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any


def import_datapipes() -> ModuleType:
    """Imports :mod:`aisio.datapipes`, registering the functional forms; returns it."""
    return importlib.import_module("aisio.datapipes")


def _register_quietly() -> None:
    # An error here surfaces, with its cause, when a DataPipe is asked for.
    with contextlib.suppress(Exception):
        import_datapipes()


class _AfterTorch(importlib.abc.MetaPathFinder):
    """A one-shot import hook: once ``import torch`` has finished, imports aisio.datapipes."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch":
            return None
        uninstall()
        spec = importlib.util.find_spec("torch")
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_torch = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            exec_torch(module)
            _register_quietly()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


_HOOK = _AfterTorch()


def uninstall() -> None:
    """Removes the import hook (it removes itself when torch is imported)."""
    if _HOOK in sys.meta_path:
        sys.meta_path.remove(_HOOK)


def register_datapipes_with_torch() -> None:
    """Registers aisio's functional forms now if torch is imported, else right after it is."""
    if "torch.utils.data.datapipes" in sys.modules:
        _register_quietly()
    elif _HOOK not in sys.meta_path:
        sys.meta_path.insert(0, _HOOK)


def lazy_attribute(module: str, name: str, names: dict[str, str]) -> Any:
    """Returns ``names[name]`` imported from its module, for a package's ``__getattr__``."""
    try:
        source = names[name]
    except KeyError:
        raise AttributeError(f"module {module!r} has no attribute {name!r}") from None
    return getattr(importlib.import_module(source), name)
