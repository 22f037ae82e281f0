"""The ``aisio`` command line without a cluster: usage errors, endpoint errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aisio.tools.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own --help and usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("aisio: error: ")
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("argv", [
    [], ["nope"], ["ls", "--bogus"], ["head"], ["head", "ais://b/s.tar", "-n", "0"],
    ["head", "ais://b/s.tar", "-n", "x"], ["preview", "ais://b/s.tar", "--cols", "-2"],
    ["playground"], ["playground", "up", "--targets", "0"], ["stat"],
])
def test_usage_mistakes_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str],
                                                argv: list[str]) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    line = one_error_line(err)
    assert "--help" in line


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for command in ("ls", "stat", "get", "cat", "head", "preview", "playground"):
        assert f"    {command}" in out


@pytest.mark.parametrize("argv", [
    ["ls", "ais://b"], ["ls"], ["stat", "ais://b/o"], ["get", "ais://b/o"], ["cat", "ais://b/o"],
    ["head", "ais://b/s.tar"], ["preview", "ais://b/s.tar"],
])
def test_no_endpoint_says_how_to_get_one(capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> None:
    monkeypatch.delenv("AIS_ENDPOINT", raising=False)
    code, out, err = run(capsys, *argv)
    assert code == 1 and out == ""
    line = one_error_line(err)
    assert 'eval "$(aisio playground up)"' in line and "AIS_ENDPOINT" in line
    assert "--endpoint" in line


@pytest.mark.parametrize(("argv", "expected"), [
    (["ls", "foo://b"], "unknown provider 'foo'"),
    (["stat", "b/o"], "has no 'provider://' prefix"),
    (["get", "ais://b/"], "is not one object"),
    (["cat", "ais://b/s-{0..3}.tar"], "is not one object"),
    (["head", "ais:///x.tar"], "has no bucket name"),
    (["head", "ais://b/dir/"], "is not one object"),
    (["preview", "ais://b/a{0..2}.tar"], "is not one object"),
])
def test_bad_urls_fail_before_any_connection(capsys: pytest.CaptureFixture[str],
                                             argv: list[str], expected: str) -> None:
    code, _, err = run(capsys, *argv, "--endpoint", "http://127.0.0.1:9")
    assert code == 1
    assert expected in one_error_line(err)


def test_bad_endpoint_is_one_line(capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIS_ENDPOINT", "ftp://host")
    code, _, err = run(capsys, "ls", "ais://b")
    assert code == 1 and "is not an http(s) URL" in one_error_line(err)
    code, _, err = run(capsys, "ls", "ais://b", "--endpoint", "nonsense")
    assert code == 1 and "'nonsense'" in one_error_line(err)





def test_playground_status_of_an_empty_dir(capsys: pytest.CaptureFixture[str],
                                           tmp_path: Path) -> None:
    code, out, _ = run(capsys, "playground", "status", "--dir", str(tmp_path))
    assert code == 1
    assert json.loads(out) == {"running": False, "root": str(tmp_path)}


def test_get_into_a_missing_directory_fails_cleanly(capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    # The object is checked before the destination is opened: no file is left behind.
    code, _, err = run(capsys, "get", "ais://b", str(tmp_path / "no" / "such"),
                       "--endpoint", "http://127.0.0.1:9")
    assert code == 1 and "is not one object" in one_error_line(err)
    assert not list(tmp_path.iterdir())


def test_local_os_errors_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, _, err = run(capsys, "playground", "down", "--dir", str(blocker / "sub"), "--wipe")
    assert code == 1 and "Not a directory" in one_error_line(err)


def test_playground_build_without_go_says_how_to_go_on(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    monkeypatch.setenv("AISIO_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert main(["playground", "build"]) == 1
    err = capsys.readouterr().err
    assert "Go is not installed" in err and "AIS_ENDPOINT" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv", [
    ["etl"], ["etl", "init", "f.py:C"], ["etl", "show", "n"], ["etl", "stop"],
    ["etl", "init", "f.py:C", "--name", "n", "--local", "--cluster"],
])
def test_etl_usage_mistakes_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str],
                                                    argv: list[str]) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert "--help" in one_error_line(err)


@pytest.mark.parametrize(("source", "name", "fix"), [
    ("no-such-file.py:ResizeShards", "resize", "does not exist"),
    ("examples/etl_resize.py", "resize", "must be FILE:CLASS"),
    ("examples/etl_resize.py:ResizeShards", "Bad_Name", "is not valid"),
])
def test_etl_init_mistakes_name_the_fix(capsys: pytest.CaptureFixture[str], source: str,
                                        name: str, fix: str) -> None:
    code, _, err = run(capsys, "etl", "init", source, "--name", name,
                       "--endpoint", "http://127.0.0.1:9")
    assert code == 1 and fix in one_error_line(err)
