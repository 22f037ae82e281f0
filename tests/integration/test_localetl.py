"""A real local ETL process (the SDK's own server, serving tests/integration/etl_classes.py) in
front of the real AIStore: every read path gets transformed bytes, errors stay typed, and the
server goes down with the playground."""

from __future__ import annotations

import importlib.util
import io
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import webdataset as wds
from PIL import Image

import aisio
from aisio import localetl
from aisio.core.store.client import Client
from aisio.core.store.etl import LocalETL, local_etls, read_url, registry_file, server_alive
from aisio.core.store.urls import AISPath, Bucket
from aisio.playground import Playground
from aisio.tools.cli import main as cli
from tests.conftest import LOADERS, default_loader, sample_keys

CLASSES = Path(__file__).with_name("etl_classes.py")
NAME = "upper-text"


@pytest.fixture
def upper(ais_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
          ) -> Iterator[LocalETL]:
    """The UpperText ETL served locally for the test cluster, stopped after the test; it logs
    the path of each object it transforms to ``etl-calls.log`` in ``tmp_path``."""
    monkeypatch.setenv("AISIO_TEST_ETL_CALLS", str(tmp_path / "etl-calls.log"))
    with localetl.running(f"{CLASSES}:UpperText", NAME, ais_endpoint, replace=True) as server:
        yield server


def _png(value: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (value,) * 3).save(out, format="PNG")  # gray, stored RGB
    return out.getvalue()


@pytest.fixture
def shards(ais_client: Client, bucket: Bucket) -> str:
    """Three good shards of text + image samples, and ``bad-0000.tar`` (the ETL refuses it)."""
    for name in ("text-0000.tar", "text-0001.tar", "text-0002.tar", "bad-0000.tar"):
        buf = io.BytesIO()
        with wds.TarWriter(buf) as writer:
            for i in range(4):
                writer.write({"__key__": f"{name[:-4]}/s{i}", "txt": f"sample {i} of {name}",
                              "png": _png(i * 60), "cls": i})
        ais_client.put_object(AISPath(bucket, name), buf.getvalue())
    return bucket.uri("text-{0000..0002}.tar")


def _texts(samples: object) -> list[str]:
    return [s["txt"].decode() if isinstance(s["txt"], bytes) else s["txt"]  # type: ignore[attr-defined]
            for s in samples]  # type: ignore[attr-defined]


def test_file_loader_reads_through_the_local_etl(upper: LocalETL, shards: str,
                                                 ais_endpoint: str) -> None:
    pipe = aisio.AISFileLoader(shards, endpoint=ais_endpoint, etl=aisio.ETL(NAME, "!"))
    texts = _texts(pipe.ais_parse_webdataset())
    assert len(texts) == 12
    assert all(t == t.upper() and t.endswith("!") and t.startswith("SAMPLE") for t in texts)
    plain = _texts(aisio.AISFileLoader(shards, endpoint=ais_endpoint).ais_parse_webdataset())
    assert [t.upper() + "!" for t in plain] == texts


def test_source_lister_urls_give_webdataset_transformed_samples(
        upper: LocalETL, shards: str, ais_endpoint: str) -> None:
    urls = list(aisio.AISSourceLister(shards, etl=NAME, endpoint=ais_endpoint))
    assert len(urls) == 3 and all(u.startswith(upper.url + "/") for u in urls)
    samples = list(wds.WebDataset(urls, shardshuffle=False).decode("l8"))
    assert len(samples) == 12
    assert all(s["txt"] == s["txt"].upper() for s in samples)
    assert samples[1]["png"].shape == (8, 8) and int(samples[1]["png"][0, 0]) == 60
    # ... and the same URLs read back through AISFileLoader (the articles' lister -> loader chain)
    texts = _texts(aisio.AISFileLoader(urls, endpoint=ais_endpoint).ais_parse_webdataset())
    assert texts == [s["txt"] for s in samples]


@pytest.mark.parametrize("loader_name", sorted(LOADERS))
def test_one_call_loaders_with_workers_read_through_the_local_etl(
        loader_name: str, upper: LocalETL, shards: str, ais_endpoint: str) -> None:
    loader = LOADERS[loader_name](shards, endpoint=ais_endpoint, etl=NAME, decode="l8",
                                  tuple_fields=("txt", "png"), batch_size=4, collate=False,
                                  num_workers=2, seed=0)
    texts = [t for batch in loader for t, _ in batch]
    assert len(texts) == 12 and all(t == t.upper() for t in texts)


