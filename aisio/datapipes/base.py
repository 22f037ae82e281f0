"""The DataPipe classes aisio builds on: torch's own, so aisio runs with any torchdata or none.

torch still ships the DataPipe machinery (``torch.utils.data.datapipes``) that torchdata <= 0.9
re-exported; torchdata 0.10 removed its copy. Building on torch's classes keeps every aisio
DataPipe, and its functional form, working whichever torchdata generation is installed.
"""

from __future__ import annotations

import warnings

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

__all__ = [
    "IterDataPipe",
    "IterableWrapper",
    "StreamWrapper",
    "_SnapshotState",
    "_check_iterator_valid",
    "_set_datapipe_valid_iterator_id",
    "functional_datapipe",
]
