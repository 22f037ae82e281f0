"""Runs a function right after a module is imported, so that aisio never imports it first.

aisio patches or extends two packages it does not need on its own hot path: torch's DataPipes
(aisio's functional forms, ``ais_list_files``, ...) and torchdata's DataLoader2 (the fix of its
round robin, :mod:`aisio.datapipes.mpfix`). Importing either just in case costs a fresh job
its time (torchdata's DataLoader2 pulls in torchdata's DataPipes, the aistore SDK and
pydantic). :func:`after_import` runs the function at once when the module is already imported,
else right after its import finishes, through a one-shot import hook.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

_PENDING: dict[str, list[Callable[[], None]]] = {}


class _AfterImport(importlib.abc.MetaPathFinder):
    """An import hook: once a module of :data:`_PENDING` has been executed, runs its functions
    (and forgets them, removing itself when nothing is left)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _PENDING:
            return None
        functions = _PENDING.pop(fullname)
        if not _PENDING:
            uninstall()
        spec = importlib.util.find_spec(fullname)  # by the finders after this one
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then_run(module: ModuleType) -> None:
            exec_module(module)
            for function in functions:
                function()

        loader.exec_module = exec_then_run  # type: ignore[method-assign]
        return spec


_HOOK = _AfterImport()


def after_import(module: str, function: Callable[[], None]) -> None:
    """Calls ``function()`` now if ``module`` is imported, else right after it is (once)."""
    if module in sys.modules:
        function()
        return
    _PENDING.setdefault(module, []).append(function)
    if _HOOK not in sys.meta_path:
        sys.meta_path.insert(0, _HOOK)


def quietly(function: Callable[[], object]) -> Callable[[], None]:
    """Returns ``function`` with its exceptions dropped, for an :func:`after_import` that must
    not break the user's import (an error surfaces again where the patched part is used)."""

    def call() -> None:
        with contextlib.suppress(Exception):
            function()

    return call


def uninstall() -> None:
    """Removes the import hook (it removes itself once its last module is imported)."""
    if _HOOK in sys.meta_path:
        sys.meta_path.remove(_HOOK)


__all__ = ["after_import", "quietly", "uninstall"]
