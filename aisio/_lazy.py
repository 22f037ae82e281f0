"""Keeps ``import aisio`` (and so the ``aisio`` command) free of torch, while DataPipes still
find aisio's functional forms.

The DataPipes front end imports torch (seconds: benchmarks/README.md, Figures behind the
code's comments). :mod:`aisio` imports it on first use of one of
its names (PEP 562), and registers the functional forms (``ais_list_files``, ...) as soon as torch
is there: at once when torch was imported before aisio, else right after ``import torch``
finishes (:func:`aisio.core.system.imports.after_import`). DataPipes only exist once torch is
imported, so ``IterableWrapper([...]).ais_list_files()`` works after a bare ``import aisio``
either way.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from aisio.core.system.imports import after_import, quietly


def import_datapipes() -> ModuleType:
    """Imports :mod:`aisio.datapipes`, registering the functional forms; returns it."""
    return importlib.import_module("aisio.datapipes")


def register_datapipes_with_torch() -> None:
    """Registers aisio's functional forms now if torch is imported, else right after it is.
    An error here surfaces, with its cause, when a DataPipe is asked for."""
    after_import("torch", quietly(import_datapipes))


def lazy_attribute(module: str, name: str, names: dict[str, str]) -> Any:
    """Returns ``names[name]`` imported from its module, for a package's ``__getattr__``."""
    try:
        source = names[name]
    except KeyError:
        raise AttributeError(f"module {module!r} has no attribute {name!r}") from None
    return getattr(importlib.import_module(source), name)
