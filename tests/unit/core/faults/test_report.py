"""ErrorReport.temporary(): records readable while the report lives, no file left behind."""

from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys
from pathlib import Path

from aisio import AISIOError, ErrorReport


def test_the_temporary_file_goes_with_the_report() -> None:
    report = ErrorReport.temporary()
    assert report.path is not None
    path = report.path
    report.record(AISIOError("bad", url="ais://b/s.tar"))
    copy = pickle.loads(pickle.dumps(report))  # as a worker process gets it
    del copy
    gc.collect()
    assert [r["shard"] for r in report.records()] == ["ais://b/s.tar"]  # a copy never deletes
    del report
    gc.collect()
    assert not path.exists()


def test_no_temporary_file_is_left_at_exit(tmp_path: Path) -> None:
    script = ("from aisio import AISIOError, ErrorReport\n"
              "report = ErrorReport.temporary()\n"
              "report.record(AISIOError('bad', url='ais://b/s.tar'))\n"
              "assert len(report) == 1\n")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=120)
    assert list(tmp_path.glob("aisio-errors-*")) == []


def test_a_skip_record_and_warning_do_not_advise_skipping_what_was_skipped() -> None:
    from aisio.core.decode.decoders import to_tuple
    from aisio.core.faults.errors import BAD_SHARD_HINT, ShardFormatError, skipped_reason

    report = ErrorReport()
    record = report.record(ShardFormatError(f"shard s.tar is truncated; {BAD_SHARD_HINT}",
                                            url="ais://b/s.tar"))
    assert record["reason"] == "shard s.tar is truncated; re-upload the shard"
    try:
        to_tuple({"__key__": "k", "png": b""}, "cls")
    except AISIOError as exc:
        missing = exc
    assert "on_error" in str(missing)  # the error itself still says how to skip
    assert "on_error" not in skipped_reason(missing)
