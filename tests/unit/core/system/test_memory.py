"""aisio keeps freed memory in the processes that stream shards (glibc's mallopt)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")

# Allocates a batch of 64 x 100 KiB samples and frees it, as a loader's training process does,
# three times; prints whether aisio set glibc's thresholds, then the bytes glibc holds free in
# its heap after each freed batch (mallinfo2's fordblks: memory kept for the next batch, not
# given back to the kernel). Deterministic: no timing, no page-fault counts.
_CHILD = """
import ctypes, sys
from aisio.core.system.memory import keep_freed_memory

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = MallInfo2
kept = keep_freed_memory() if sys.argv[1] == "keep" else False
held = []
for _ in range(3):
    batch = [bytes(100 * 1024) for _ in range(64)]
    batch = None
    held.append(mallinfo2().fordblks)
print(kept, *held)
"""
BATCH = 64 * 100 * 1024


def _run(mode: str, **env: str) -> tuple[bool, list[int]]:
    out = subprocess.run([sys.executable, "-c", _CHILD, mode], capture_output=True, text=True,
                         check=True, timeout=60,
                         env={**os.environ, "AISIO_MALLOC": "1", **env}).stdout.split()
    return out[0] == "True", [int(n) for n in out[1:]]


def test_freed_batches_stay_with_the_process() -> None:
    kept, held = _run("keep")
    assert kept
    plain_kept, plain_held = _run("plain")
    assert not plain_kept
    # kept: every freed batch stays in the heap, ready for the next one; glibc's defaults give
    # it back to the kernel (the next batch faults every page in again).
    assert all(n >= BATCH for n in held), held
    assert all(n < BATCH for n in plain_held), plain_held


@pytest.mark.parametrize("env", [{"AISIO_MALLOC": "0"}, {"MALLOC_TRIM_THRESHOLD_": "131072"},
                                 {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"}])
def test_the_users_malloc_settings_are_left_alone(env: dict[str, str]) -> None:
    kept, _ = _run("keep", **env)
    assert not kept