def test_cli_cat_head_preview_and_show_through_the_local_etl(
        upper: LocalETL, shards: str, ais_endpoint: str, tmp_path: Path,
        capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    shard = shards.replace("{0000..0002}", "0001")
    at = ["--endpoint", ais_endpoint]
    assert cli(["cat", shard, "--etl", NAME, *at]) == 0
    assert b"SAMPLE 2 OF TEXT-0001.TAR" in capsysbinary.readouterr().out
    assert cli(["head", shard, "--etl", NAME, "--json", *at]) == 0
    assert b'"key": "text-0001/s3"' in capsysbinary.readouterr().out
    bad = shards.replace("text-{0000..0002}", "bad-0000")  # the ETL's error proves it was asked
    assert cli(["head", bad, "--etl", NAME, *at]) == 1
    assert b"marked bad" in capsysbinary.readouterr().err
    grid = tmp_path / "grid.png"
    assert cli(["preview", shard, "--etl", NAME, "-o", str(grid), *at]) == 0
    assert grid.stat().st_size > 0
    capsysbinary.readouterr()
    assert cli(["etl", "show", NAME, shard, "--args", "?", *at]) == 0
    out = capsysbinary.readouterr().out.decode()
    assert "ORIGINAL" in out and "png 8x8" in out and "txt 25 B" in out and "txt 26 B" in out


def test_the_aisio_command_shows_the_image_mode_before_and_after_the_etl(
        upper: LocalETL, shards: str, ais_endpoint: str) -> None:
    shard = shards.replace("{0000..0002}", "0001")
    command = Path(sys.executable).with_name("aisio")
    done = subprocess.run([str(command), "etl", "show", NAME, shard, "--endpoint", ais_endpoint],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if "text-0001/s0" in line)
    assert "png 8x8 RGB" in row and "png 8x8 L " in row  # what a grayscale transform changes


def test_a_cluster_without_the_named_etl_still_raises(upper: LocalETL, shards: str,
                                                     ais_endpoint: str) -> None:
    url = next(iter(aisio.AISSourceLister(shards, etl="no-such-etl", endpoint=ais_endpoint)))
    assert url.startswith(f"{ais_endpoint}/v1/objects/")  # no local ETL: the cluster's URL
    for on_error in ("raise", "skip"):
        pipe = aisio.AISFileLoader(shards, endpoint=ais_endpoint, etl="no-such-etl",
                                   on_error=on_error)
        with pytest.raises(aisio.ETLUnavailableError) as info:
            list(pipe)
        message = str(info.value)
        assert "'no-such-etl'" in message and "built without ETL support" in message
        assert "aisio etl init" in message and "Kubernetes" in message


def test_a_raising_transform_is_a_typed_error_and_skippable(
        upper: LocalETL, shards: str, ais_endpoint: str, bucket: Bucket, tmp_path: Path) -> None:
    bad = bucket.uri("bad-0000.tar")
    with pytest.raises(aisio.ETLTransformError) as info:
        list(aisio.AISFileLoader(bad, endpoint=ais_endpoint, etl=NAME))
    calls = (tmp_path / "etl-calls.log").read_text().split()
    assert [c.rsplit("/", 1)[-1] for c in calls] == ["bad-0000.tar"]  # final: not retried
    error = info.value
    assert error.etl == NAME and "marked bad" in error.reason and error.url == bad
    assert f"'{NAME}'" in str(error) and bad in str(error) and "marked bad" in str(error)

    both = [bucket.uri("text-0000.tar"), bad, bucket.uri("text-0001.tar")]
    report = aisio.ErrorReport()
    pipe = aisio.AISFileLoader(both, endpoint=ais_endpoint, etl=NAME, on_error="skip",
                               report=report)
    keys = sample_keys(pipe.ais_parse_webdataset())
    assert len(keys) == 8, (keys, report.records())
    assert [Path(r["shard"]).name for r in report.records()] == ["bad-0000.tar"]
    assert "marked bad" in report.records()[0]["reason"]


def test_etl_cli_init_ls_stop(ais_endpoint: str, capsys: pytest.CaptureFixture[str]) -> None:
    name = "cli-upper"
    args = ["--endpoint", ais_endpoint]
    assert cli(["etl", "init", f"{CLASSES}:UpperText", "--name", name, *args]) == 0
    try:
        assert name in local_etls(ais_endpoint)
        assert cli(["etl", "ls", *args]) == 0
        out = capsys.readouterr().out
        assert name in out and "UpperText" in out and "built without ETL support" in out
        assert cli(["etl", "init", f"{CLASSES}:UpperText", "--name", name, *args]) == 1
        assert "already runs" in capsys.readouterr().err
        assert cli(["etl", "init", f"{CLASSES}:Missing", "--name", "other", *args]) == 1
        assert "no class Missing" in capsys.readouterr().err
    finally:
        assert cli(["etl", "stop", name, *args]) == 0
    assert name not in local_etls(ais_endpoint)


def test_playground_down_stops_its_local_etls(tmp_path: Path) -> None:
    playground = Playground(tmp_path / "pg")
    endpoint = playground.up()
    try:
        server = localetl.start(f"{CLASSES}:Identity", "identity", endpoint)
        assert server_alive(server.pid)
        assert json.loads(registry_file(endpoint).read_text())["etls"]["identity"]["pid"] == \
            server.pid
        assert [e["name"] for e in playground.status()["local_etls"]] == ["identity"]
    finally:
        playground.down(wipe=True, quiet=True)
    deadline = time.monotonic() + 5
    while server_alive(server.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not server_alive(server.pid)
    assert not registry_file(endpoint).exists() and local_etls(endpoint) == {}
    assert not list(registry_file(endpoint).parent.glob(f"{registry_file(endpoint).stem}*"))


def test_a_read_from_an_offset_through_a_local_etl_skips_to_it(
        upper: LocalETL, shards: str, ais_endpoint: str, ais_client: Client,
        bucket: Bucket) -> None:
    # A resumed shard opens at its saved offset; an ETL answers whole, so the reader skips ahead.
    path, etl = AISPath(bucket, "text-0002.tar"), aisio.ETL(NAME)
    whole = ais_client.get_bytes(path, etl=etl)
    url = read_url(ais_endpoint, path, etl)
    with ais_client.open(url, name=path.uri(), etl=etl, start=1536) as reader:
        assert reader.read() == whole[1536:]


def test_a_framework_that_is_not_installed_is_named(ais_endpoint: str, tmp_path: Path) -> None:
    pytest.importorskip("aistore")
    if importlib.util.find_spec("fastapi") is not None:
        pytest.skip("fastapi is installed here")
    source = tmp_path / "fast_etl.py"
    source.write_text("from aistore.sdk.etl.webserver.fastapi_server import FastAPIServer\n\n"
                      "class Echo(FastAPIServer):\n"
                      "    def transform(self, data, path, etl_args):\n"
                      "        return data\n")
    with pytest.raises(aisio.PlaygroundError, match="pip install fastapi"):
        localetl.start(f"{source}:Echo", "fast-echo", ais_endpoint)
    assert "fast-echo" not in local_etls(ais_endpoint)


@pytest.mark.torchdata
def test_loaders_skip_a_shard_the_transform_refuses_and_report_it(
        upper: LocalETL, shards: str, ais_endpoint: str, bucket: Bucket) -> None:
    both = bucket.uri("{text-0000,bad-0000,text-0001}.tar")
    loader = default_loader(both, endpoint=ais_endpoint, etl=NAME, tuple_fields=("txt",),
                            batch_size=4, collate=False, num_workers=2, seed=0, on_error="skip")
    texts = [t for batch in loader for (t,) in batch]
    assert len(texts) == 8 and all(t == t.upper() for t in texts)
    assert loader.report is not None
    (record,) = loader.report.records()
    assert record["shard"].endswith("bad-0000.tar") and "marked bad" in record["reason"]


def test_the_shard_cache_keeps_what_a_local_etl_returned(
        shards: str, ais_endpoint: str, tmp_path: Path) -> None:
    cache = aisio.ShardCache(tmp_path / "cache", max_bytes=10**8)
    with localetl.running(f"{CLASSES}:UpperText", NAME, ais_endpoint, replace=True):
        first = _texts(aisio.AISFileLoader(shards, endpoint=ais_endpoint, etl=NAME,
                                           cache=cache).ais_parse_webdataset())
    assert len(list(cache.directory.glob("*.shard"))) == 3
    # the server is gone: the transformed shards come from the cache (checked against the
    # cluster's version of each object), not from the cluster, which has no such ETL
    again = _texts(aisio.AISFileLoader(shards, endpoint=ais_endpoint, etl=NAME,
                                       cache=cache).ais_parse_webdataset())
    assert again == first and all(t == t.upper() for t in again)
