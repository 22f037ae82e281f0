"""The ``aisio`` command against the real AIStore: ls, stat, get, cat, head, preview."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import webdataset as wds
from PIL import Image

from aisio.core.store.client import Client
from aisio.core.store.urls import AISPath, Bucket
from aisio.tools.cli import main
from tests.conftest import ROOT, tar_bytes

ODD = "odd <name> & \"q\" 'x'.bin"


def png(value: int, mode: str = "RGB") -> bytes:
    out = io.BytesIO()
    Image.new(mode, (16, 12), color=value if mode == "L" else (value, 80, 160)).save(out, "PNG")
    return out.getvalue()


def shard_bytes(n: int = 6) -> bytes:
    buf = io.BytesIO()
    with wds.TarWriter(buf) as writer:
        for i in range(n):
            writer.write({"__key__": f"s{i:03d}", "jpg": png(40 * i), "seg.png": png(9 * i, "L"),
                          "cls": i % 3})
    return buf.getvalue()


@pytest.fixture
def filled(ais_client: Client, bucket: Bucket) -> dict[str, bytes]:
    """Three shards, a few plain objects and an oddly named one; returns name -> bytes."""
    data = {f"shards/train-{i}.tar": shard_bytes() for i in range(3)}
    data.update({"notes/a.txt": b"hello\n", "notes/b.json": b'{"k": 1}', ODD: b"odd"})
    for name, body in data.items():
        ais_client.put_object(AISPath(bucket, name), body)
    return data


Run = Callable[..., tuple[int, bytes, str]]


@pytest.fixture
def cli(capsysbinary: pytest.CaptureFixture[bytes], ais_endpoint: str,
        monkeypatch: pytest.MonkeyPatch) -> Run:
    """Runs ``aisio ARGS`` in-process against the test cluster; returns (code, stdout, stderr)."""
    monkeypatch.setenv("AIS_ENDPOINT", ais_endpoint)

    def run(*argv: str) -> tuple[int, bytes, str]:
        code = main(list(argv))
        out, err = capsysbinary.readouterr()
        assert "Traceback" not in err.decode()
        return code, out, err.decode()

    return run


def test_ls_prefix_template_json_long(cli: Run, bucket: Bucket, filled: dict[str, bytes]) -> None:
    code, out, _ = cli("ls", bucket.uri("shards/"))
    lines = out.decode().splitlines()
    assert code == 0 and lines[0].split() == ["NAME", "SIZE"]
    assert [line.split()[0] for line in lines[1:4]] == [bucket.uri(f"shards/train-{i}.tar")
                                                        for i in range(3)]
    total = sum(len(filled[f"shards/train-{i}.tar"]) for i in range(3))
    assert lines[-1].startswith("3 objects, ") and "KiB" in lines[-1]

    code, out, _ = cli("ls", bucket.uri(), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["count"] == len(filled)
    assert doc["bytes"] == sum(len(b) for b in filled.values())
    assert {o["name"] for o in doc["objects"]} == {bucket.uri(n) for n in filled}

    code, out, _ = cli("ls", "--json", bucket.uri("shards/train-{0..2}.tar"))
    assert code == 0 and json.loads(out)["bytes"] == total

    code, out, _ = cli("ls", "-l", bucket.uri("notes/"), "--limit", "1")
    header = out.decode().splitlines()[0].split()
    assert header[:2] == ["NAME", "SIZE"] and "VERSION" in header and "CHECKSUM" in header
    assert "1 object, 6 B (limit reached; more exist)" in out.decode()

    code, out, _ = cli("ls")
    assert code == 0 and bucket.uri() in out.decode().splitlines()


def test_ls_template_with_missing_names(cli: Run, bucket: Bucket, filled: dict[str, bytes]) -> None:
    code, out, err = cli("ls", bucket.uri("shards/train-{0..4}.tar"))
    assert code == 1
    assert "3 objects" in out.decode()
    assert err.count("\n") == 1 and "2 name(s) of the template do not exist" in err
    assert bucket.uri("shards/train-4.tar") in err


def test_stat(cli: Run, bucket: Bucket, filled: dict[str, bytes]) -> None:
    code, out, _ = cli("stat", bucket.uri(ODD))
    rows = dict(line.split(None, 1) for line in out.decode().splitlines()[1:])
    assert code == 0 and rows["size"] == "3 (3 B)" and rows["name"] == bucket.uri(ODD)
    code, out, _ = cli("stat", "--json", bucket.uri("notes/b.json"))
    doc = json.loads(out)
    assert doc["size"] == 8 and doc["name"] == bucket.uri("notes/b.json")


def test_get_and_cat(cli: Run, bucket: Bucket, filled: dict[str, bytes], tmp_path: Path,
                     monkeypatch: pytest.MonkeyPatch) -> None:
    shard = filled["shards/train-1.tar"]
    code, out, _ = cli("get", bucket.uri("shards/train-1.tar"), str(tmp_path))
    assert code == 0 and (tmp_path / "train-1.tar").read_bytes() == shard
    assert out.decode().startswith(
        f"{bucket.uri('shards/train-1.tar')} -> {tmp_path / 'train-1.tar'} (")
    code, _, _ = cli("get", bucket.uri(ODD), str(tmp_path / "renamed.bin"))
    assert code == 0 and (tmp_path / "renamed.bin").read_bytes() == b"odd"
    monkeypatch.chdir(tmp_path)
    code, _, _ = cli("get", bucket.uri("notes/a.txt"))
    assert code == 0 and (tmp_path / "a.txt").read_bytes() == b"hello\n"
    code, out, _ = cli("get", bucket.uri("notes/a.txt"), "-")
    assert code == 0 and out == b"hello\n"
    code, out, _ = cli("cat", bucket.uri("shards/train-2.tar"))
    assert code == 0 and out == filled["shards/train-2.tar"]


def test_head(cli: Run, bucket: Bucket, filled: dict[str, bytes]) -> None:
    code, out, _ = cli("head", bucket.uri("shards/train-0.tar"), "-n", "2")
    lines = out.decode().splitlines()
    assert code == 0 and lines[0].split() == ["KEY", "FIELDS", "LABEL"]
    assert lines[1].startswith("s000") and "cls 1 B" in lines[1] and "seg.png" in lines[1]
    assert lines[-1] == f"2 sample(s) from the start of {bucket.uri('shards/train-0.tar')}"
    code, out, _ = cli("head", "--json", "-n", "10", bucket.uri("shards/train-0.tar"))
    samples = json.loads(out)
    assert [s["key"] for s in samples] == [f"s{i:03d}" for i in range(6)]
    assert set(samples[0]["fields"]) == {"jpg", "seg.png", "cls"}


def test_preview_writes_a_png_grid(cli: Run, bucket: Bucket, filled: dict[str, bytes],
                                   tmp_path: Path) -> None:
    grid = tmp_path / "grid.png"
    code, out, _ = cli("preview", bucket.uri("shards/train-0.tar"), "-o", str(grid), "-n", "4")
    assert code == 0 and "4 sample(s)" in out.decode()
    with Image.open(grid) as image:
        assert image.format == "PNG" and image.width > 400
    code, _, _ = cli("preview", bucket.uri("shards/train-0.tar"), "-o", str(grid), "-n", "3",
                     "--field", "seg.png", "--cols", "3", "--dpi", "50")
    assert code == 0
    code, _, err = cli("preview", bucket.uri("notes/a.txt"), "-o", str(tmp_path / "x.png"))
    assert code == 1 and err.count("\n") == 1 and "is not a tar file" in err
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize(("argv", "expected"), [
    (["ls", "ais://aisio-no-such-bucket"], "does not exist"),
    (["stat", "{b}/missing"], "does not exist"),
    (["get", "{b}/missing"], "does not exist"),
    (["cat", "{b}/missing"], "does not exist"),
    (["head", "{b}/missing.tar"], "does not exist"),
    (["get", "{b}/etl.bin", "--etl", "resize"], "ETL 'resize'"),
])
def test_user_mistakes_are_one_line(cli: Run, bucket: Bucket, argv: list[str], expected: str,
                                    ais_client: Client, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    ais_client.put_object(AISPath(bucket, "etl.bin"), b"x")
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(*(a.replace("{b}", bucket.uri().rstrip("/")) for a in argv))
    assert code == 1 and out == b""
    assert err.count("\n") == 1 and err.startswith("aisio: error: ") and expected in err
    assert list(tmp_path.iterdir()) == []  # a failed get leaves no file


def test_as_a_process_a_mistake_prints_no_traceback(ais_endpoint: str, bucket: Bucket) -> None:
    env = {**os.environ, "AIS_ENDPOINT": ais_endpoint, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "aisio", "stat", bucket.uri("missing")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"aisio: error: object {bucket.uri('missing')} does not exist")




# ---- issue #19: a CLI without rough edges ----------------------------------------------------
def test_an_unclosed_brace_is_an_error_not_an_empty_listing(cli: Run, bucket: Bucket,
                                                           filled: dict[str, bytes]) -> None:
    code, out, err = cli("ls", bucket.uri("shards/train-{0..2.tar"))
    assert code == 1 and out == b""
    assert err.count("\n") == 1 and "unmatched '{'" in err and "shard-{0000..0099}" in err


def test_stat_of_a_bucket_and_a_remote_bucket_say_what_is_wrong(
        cli: Run, bucket: Bucket, filled: dict[str, bytes]) -> None:
    code, _, err = cli("stat", bucket.uri())
    assert code == 1 and "HTTP 400" not in err and "is not one object" in err
    assert "aisio ls" in err
    code, _, err = cli("stat", "s3://aisio-no-such-bucket/x")
    assert code == 1 and "object" not in err.split("(server")[0]
    assert err.startswith("aisio: error: bucket s3://aisio-no-such-bucket cannot be reached")


def test_an_endpoint_that_is_a_target_names_the_proxy(cli: Run, ais_endpoint: str,
                                                      bucket: Bucket,
                                                      filled: dict[str, bytes]) -> None:
    import requests

    smap = requests.get(f"{ais_endpoint}/v1/daemon", params={"what": "smap"}, timeout=5).json()
    target = next(iter(smap["tmap"].values()))["public_net"]["direct_url"]
    code, _, err = cli("ls", bucket.uri(), "--endpoint", target)
    assert code == 1 and "invalid UUID" not in err and err.count("\n") == 1
    assert f"{target} is an AIStore storage target, not a proxy" in err
    assert f"use the proxy, {ais_endpoint}" in err


def test_a_name_that_is_only_a_prefix_says_what_was_meant(cli: Run, ais_endpoint: str,
                                                          bucket: Bucket,
                                                          filled: dict[str, bytes]) -> None:
    import aisio

    code, out, _ = cli("ls", bucket.uri("shards/train-"))  # a lister: a prefix
    assert code == 0 and b"3 objects" in out
    code, _, err = cli("head", bucket.uri("shards/train-"))  # a reader: one object
    assert code == 1 and f"did you mean the template {bucket.uri('shards/train-{0..2}.tar')}" in err
    code, _, err = cli("stat", bucket.uri("shards"))
    assert code == 1 and f"did you mean the prefix {bucket.uri('shards/')}" in err
    with pytest.raises(aisio.ObjectNotFoundError, match="did you mean the prefix"):
        list(aisio.webdataset_pipe(bucket.uri("shards"), url=ais_endpoint))


@pytest.mark.parametrize(("name", "magic"), [("grid.jpg", b"\xff\xd8\xff"),
                                             ("grid.webp", b"RIFF"), ("grid", b"\x89PNG")])
def test_preview_writes_the_format_its_name_says(cli: Run, bucket: Bucket, tmp_path: Path,
                                                 filled: dict[str, bytes], name: str,
                                                 magic: bytes) -> None:
    code, _, _ = cli("preview", bucket.uri("shards/train-0.tar"), "-o", str(tmp_path / name))
    assert code == 0 and (tmp_path / name).read_bytes().startswith(magic)


def test_preview_refuses_a_name_no_image_format_has(cli: Run, bucket: Bucket, tmp_path: Path,
                                                    filled: dict[str, bytes]) -> None:
    code, _, err = cli("preview", bucket.uri("shards/train-0.tar"), "-o", str(tmp_path / "g.txt"))
    assert code == 1 and "'.txt'" in err and ".jpg" in err and not (tmp_path / "g.txt").exists()


def test_preview_marks_a_corrupt_image_and_head_shows_a_truncated_shards_good_samples(
        cli: Run, ais_client: Client, bucket: Bucket, tmp_path: Path) -> None:
    whole = tar_bytes([member for i in range(8) for member in (
        (f"s{i:03d}.png", png(20 * i) if i != 1 else b"bad"), (f"s{i:03d}.cls", b"%d" % i))])
    ais_client.put_object(AISPath(bucket, "one-bad.tar"), whole)
    ais_client.put_object(AISPath(bucket, "cut.tar"), whole[: 4 * 2048 + 600])  # in sample 4
    code, out, err = cli("preview", bucket.uri("one-bad.tar"), "-o", str(tmp_path / "g.png"))
    assert code == 0 and "8 image(s)" in out.decode()
    assert "does not decode: s001.png" in err
    code, out, err = cli("head", bucket.uri("cut.tar"), "-n", "20")
    lines = out.decode().splitlines()
    # every whole sample before the cut, in order, and not the one it cuts (s004)
    assert code == 1 and [line.split()[0] for line in lines[1:-1]] == [
        "s000", "s001", "s002", "s003"], lines
    assert lines[-1].startswith("4 sample(s)")
    assert "only 4 sample(s)" in err and "truncated" in err and "'s004.png'" in err
    # #41 item 5: what a user of the command can do, not a library argument
    assert "on_error" not in err and "re-upload the shard (`aisio put FILE SHARD`)" in err, err


def test_put_uploads_folders_in_parallel_and_a_rerun_resumes(
        cli: Run, ais_client: Client, bucket: Bucket, tmp_path: Path) -> None:
    src = tmp_path / "shards"
    (src / "val").mkdir(parents=True)
    for i in range(5):
        (src / f"train-{i}.tar").write_bytes(shard_bytes(2 + i))
    (src / "val" / "val-0.tar").write_bytes(shard_bytes(3))
    code, out, _ = cli("put", str(src), bucket.uri("data/"), "-j", "3")
    assert code == 0 and "put 6 files" in out.decode() and "skipped 0" in out.decode()
    for name in ["train-0.tar", "train-4.tar", "val/val-0.tar"]:
        assert ais_client.get_bytes(AISPath(bucket, f"data/{name}")) == (src / name).read_bytes()
    # A rerun (after an interruption, say) sends only what is missing or differs.
    ais_client.request("DELETE", f"{ais_client.endpoint}/v1/objects/{bucket.name}/data/"
                       "train-1.tar", name="x", what="deleting").close()
    changed = bytearray((src / "train-2.tar").read_bytes())
    changed[600] ^= 0xFF  # same size, other bytes: the checksum tells
    (src / "train-2.tar").write_bytes(bytes(changed))
    code, out, err = cli("put", str(src), bucket.uri("data/"))
    assert "skipping 4 files already in the bucket" in err
    assert code == 0 and "put 2 files" in out.decode() and "skipped 4 already there" in out.decode()
    assert ais_client.get_bytes(AISPath(bucket, "data/train-2.tar")) == bytes(changed)
    code, out, _ = cli("put", str(src), bucket.uri("data/"), "--force")
    assert code == 0 and "put 6 files" in out.decode()
    code, out, _ = cli("put", str(src / "train-0.tar"), bucket.uri("exact.tar"))
    assert code == 0 and ais_client.head_object(AISPath(bucket, "exact.tar"))["size"]


def test_put_mistakes_are_one_line(cli: Run, bucket: Bucket, tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.tar").write_bytes(b"x")
    code, _, err = cli("put", str(tmp_path / "a"), bucket.uri("data"))
    assert code == 1 and "end it with '/'" in err and err.count("\n") == 1
    code, _, err = cli("put", str(tmp_path / "missing"), bucket.uri())
    assert code == 1 and "no such file or folder" in err
    code, _, err = cli("put", str(tmp_path / "a"), "ais://b/s-{0..1}.tar")
    assert code == 1 and "is a template" in err


def test_names_that_miss_point_at_what_exists(cli: Run, bucket: Bucket,
                                              filled: dict[str, bytes]) -> None:
    """#29 item 7: a name without its extension names the object (not a generic template);
    a bucket typo names the near bucket (not "create it"); listing dates are ISO 8601."""
    code, _, err = cli("stat", bucket.uri("notes/a"))
    assert code == 1 and f"did you mean {bucket.uri('notes/a.txt')}?" in err, err
    assert "shard-{0000..0099}" not in err
    typo = bucket.name[:-1] + ("x" if bucket.name[-1] != "x" else "y")
    code, _, err = cli("stat", f"ais://{typo}/notes/a.txt")
    assert code == 1 and "does not exist: did you mean" in err and bucket.uri() in err, err
    assert "create it" not in err
    code, out, _ = cli("ls", "-l", bucket.uri("notes/"))
    assert code == 0 and re.search(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", out), out


def test_a_typo_gets_the_same_suggestion_from_the_command_and_the_library(
        cli: Run, bucket: Bucket, filled: dict[str, bytes], ais_endpoint: str) -> None:
    """#41 item 5: one owner for "did you mean" (aisio.core.store.suggest): a bucket typo names
    the near bucket from `aisio head`, `aisio ls` (bucket, prefix, template) and every library
    entry; a mis-padded template names the template of names that exist, from `aisio ls` and
    the loader alike."""
    import aisio

    typo = bucket.name[:-1] + ("x" if bucket.name[-1] != "x" else "y")
    near = f"bucket ais://{typo}/ does not exist: did you mean {bucket.uri()}?"
    names = [f"ais://{typo}/shards/train-0.tar", f"ais://{typo}", f"ais://{typo}/shards/",
             f"ais://{typo}/shards/train-{{0..2}}.tar"]
    code, _, err = cli("head", names[0])
    assert code == 1 and near in err, err
    for name in names[1:]:
        code, _, err = cli("ls", name)
        assert code == 1 and near in err, (name, err)
    for name in names[1:]:
        with pytest.raises(aisio.BucketNotFoundError) as info:
            next(iter(aisio.webdataset_dataloader(name, url=ais_endpoint, batch_size=2)))
        assert near in str(info.value), name
        with pytest.raises(aisio.BucketNotFoundError) as info:
            list(aisio.AISFileLister(name, url=ais_endpoint))
        assert near in str(info.value), name

    padded = bucket.uri("shards/train-{00..02}.tar")
    meant = f"did you mean {bucket.uri('shards/train-{0..2}.tar')} (3 object(s) that exist)?"
    code, _, err = cli("ls", padded)
    assert code == 1 and meant in err, err
    with pytest.raises(aisio.ObjectNotFoundError) as info:
        next(iter(aisio.webdataset_dataloader(padded, url=ais_endpoint, batch_size=2)))
    assert meant in str(info.value)
