"""aisio keeps freed memory in the processes that stream shards (glibc's mallopt)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")

# Frees and allocates a batch of 64 x 100 KiB samples 200 times, as a loader's training
# process does; prints whether aisio set glibc's thresholds and the page faults of the last
# 100 rounds.
_CHILD = """
import resource, sys
from aisio.core.system.memory import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else False
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
batch = None
for round_ in range(200):
    if round_ == 100:
        before = faults()
    batch = None
    batch = [bytes(100 * 1024) for _ in range(64)]
print(kept, faults() - before)
"""


def _run(mode: str, **env: str) -> tuple[bool, int]:
    out = subprocess.run([sys.executable, "-c", _CHILD, mode], capture_output=True, text=True,
                         check=True, timeout=60,
                         env={**os.environ, "AISIO_MALLOC": "1", **env}).stdout.split()
    return out[0] == "True", int(out[1])


def test_freed_batches_are_not_faulted_in_again() -> None:
    kept, faults = _run("keep")
    assert kept
    plain_kept, plain_faults = _run("plain")
    assert not plain_kept
    # glibc's defaults give a freed batch back and fault it in again (25 pages per sample);
    # kept, the next batch reuses it.
    assert plain_faults > 64 * 25 * 50, plain_faults
    assert faults < plain_faults / 20, (faults, plain_faults)


@pytest.mark.parametrize("env", [{"AISIO_MALLOC": "0"}, {"MALLOC_TRIM_THRESHOLD_": "131072"},
                                 {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"}])
def test_the_users_malloc_settings_are_left_alone(env: dict[str, str]) -> None:
    kept, _ = _run("keep", **env)
    assert not kept
