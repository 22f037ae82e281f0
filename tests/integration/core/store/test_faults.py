"""Faults that used to lose, splice, hang or leak: a restarted proxy, objects overwritten during a
resume, and a node restart that must wait until the node serves."""

from __future__ import annotations

import logging
import os
import threading
import urllib.request
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import aisio
from aisio.core.store.client import Client, client_for
from aisio.core.store.urls import AISPath, Bucket, bucket_url, object_url
from aisio.playground import Playground
from tests.conftest import write_shards
from tests.integration._recording_proxy import RecordingProxy


def test_proxy_restart_mid_epoch_with_default_retries(own_playground: Playground, tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    assert own_playground.endpoint
    config = aisio.AISConfig(endpoint=own_playground.endpoint)  # default retries
    client = client_for(config)
    bucket = Bucket("proxy-restart")
    client.create_bucket(bucket, exist_ok=True)
    template, keys = write_shards(client, bucket, tmp_path, shards=6, per_shard=150,
                                  payload=2000)
    killed = threading.Event()
    reached = threading.Event()

    def chaos() -> None:
        reached.wait()
        own_playground.kill_node("proxy0")
        killed.set()
        own_playground.restart("proxy0")  # answers 400 ErrNoNodes until the target rejoins

    thread = threading.Thread(target=chaos)
    thread.start()
    got = []
    try:
        with caplog.at_level(logging.DEBUG, logger="aisio"), warnings.catch_warnings(
                record=True) as said:
            warnings.simplefilter("always", aisio.ClusterWaitWarning)
            for sample in aisio.AISFileLoader(template, config=config).ais_parse_webdataset():
                got.append(sample["__key__"])
                if len(got) == 100:  # inside shard 0: the next shards open while it restarts
                    reached.set()
                    killed.wait(30)
    finally:
        reached.set()
        thread.join()
    assert Counter(got) == Counter(keys)
    # a wait for the restarting node, if there was one, is said as one, with its deadline
    assert all(w.category is aisio.ClusterWaitWarning and "cluster_wait" in str(w.message)
               for w in said)
    assert any("(re)forming" in r.getMessage() for r in caplog.records)


def test_restart_returns_when_the_node_serves(own_playground: Playground) -> None:
    node = own_playground.kill_node("target0")
    own_playground.restart("target0")
    url = f"http://127.0.0.1:{node.port}/v1/health?prr=true"
    with urllib.request.urlopen(url, timeout=5) as resp:  # the node itself, not the proxy
        assert resp.status == 200
    assert own_playground.ready()


def _unversioned(client: Client, bucket: Bucket) -> None:
    """Turns off versioning and checksums: then GET answers name no version at all."""
    client.request("PATCH", bucket_url(client.endpoint, bucket), name=bucket.uri(),
                   what="setting props", json={"action": "set-bprops", "value": {
                       "versioning": {"enabled": False}, "checksum": {"type": "none"}}}).close()


def _read_at_least(reader: object, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = reader.read(65536)  # type: ignore[attr-defined]
        assert chunk
        data += chunk
    return data


@pytest.fixture
def recording(ais_endpoint: str) -> Iterator[RecordingProxy]:
    """A proxy in front of the session's cluster that records every request's Range header."""
    proxy = RecordingProxy(ais_endpoint).start()
    try:
        yield proxy
    finally:
        proxy.stop()


def test_overwrite_during_resume_without_versions_is_not_spliced(
        ais_client: Client, bucket: Bucket, recording: RecordingProxy) -> None:
    _unversioned(ais_client, bucket)
    path = AISPath(bucket, "same-size.bin")
    ais_client.put_object(path, b"a" * 300_000)
    client = client_for(aisio.AISConfig(endpoint=recording.endpoint))
    reader = client.open(object_url(client.endpoint, path), name=path.uri())
    first = _read_at_least(reader, 150_000)
    assert not reader.identified  # nothing names the version: the byte-0 path is the one
    ais_client.put_object(path, b"b" * 300_000)  # same size, new bytes
    reader._drop()  # the connection breaks here
    # Reopened from byte 0 (no Range), the prefix read again and compared: it differs.
    with pytest.raises(aisio.ObjectChangedError, match="different bytes now"):
        first += reader.read()
    reader.close()
    assert set(first) == {ord("a")}
    assert [r["range"] for r in recording.recorded_gets()] == [None, None]


def test_resume_without_versions_is_byte_exact(ais_client: Client, bucket: Bucket,
                                              recording: RecordingProxy) -> None:
    _unversioned(ais_client, bucket)
    path = AISPath(bucket, "stable.bin")
    data = os.urandom(300_000)
    ais_client.put_object(path, data)
    client = client_for(aisio.AISConfig(endpoint=recording.endpoint))
    reader = client.open(object_url(client.endpoint, path), name=path.uri())
    got = _read_at_least(reader, 100_000)
    assert not reader.identified
    reader._drop()
    got += _read_at_least(reader, 200_000 - len(got))
    reader._drop()
    got += reader.read()
    reader.close()
    assert got == data
    # Each reopen started at byte 0 (the compare path), never with Range; the prefix that was
    # read again went through the proxy a second and a third time.
    gets = recording.recorded_gets()
    assert [r["range"] for r in gets] == [None, None, None]
    assert sum(r["bytes"] for r in gets) >= len(data) + 100_000 + 200_000
