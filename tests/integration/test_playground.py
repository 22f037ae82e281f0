"""Smoke tests of the real AIStore node that the session fixture runs."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from aisio import BucketNotFoundError, ObjectNotFoundError
from aisio.core.store.client import Client
from aisio.core.store.urls import AISPath, Bucket
from tests.conftest import ROOT


def test_cluster_is_ready(ais_endpoint: str) -> None:
    with urllib.request.urlopen(f"{ais_endpoint}/v1/health?prr=true", timeout=5) as resp:
        assert resp.status == 200


def test_put_list_get_range(ais_client: Client, bucket: Bucket) -> None:
    for i in range(25):
        ais_client.put_object(AISPath(bucket, f"dir/obj-{i:03d}"), f"payload-{i}".encode())
    ais_client.put_object(AISPath(bucket, "other"), b"x")
    pages = list(ais_client.list_pages(bucket, "dir/", page_size=10))
    assert len(pages) == 3
    names = [e["name"] for page in pages for e in page]
    assert names == [f"dir/obj-{i:03d}" for i in range(25)]
    assert ais_client.get_bytes(AISPath(bucket, "dir/obj-007")) == b"payload-7"
    assert ais_client.get_bytes(AISPath(bucket, "dir/obj-007"), byte_range=(2, 4)) == b"ylo"
    assert ais_client.head_object(AISPath(bucket, "dir/obj-007"))["size"] == "9"


def test_missing_bucket_and_object_are_404(ais_client: Client, bucket: Bucket) -> None:
    with pytest.raises(BucketNotFoundError) as info:
        list(ais_client.list_objects(Bucket("aisio-no-such-bucket")))
    assert info.value.status == 404
    with pytest.raises(ObjectNotFoundError) as info2:
        ais_client.get_bytes(AISPath(bucket, "nope"))
    assert info2.value.status == 404
    assert "nope" in str(info2.value)


def test_three_targets(tmp_path: Path) -> None:
    from aisio import AISConfig, AISFileLoader
    from aisio.core.store.client import client_for
    from aisio.playground import Playground

    playground = Playground(tmp_path / "pg3", ntargets=3)
    endpoint = playground.up()
    try:
        status = playground.status()
        assert status["ready"] and len(status["nodes"]) == 4
        client = client_for(AISConfig(endpoint=endpoint))
        bucket = Bucket("three")
        client.create_bucket(bucket)
        for i in range(30):
            client.put_object(AISPath(bucket, f"o{i:02d}"), bytes([i]) * 100)
        homes = {client.head_object(AISPath(bucket, f"o{i:02d}"))["location"].split(":")[0]
                 for i in range(30)}
        assert len(homes) >= 2  # objects live on different targets
        got = {u: s.read() for u, s in AISFileLoader(bucket.uri("o{00..29}"), url=endpoint)}
        assert got == {bucket.uri(f"o{i:02d}"): bytes([i]) * 100 for i in range(30)}
    finally:
        playground.down(wipe=True, quiet=True)
    assert not playground.status()["running"]


# ---- issue #41: the playground keeps its data ------------------------------------------------
def aisio_cmd(*argv: str, env: dict[str, str],
              timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Runs the ``aisio`` command as a user would, in a process of its own."""
    return subprocess.run([sys.executable, "-m", "aisio", *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def test_down_then_up_keeps_the_buckets_on_the_same_endpoint_which_is_found_unset(
        tmp_path: Path) -> None:
    """`up`, put, `down`, `up` again (no --wipe): the same endpoint serves the object; and with
    AIS_ENDPOINT unset, the command finds the running default playground and says so once."""
    pg_dir = tmp_path / "pg"
    env = {k: v for k, v in os.environ.items() if k != "AIS_ENDPOINT"}
    env["AISIO_PLAYGROUND_DIR"] = str(tmp_path / "not-this-one")  # --dir names ours
    (tmp_path / "hello.txt").write_bytes(b"kept across down and up")
    try:
        up = aisio_cmd("playground", "up", "--dir", str(pg_dir), env=env)
        assert up.returncode == 0, up.stderr
        endpoint = up.stdout.strip().removeprefix("export AIS_ENDPOINT=")
        put = aisio_cmd("put", str(tmp_path / "hello.txt"), "ais://kept/hello.txt",
                        "--endpoint", endpoint, env=env)
        assert put.returncode == 0, put.stderr
        down = aisio_cmd("playground", "down", "--dir", str(pg_dir), env=env)
        assert down.returncode == 0 and "data kept" in down.stderr, down.stderr
        assert aisio_cmd("cat", "ais://kept/hello.txt", "--endpoint", endpoint,
                         env=env).returncode == 1  # it is down
        again = aisio_cmd("playground", "up", "--dir", str(pg_dir), env=env)
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip() == f"export AIS_ENDPOINT={endpoint}"
        cat = aisio_cmd("cat", "ais://kept/hello.txt", "--endpoint", endpoint, env=env)
        assert (cat.returncode, cat.stdout) == (0, "kept across down and up"), cat.stderr
        # AIS_ENDPOINT unset: the running default playground (AISIO_PLAYGROUND_DIR) is used.
        found = aisio_cmd("cat", "ais://kept/hello.txt", env={**env,
                                                              "AISIO_PLAYGROUND_DIR": str(pg_dir)})
        assert (found.returncode, found.stdout) == (0, "kept across down and up"), found.stderr
        assert found.stderr == (f"aisio: using the playground at {endpoint} "
                                "(AIS_ENDPOINT is unset)\n")
    finally:
        aisio_cmd("playground", "down", "--wipe", "--dir", str(pg_dir), env=env)
    assert not pg_dir.exists()
