"""glibc's malloc in the processes that stream shards: keep freed memory for the next batch.

Streaming a shard allocates the same sizes over and over: each network read (up to 1 MiB),
each sample's bytes, each batch copied out of shared memory, then frees them. With glibc's
defaults, freed memory at the top of the heap is given back to the kernel once more than
128 KiB (later 2x the last mmapped size) is free there, and blocks above the (dynamic) mmap
threshold are mapped and unmapped one by one: the next batch then faults every page in again
and the kernel zeroes it. On 100 KiB samples that was most of a worker's and of the training
process's time (see benchmarks/README.md, "Page faults").

:func:`keep_freed_memory` raises glibc's trim threshold to :data:`TRIM_BYTES` and fixes its
mmap threshold at :data:`MMAP_BYTES` (``mallopt``), so that up to that much freed memory stays
with the process, ready for the next batch. aisio calls it in every process that opens a
shard (:meth:`aisio.core.pipeline.fetch.Fetcher.open`: the training process, or each worker) and in
the training process when a batch arrives through shared memory (:mod:`aisio.core.transport.ring`).
It does nothing where there is no glibc, when the user set glibc's own
malloc settings (``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_MMAP_THRESHOLD_``,
``GLIBC_TUNABLES=glibc.malloc...``), or when ``AISIO_MALLOC=0``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys

#: Freed memory at the top of the heap that glibc keeps instead of giving back (bytes).
TRIM_BYTES = 128 << 20
#: Allocations at least this large are mapped on their own (bytes): glibc's own ceiling for its
#: moving threshold, above a network read, a sample and a batch of decoded images (32 JPEGs
#: of 256 x 256 as uint8: 6.3 MB). Setting any threshold stops glibc from moving this one,
#: so it is set where glibc's would have ended.
MMAP_BYTES = 32 << 20
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_USER_SETTINGS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_")
_done: int | None = None  # the pid that already set them


def keep_freed_memory() -> bool:
    """Makes glibc keep up to :data:`TRIM_BYTES` of freed memory in this process (see the
    module doc); once per process. Returns whether the settings are aisio's."""
    global _done
    if _done == os.getpid():
        return True
    if (os.environ.get("AISIO_MALLOC", "1") == "0" or not sys.platform.startswith("linux")
            or any(name in os.environ for name in _USER_SETTINGS)
            or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", "")):
        return False
    mallopt = None
    with contextlib.suppress(OSError, AttributeError):
        mallopt = ctypes.CDLL(None).mallopt  # glibc's; musl and others have none
    if mallopt is None:
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    if not (mallopt(_M_MMAP_THRESHOLD, MMAP_BYTES) and mallopt(_M_TRIM_THRESHOLD, TRIM_BYTES)):
        return False
    _done = os.getpid()
    return True


__all__ = ["MMAP_BYTES", "TRIM_BYTES", "keep_freed_memory"]
