"""The DataPipe classes aisio builds on: torch's own, so aisio runs with any torchdata or none.

torch still ships the DataPipe machinery (``torch.utils.data.datapipes``) that torchdata <= 0.9
re-exported; torchdata 0.10 removed its copy. Building on torch's classes keeps every aisio
DataPipe, and its functional form, working whichever torchdata generation is installed.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # torch may announce that DataPipes are deprecated
    from torch.utils.data.datapipes._decorator import functional_datapipe
    from torch.utils.data.datapipes._hook_iterator import (
        _check_iterator_valid,
        _set_datapipe_valid_iterator_id,
        _SnapshotState,
    )
    from torch.utils.data.datapipes.datapipe import IterDataPipe
    from torch.utils.data.datapipes.iter import IterableWrapper
    from torch.utils.data.datapipes.utils.common import StreamWrapper



class Unhooked:
    """Gives a DataPipe an ``__iter__`` that torch does not wrap around every item.

    torch wraps the ``__iter__`` that a DataPipe class defines so that every item passes through
    its hook (an iterator-validity check, a counter, the profiler): a sixth of what a 2 KiB
    sample costs (benchmarks/README.md, Figures behind the code's comments). Inherited from
    this mixin (listed before :class:`IterDataPipe`), ``__iter__`` escapes that wrapper; the
    subclass defines ``_unhooked_iter(check)`` and keeps torch's one rule that matters, one
    valid iterator per DataPipe (a second ``iter()`` invalidates the first), by calling
    ``check()`` where it is cheap: once per shard, not once per sample. (torch's count of
    items yielded, used by its snapshot restore, is not kept: aisio resumes from its own
    state.)
    """

    def __iter__(self) -> Iterator[Any]:
        iterator_id = _set_datapipe_valid_iterator_id(self)
        self._snapshot_state = _SnapshotState.Iterating
        return self._unhooked_iter(partial(_check_iterator_valid, self, iterator_id))

    def _unhooked_iter(self, check: Callable[[], None]) -> Iterator[Any]:
        raise NotImplementedError


__all__ = [
    "IterDataPipe",
    "IterableWrapper",
    "StreamWrapper",
    "Unhooked",
    "_SnapshotState",
    "_check_iterator_valid",
    "_set_datapipe_valid_iterator_id",
    "functional_datapipe",
]
