"""The benchmark suite at --quick sizes against the session's AIStore: not timed, no speed asserts.

It checks that one command writes the table, the JSON and the plot, that every arm of every
workload ran to the end with the right byte and sample counts (the runner checks those) and a
positive rate, and that the memory and keep-up sections and the target verdicts are there.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

# The suite runs in the torchdata 0.9 environment, where it has a DataLoader2 arm too.
pytest.importorskip("torchdata.dataloader2", reason="the benchmark suite runs with torchdata 0.9")

from benchmarks.suite.arms import ARMS
from benchmarks.suite.main import main

pytestmark = pytest.mark.slow


@pytest.mark.long  # a minute: the benchmark is not the library (make test-long runs it)
def test_quick_suite_writes_table_json_and_plot(ais_endpoint: str, tmp_path: Path) -> None:
    out = tmp_path / "bench"
    code = main(["--quick", "--endpoint", ais_endpoint, "--out", str(out)])
    report = json.loads((out / "results.json").read_text())

    failed = [(name, arm["label"], arm.get("error")) for name, workload in
              report["workloads"].items() for arm in workload["arms"] if not arm["ok"]]
    assert failed == []
    assert code == 0
    assert list(report["workloads"]) == ["large", "small", "objects", "decode", "epochs"]
    for name, workload in report["workloads"].items():
        assert [arm["arm"] for arm in workload["arms"]] == list(ARMS[workload["kind"]])
        for arm in workload["arms"]:
            # the rates are the dataset's bytes and samples (what each pass was checked to read)
            # over the median pass: one pass of the dataset, or a whole number of epochs
            assert arm["median_s"] == statistics.median(arm["times"]), (name, arm["label"])
            passes = arm["samples_per_s"] * arm["median_s"] / workload["samples"]
            expected = 1 if workload["kind"] != "epochs" else round(passes)
            assert expected >= 1 and passes == pytest.approx(expected), (name, arm["label"])
            assert arm["mb_per_s"] * 1e6 * arm["median_s"] == pytest.approx(
                workload["nbytes"] * expected), (name, arm["label"])
            assert arm["peak_rss_mb"] > 0, (name, arm["label"])
            if workload["kind"] == "epochs":  # no raw read to compare with: rates per epoch
                long = arm["arm"].endswith("-long")
                assert long or len(arm["epoch_rates"]) == 5, (name, arm["label"])
            else:
                assert arm["x_limit"] > 0, (name, arm["label"])

    memory = report["memory"]
    assert memory["small_peak_mb"] > 0 and memory["big_peak_mb"] > 0
    keepup = report["keepup"]
    assert keepup["ok"], keepup.get("error")
    assert set(keepup["loaders"]) == {"0", "2"} and keepup["train"]["mean"] > 0
    assert {t["target"] for t in report["targets"] if t["met"] is None} == set()

    machine = report["machine"]
    assert machine["cores"] >= 1 and machine["aistore"] and "--quick" in report["command"]
    table = (out / "table.md").read_text()
    assert "| aisio lister -> loader -> parser |" in table and "**Targets**" in table
    assert (out / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_help_runs_as_a_module() -> None:
    proc = subprocess.run([sys.executable, "-m", "benchmarks.suite", "--help"], capture_output=True,
                          text=True, check=True, cwd=Path(__file__).parents[3])
    assert "--quick" in proc.stdout and "--endpoint" in proc.stdout
