"""Nothing lost, nothing duplicated: broken connections, retries, changed objects, bad shards."""

from __future__ import annotations

import logging
import os
import warnings
from collections import Counter
from pathlib import Path

import pytest

import aisio
from aisio.core.store.client import Client, client_for
from aisio.core.store.urls import AISPath, Bucket, object_url
from aisio.playground import Playground
from tests.conftest import default_loader, sample_keys, write_shards
from tests.faultproxy import fault_proxy

FAST_RETRY = {"backoff": 0.01, "backoff_max": 0.05, "max_retries": 8}


@pytest.fixture
def big_shards(ais_client: Client, bucket: Bucket, tmp_path: Path) -> tuple[str, list[str]]:
    # ~4 shards of ~120-150 KB (2 KB samples) so cuts land inside members and inside headers
    return write_shards(ais_client, bucket, tmp_path, shards=4, per_shard=60, payload=2000)


def test_cut_connections_resume_without_loss_or_repeats(ais_endpoint: str,
                                                        big_shards: tuple[str, list[str]]) -> None:
    template, keys = big_shards
    with fault_proxy(ais_endpoint, cut_after=10_000) as proxy:
        config = aisio.AISConfig(endpoint=proxy.endpoint, **FAST_RETRY)
        got = sample_keys(aisio.AISFileLoader(template, config=config).ais_parse_webdataset())
        assert proxy.breaks >= 4 * 10  # every ~10 KB of every shard
        assert proxy.range_requests >= proxy.breaks - 4  # each break but a first read resumes
    assert Counter(got) == Counter(keys)


@pytest.mark.torchdata
def test_random_resets_through_dataloader2(ais_endpoint: str,
                                           big_shards: tuple[str, list[str]]) -> None:
    template, keys = big_shards
    with fault_proxy(ais_endpoint, reset_probability=0.7, seed=3) as proxy:
        loader = default_loader(
            template, config=aisio.AISConfig(endpoint=proxy.endpoint, **FAST_RETRY),
            num_workers=2, seed=0)
        try:
            got = sample_keys(loader)
        finally:
            loader.shutdown()
        assert proxy.breaks > 0
    assert Counter(got) == Counter(keys)


def test_transient_statuses_are_retried_and_logged(ais_endpoint: str, ais_client: Client,
                                                   bucket: Bucket,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    ais_client.put_object(AISPath(bucket, "o"), b"payload")
    with fault_proxy(ais_endpoint, fail_statuses=(503, 429, 500)) as proxy:
        client = client_for(aisio.AISConfig(endpoint=proxy.endpoint, **FAST_RETRY))
        with caplog.at_level(logging.DEBUG, logger="aisio"):
            assert client.get_bytes(AISPath(bucket, "o")) == b"payload"
        assert proxy.requests == 4
    retries = [r.getMessage() for r in caplog.records if "retry" in r.getMessage()]
    assert len(retries) == 3
    assert all(bucket.uri("o") in m for m in retries)
    assert "HTTP 503" in retries[0]


def test_other_4xx_are_not_retried(ais_endpoint: str, bucket: Bucket) -> None:
    with fault_proxy(ais_endpoint) as proxy:
        client = client_for(aisio.AISConfig(endpoint=proxy.endpoint, **FAST_RETRY))
        with pytest.raises(aisio.ObjectNotFoundError):
            client.get_bytes(AISPath(bucket, "missing"))
        assert proxy.requests == 1


def test_retries_run_out_with_a_typed_error(ais_endpoint: str, bucket: Bucket) -> None:
    with fault_proxy(ais_endpoint, fail_statuses=(503,) * 20) as proxy:
        client = client_for(aisio.AISConfig(endpoint=proxy.endpoint, max_retries=2,
                                            backoff=0.01))
        with pytest.raises(aisio.AISRequestError) as info:
            client.get_bytes(AISPath(bucket, "o"))
        assert info.value.status == 503
        assert proxy.requests == 3


def test_unreachable_cluster_is_a_connection_error() -> None:
    from aisio.core.system.ports import free_port

    client = client_for(aisio.AISConfig(endpoint=f"http://127.0.0.1:{free_port()}",
                                        max_retries=1, backoff=0.01))
    with pytest.raises(aisio.AISConnectionError, match=r"127\.0\.0\.1"):
        list(client.list_objects(Bucket("b")))


def test_object_changed_between_reads_is_refused(ais_client: Client, bucket: Bucket) -> None:
    path = AISPath(bucket, "changing.bin")
    ais_client.put_object(path, b"a" * 100_000)
    reader = ais_client.open(object_url(ais_client.endpoint, path), name=path.uri())
    assert reader.read(10) == b"a" * 10
    ais_client.put_object(path, b"b" * 100_000)
    reader._drop()  # the connection breaks here; the reader must reopen at byte 10
    with pytest.raises(aisio.ObjectChangedError, match="changed"):
        reader.read(10)
    reader.close()


def test_target_restart_mid_epoch_loses_and_repeats_nothing(own_playground: Playground,
                                                             tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture
                                                             ) -> None:
    import threading
    import time

    assert own_playground.endpoint
    config = aisio.AISConfig(endpoint=own_playground.endpoint, max_retries=60, backoff=0.05,
                             backoff_max=0.5, read_timeout=10)
    client = client_for(config)
    bucket = Bucket("target-restart")
    client.create_bucket(bucket, exist_ok=True)
    template, keys = write_shards(client, bucket, tmp_path, shards=6, per_shard=150,
                                  payload=5000)
    started = threading.Event()

    def chaos() -> None:
        started.wait()
        own_playground.kill_node("target0")  # SIGKILL: connections die mid-stream
        time.sleep(1.0)
        own_playground.restart("target0")

    thread = threading.Thread(target=chaos)
    thread.start()
    got = []
    try:
        with caplog.at_level(logging.DEBUG, logger="aisio"), warnings.catch_warnings(
                record=True) as said:
            warnings.simplefilter("always", aisio.ClusterWaitWarning)
            for sample in aisio.AISFileLoader(template, config=config).ais_parse_webdataset():
                got.append(sample["__key__"])
                if len(got) == 100:
                    started.set()
                time.sleep(0.0005)
    finally:
        started.set()
        thread.join()  # the target runs again, whatever happened: the next test needs it
    assert any("retry" in r.getMessage() or "resuming" in r.getMessage()
               for r in caplog.records)
    assert Counter(got) == Counter(keys)
    # a wait for the restarting node, if there was one, is said as one, with its deadline
    assert all(w.category is aisio.ClusterWaitWarning and "cluster_wait" in str(w.message)
               for w in said)


def test_a_stream_broken_past_the_retries_names_the_byte(ais_endpoint: str, ais_client: Client,
                                                         bucket: Bucket) -> None:
    ais_client.put_object(AISPath(bucket, "big"), os.urandom(100_000))
    with fault_proxy(ais_endpoint, cut_after=10_000) as proxy:
        config = aisio.AISConfig(endpoint=proxy.endpoint, max_retries=0)
        reader = client_for(config).open(object_url(proxy.endpoint, AISPath(bucket, "big")),
                                         name=bucket.uri("big"))
        got = 0
        with pytest.raises(aisio.AISConnectionError) as info:
            while reader.read(65536):
                got += 1
        reader.close()
    assert info.value.offset == 10_000  # the GET is cut there, with no retry left
    assert "at byte 10000" in str(info.value)
    assert info.value.url == bucket.uri("big")
