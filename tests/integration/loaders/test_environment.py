"""The environment variables that turn aisio's transport off (docs/reference/environment.md),
set the way a user sets them: in the environment of a training process that then builds real
loaders with worker processes. ``AISIO_SHM=0``: no batch goes through shared memory;
``AISIO_PIPE_BYTES=N``: the workers' result pipes hold N bytes (``0``: as the system makes
them); ``AISIO_MALLOC=0``: glibc's malloc settings are left alone in the workers and in the
training process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from aisio.core.store.client import Client
from aisio.core.store.urls import Bucket
from tests.conftest import HAS_DATALOADER2, write_shards

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="pipe sizes, /proc and glibc's malloc are Linux's")

# One epoch of each loader, 2 workers, batches of 16 x 8 KB (through the ring unless it is off).
# At the fourth batch it records the sizes of this process's pipes and whether a torch
# shared-memory segment is mapped; each sample's "cls" field is decoded, in the worker, into
# whether aisio set glibc's malloc thresholds there.
TRAINING = """
import fcntl, json, os, sys
import aisio
from aisio.core.system import memory

F_GETPIPE_SZ = 1032

def malloc_set(data):
    return memory._done == os.getpid()

def pipe_sizes():
    sizes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
                sizes.add(fcntl.fcntl(int(fd), F_GETPIPE_SZ))
        except OSError:
            pass
    return sorted(sizes)

def shared_memory():
    with open("/proc/self/maps") as fh:
        return any("/dev/shm/torch_" in line for line in fh)

if __name__ == "__main__":
    template, endpoint, *kinds = sys.argv[1:]
    out = {}
    for kind in kinds:
        make = {"dataloader2": aisio.webdataset_loader,
                "dataloader": aisio.webdataset_dataloader}[kind]
        loader = make(template, url=endpoint, num_workers=2, seed=0, batch_size=16,
                      collate=False, tuple_fields=("bin", "cls"),
                      decode=aisio.Decoder(None, custom={"cls": malloc_set}))
        in_workers = set()
        for i, batch in enumerate(loader):
            in_workers |= {flag for _, flag in batch}
            if i == 3:
                out[kind] = {"pipes": pipe_sizes(), "shm": shared_memory()}
        out[kind].update(workers=sorted(in_workers), main=memory._done == os.getpid())
        loader.shutdown()
    print(json.dumps(out))
"""

KINDS = ["dataloader", *(["dataloader2"] if HAS_DATALOADER2 else [])]
SYSTEM_PIPE = 65536  # Linux's default pipe size (AISIO_PIPE_BYTES=0 keeps it)
ASKED_PIPE = 256 * 1024  # a power of two of pages, under /proc/sys/fs/pipe-max-size


def test_the_transport_switches_reach_every_loader(ais_client: Client, bucket: Bucket,
                                                   tmp_path: Path) -> None:
    template, _ = write_shards(ais_client, bucket, tmp_path, shards=4, per_shard=40,
                               payload=8000)
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(TRAINING))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AISIO_")}
    runs = {  # both at once: most of each is importing torch
        "on": subprocess.Popen(
            [sys.executable, str(script), template, ais_client.endpoint, *KINDS],
            stdout=subprocess.PIPE, text=True, env={**env, "AISIO_PIPE_BYTES": str(ASKED_PIPE)}),
        "off": subprocess.Popen(
            [sys.executable, str(script), template, ais_client.endpoint, *KINDS],
            stdout=subprocess.PIPE, text=True,
            env={**env, "AISIO_SHM": "0", "AISIO_PIPE_BYTES": "0", "AISIO_MALLOC": "0"}),
    }
    seen: dict[str, Any] = {}
    for name, proc in runs.items():
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"the {name} run failed"
        seen[name] = json.loads(out.splitlines()[-1])
    for kind in KINDS:
        on, off = seen["on"][kind], seen["off"][kind]
        assert on["shm"] and not off["shm"], (kind, on, off)
        assert ASKED_PIPE in on["pipes"] and max(off["pipes"]) == SYSTEM_PIPE, (kind, on, off)
        assert on["workers"] == [True] and off["workers"] == [False], (kind, on, off)
        assert on["main"] and not off["main"], (kind, on, off)
