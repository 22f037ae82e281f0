"""Where a read through an ETL goes (aisio.core.store.etl), and how an ETL server's errors are
typed."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import aisio
from aisio.core.store import etl as routing
from aisio.core.store.etl import (
    LocalETL,
    parse_read_url,
    read_url,
    register,
    registry_file,
    unregister,
)
from aisio.core.store.translate import error_from_status
from aisio.core.store.urls import ETL, AISPath, Bucket, object_url

CLUSTER = "http://127.0.0.1:51080"
PATH = AISPath(Bucket("b"), "dir/shard 1.tar")


@pytest.fixture
def server() -> Iterator[subprocess.Popen[bytes]]:
    """A process whose command line is a local ETL server's (``python -m aisio.localetl ...``,
    as aisio.localetl starts one); it serves nothing, and reads never reach it here."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)",
                             "-m", routing.SERVER_MARKER])
    # Popen returns once the child has exec'd, a moment before the kernel fills in its
    # /proc/<pid>/cmdline (read empty, it looks like a zombie): wait for it, boundedly.
    cmdline = Path(f"/proc/{proc.pid}/cmdline")
    for _ in range(10_000):
        if cmdline.read_bytes():
            break
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
             server: subprocess.Popen[bytes]) -> LocalETL:
    """A registry in tmp_path holding one 'resize' server (the ``server`` process)."""
    monkeypatch.setenv("AISIO_CACHE_DIR", str(tmp_path))
    entry = LocalETL("resize", "http://127.0.0.1:9999", CLUSTER, server.pid, "f.py:C", "x.log")
    register(entry)
    return entry


def test_without_a_local_etl_reads_go_to_the_cluster(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AISIO_CACHE_DIR", str(tmp_path))
    assert read_url(CLUSTER, PATH) == object_url(CLUSTER, PATH)
    assert read_url(CLUSTER, PATH, ETL("resize")) == object_url(CLUSTER, PATH, ETL("resize"))


def test_a_local_etl_gets_the_reads_that_name_it(registry: LocalETL) -> None:
    etl = ETL("resize", {"size": 16})
    url = read_url(CLUSTER, PATH, etl)
    assert url == ("http://127.0.0.1:9999/b/dir/shard%201.tar?etl_name=resize"
                   "&etl_args=%7B%22size%22%3A16%7D")
    assert parse_read_url(url) == (CLUSTER, PATH, ETL("resize", '{"size":16}'))
    # other names, plain reads and other clusters are not its business
    assert read_url(CLUSTER, PATH, ETL("blur")).startswith(f"{CLUSTER}/v1/objects/")
    assert read_url(CLUSTER, PATH).startswith(f"{CLUSTER}/v1/objects/")
    assert read_url("http://127.0.0.1:1", PATH, etl).startswith("http://127.0.0.1:1/v1/objects/")
    with pytest.raises(aisio.InvalidURLError, match="only ais:// buckets"):
        read_url(CLUSTER, AISPath(Bucket("b", "aws"), "x"), etl)


def test_a_dead_or_stopped_server_is_not_used(registry: LocalETL,
                                              server: subprocess.Popen[bytes]) -> None:
    # its pid reused by a process that is no ETL server (this one)
    register(LocalETL("resize", registry.url, CLUSTER, os.getpid(), "f.py:C", "x.log"))
    assert read_url(CLUSTER, PATH, ETL("resize")).startswith(f"{CLUSTER}/v1/objects/")
    register(registry)
    assert read_url(CLUSTER, PATH, ETL("resize")).startswith("http://127.0.0.1:9999/")
    server.kill()  # the server died (and was reaped)
    server.wait()
    assert read_url(CLUSTER, PATH, ETL("resize")).startswith(f"{CLUSTER}/v1/objects/")
    register(registry)
    unregister(CLUSTER, "resize")
    assert not registry_file(CLUSTER).exists()
    assert read_url(CLUSTER, PATH, ETL("resize")).startswith(f"{CLUSTER}/v1/objects/")
    with pytest.raises(aisio.InvalidURLError):
        parse_read_url("http://127.0.0.1:9999/b/x.tar?etl_name=resize")


def test_a_local_etl_500_is_a_typed_transform_error() -> None:
    page = ("<!DOCTYPE HTML><html><body><h1>Error response</h1><p>Error code: 500</p>"
            "<p>Message: Unhandled error: bad &#x27;jpg&#x27;.</p></body></html>")
    error = error_from_status(500, page, url="ais://b/s.tar", what="reading", etl="resize",
                              local_etl="/tmp/resize.log")
    assert isinstance(error, aisio.ETLTransformError) and isinstance(error, aisio.DataError)
    assert error.reason == "Unhandled error: bad 'jpg'" and error.etl == "resize"
    assert str(error).startswith("ETL 'resize' failed to transform ais://b/s.tar: Unhandled")
    assert pickle.loads(pickle.dumps(error)).reason == error.reason
    fastapi = error_from_status(500, b'{"detail":"Processing error: boom"}', url="u", what="r",
                                etl="resize", local_etl="l")
    assert isinstance(fastapi, aisio.ETLTransformError) and fastapi.reason.endswith("boom")
    # the same 500 from a cluster is not a transform error, and 501 says why no ETL can run
    assert not isinstance(error_from_status(500, "", url="u", what="r", etl="resize"),
                          aisio.ETLTransformError)
    unavailable = error_from_status(501, "", url="u", what="r", etl="resize")
    assert isinstance(unavailable, aisio.ETLUnavailableError)
    assert "built without ETL support" in str(unavailable) and "aisio etl init" in str(unavailable)
