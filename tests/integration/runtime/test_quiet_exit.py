"""No traceback the user did not cause (issue #29, item 5), in a real process against the real
node, read from its stderr: a loader built after one failed mid-epoch prints no "Exception
ignored in ... __del__" from its workers; an exception in a DataLoader2 loop prints nothing
at interpreter exit but the user's own traceback; a warning given in a worker process names
the user's loop, not ``multiprocessing/process.py``."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

from aisio.core.store.client import Client
from aisio.core.store.urls import AISPath, Bucket
from tests.conftest import HAS_DATALOADER2, ROOT, write_shards

TIMEOUT = 180
# Each runs a script with worker processes: 15-25 s apiece, the long profile; the mechanisms
# have unit tests (tests/unit/core/transport/test_warnings.py).
pytestmark = pytest.mark.long
PROCESS_LOADERS = [name for name, present in [("webdataset_loader", HAS_DATALOADER2),
                                              ("webdataset_dataloader", True),
                                              ("webdataset_stateful_loader", True)] if present]


@pytest.fixture
def shards(ais_client: Client, bucket: Bucket, tmp_path: Path) -> tuple[list[str], str]:
    """Four good shards of 20 KiB samples (what a batch ships through shared memory) and a
    truncated one; returns (the good names, the truncated one's)."""
    write_shards(ais_client, bucket, tmp_path, shards=4, per_shard=12, payload=20_000)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for i in range(6):
            data = os.urandom(3000)
            info = tarfile.TarInfo(f"bad/k{i}.bin")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    ais_client.put_object(AISPath(bucket, "bad.tar"), buf.getvalue()[:9000])
    return [bucket.uri(f"shard-{s:04d}.tar") for s in range(4)], bucket.uri("bad.tar")


def run(script: str, endpoint: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "user_script.py"
    path.write_text(textwrap.dedent(script))
    env = {**os.environ, "AIS_ENDPOINT": endpoint, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                          timeout=TIMEOUT, env=env, cwd=tmp_path, check=False)


@pytest.mark.parametrize("make", [m for m in PROCESS_LOADERS if m != "webdataset_loader"])
def test_a_loader_built_after_one_failed_mid_epoch_prints_nothing_from_its_workers(
        make: str, ais_endpoint: str, shards: tuple[list[str], str], tmp_path: Path) -> None:
    good, bad = shards
    done = run(f"""
        import aisio
        for attempt in range(3):
            loader = aisio.{make}({[good[0], bad, good[1]]!r}, num_workers=2, batch_size=4,
                                  tuple_fields="bin cls")
            try:
                for batch in loader:
                    pass
            except aisio.ShardFormatError:
                pass
        loader = aisio.{make}({good * 10!r}, num_workers=2, batch_size=4,
                              tuple_fields="bin cls")
        print(sum(1 for _ in loader))
        """, ais_endpoint, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


@pytest.mark.skipif(not HAS_DATALOADER2, reason="DataLoader2 needs torchdata < 0.10")
def test_an_error_in_a_dataloader2_loop_prints_only_the_users_traceback(
        ais_endpoint: str, shards: tuple[list[str], str], tmp_path: Path) -> None:
    good, _ = shards
    done = run(f"""
        import aisio
        loader = aisio.webdataset_loader({good * 4!r}, num_workers=2, batch_size=16,
                                         tuple_fields="bin cls")
        for step, batch in enumerate(loader):
            if step == 2:
                raise RuntimeError("the user's own error")
        """, ais_endpoint, tmp_path)
    assert done.returncode == 1
    assert done.stderr.rstrip().endswith("RuntimeError: the user's own error"), done.stderr
    assert "Exception ignored" not in done.stderr


def test_a_warning_from_a_worker_names_the_users_loop(
        ais_endpoint: str, shards: tuple[list[str], str], tmp_path: Path) -> None:
    good, bad = shards
    done = run(f"""
        import aisio
        for make in {PROCESS_LOADERS!r}:
            loader = getattr(aisio, make)({[good[0], bad, good[1]]!r}, num_workers=2,
                batch_size=4, tuple_fields="bin cls", on_error="warn")
            for batch in loader:  # line 6
                pass
        """, ais_endpoint, tmp_path)
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if "UserWarning" in line]
    assert warned, done.stderr
    assert all(line.startswith(f"{tmp_path / 'user_script.py'}:6: UserWarning: aisio skipped")
               for line in warned), done.stderr
