"""The pure parts of ``python -m benchmarks.suite --peers``: ratios to the best system, the
exactly-once count across a resume, the key that names a peer's environment, the table."""

from __future__ import annotations

import io
import tarfile

from benchmarks.peers.envs import env_key
from benchmarks.peers.report import across, add_ratios, markdown, to_best
from benchmarks.peers.run import exactly_once, sizes
from benchmarks.peers.side import tar_samples


def test_to_best_divides_by_the_highest_rate_and_the_lowest_time() -> None:
    assert to_best({"a": 50.0, "b": 200.0, "c": None}) == {"a": 0.25, "b": 1.0, "c": None}
    assert to_best({"a": 0.5, "b": 2.0}, higher=False) == {"a": 1.0, "b": 4.0}
    assert to_best({"a": None}) == {"a": None}


def test_to_best_leaves_zero_times_out_of_the_choice_of_the_best() -> None:
    assert to_best({"a": 0.0, "b": 2.0, "c": 3.0}, higher=False) == {"a": 0.0, "b": 1.0,
                                                                     "c": 1.5}


def test_ratios_are_taken_within_each_workload_and_worker_count() -> None:
    rows = [{"workload": w, "workers": n, "system": s, "ok": True, "epoch1_per_s": rate,
             "epoch2_per_s": rate, "first_s": 1.0, "peak_mb": 100.0}
            for w, n, s, rate in [("small", 0, "aisio", 100.0), ("small", 0, "litdata", 400.0),
                                  ("small", 2, "aisio", 50.0), ("small", 2, "litdata", 25.0)]]
    rows.append({"workload": "small", "workers": 2, "system": "sdk", "ok": False,
                 "error": "boom"})
    add_ratios({"throughput": rows})
    assert [r.get("x_best_epoch1_per_s") for r in rows] == [0.25, 1.0, 1.0, 0.5, None]


def test_exactly_once_counts_lost_and_repeated_keys() -> None:
    assert exactly_once(["a", "b"], ["c", "d"], 4) == {"lost": 0, "repeated": 0}
    assert exactly_once(["a", "b"], ["b", "c"], 4) == {"lost": 1, "repeated": 1}
    # a restart without a loader state reads the whole epoch again
    assert exactly_once(["a", "b"], ["a", "b", "c", "d"], 4) == {"lost": 0, "repeated": 2}


def test_env_key_moves_with_the_lock_and_the_python() -> None:
    key = env_key(b"torch==2.15.0\n", "3.11.7")
    assert key == env_key(b"torch==2.15.0\n", "3.11.7") and len(key) == 16
    assert key != env_key(b"torch==2.15.1\n", "3.11.7")
    assert key != env_key(b"torch==2.15.0\n", "3.12.1")


def test_quick_sizes_and_overrides() -> None:
    assert sizes(True)["repeat"] == 1 and sizes(False)["repeat"] == 3
    assert sizes(True, {"repeat": 5, "jpegs": None})["repeat"] == 5


def test_tar_samples_groups_members_by_key() -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in [("d/k1.jpg", b"x"), ("d/k1.cls", b"3"), ("d/k2.jpg", b"yy"),
                           ("d/k2.cls", b"4")]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    assert list(tar_samples(buf, decode=False)) == [("k1", b"x", 3), ("k2", b"yy", 4)]


def test_markdown_says_where_a_system_cannot_resume() -> None:
    report = {"systems": ["aisio", "sdk"], "resume": [
        {"system": "aisio", "ok": True, "resumable": True, "first_s": 2.0, "get_mb": 1.0,
         "epoch_mb": 2.0, "lost": 0, "repeated": 0, "peak_mb": 300.0, "cache_mb": 0.0},
        {"system": "sdk", "ok": True, "resumable": False, "first_s": 4.0, "get_mb": 2.0,
         "epoch_mb": 2.0, "lost": 0, "repeated": 10, "peak_mb": 300.0, "cache_mb": 0.0}]}
    table = markdown(report)
    assert "| aisio | yes | 2.00 | 1.00× | — |" in table
    assert "no loader state: a restart reads the epoch again | 4.00 | 2.00× |" in table


def test_markdown_puts_each_network_and_its_probe_above_its_tables() -> None:
    def row(system: str, network: str, rate: float) -> dict[str, object]:
        return {"workload": "objects", "workers": 0, "system": system, "ok": True,
                "network": network, "epoch1_per_s": rate, "epoch2_per_s": rate,
                "first_s": 0.1, "gap_s": 0.01, "peak_mb": 300.0, "cache_mb": 0.0,
                "cpu_s_per_gb": 2.5}

    report = {"systems": ["aisio", "sdk"], "networks": [
        {"network": "loopback", "probe": {"rtt_ms": 0.2, "rtt_p90_ms": 0.3, "mbit_s": 9000.0,
                                          "probe_bytes": 16 << 20}},
        {"network": "rtt=5ms,rate=1gbit", "error": "`ip` cannot run"}],
        "throughput": [row("aisio-getbatch", "loopback", 100.0),
                       row("sdk-iter", "loopback", 50.0)]}
    table = markdown(report)
    assert "### Network: loopback" in table
    assert "RTT 0.20 ms median (p90 0.30)" in table and "9,000 Mbit/s" in table
    assert "### Network: rtt=5ms,rate=1gbit" in table and "Could not be made" in table
    assert "| SDK AISIterDataset | 50 | 0.50× |" in table
    assert table.index("### Network: loopback") < table.index("| SDK AISIterDataset")
    assert "| 2.5 |" in table  # client CPU s/GB


def test_across_networks_compares_aisio_with_the_best_peer_and_with_its_own_loopback() -> None:
    def row(system: str, network: str, e1: float | None, e2: float = 10.0) -> dict[str, object]:
        return {"workload": "objects", "workers": 2, "system": system, "ok": e1 is not None,
                "network": network, "epoch1_per_s": e1, "epoch2_per_s": e2, "error": "x",
                "first_s": 0.1, "gap_s": 0.01, "peak_mb": 300.0, "cache_mb": 0.0}

    nets = ["loopback", "rtt=1ms,rate=10gbit", "rtt=5ms,rate=10gbit"]
    report = {"networks": [{"network": n} for n in nets] + [
        {"network": "rtt=9ms", "error": "could not be made"}],
        "throughput": [
            row("aisio-getbatch", nets[0], 1000.0), row("aisio-threads", nets[0], 400.0),
            row("sdk-iter", nets[0], 500.0), row("s3torch-uris", nets[0], 250.0),
            row("aisio-getbatch", nets[1], 900.0), row("aisio-threads", nets[1], 950.0),
            row("sdk-iter", nets[1], 100.0), row("s3torch-uris", nets[1], None),
            row("aisio-getbatch", nets[2], 500.0), row("aisio-threads", nets[2], 100.0),
            row("aisio-cache", nets[2], 9000.0), row("sdk-iter", nets[2], 50.0),
            row("s3torch-uris", nets[2], 200.0)]}
    (entry,) = across(report)
    assert entry["networks"] == nets  # the network that could not be made is left out
    assert entry["rates"]["epoch1_per_s"]["s3torch-uris"] == [250.0, None, 200.0]
    # aisio's best arm (never the ShardCache arm) over the best peer that read on that network
    assert entry["aisio_vs_peer"]["epoch1_per_s"] == [2.0, 9.5, 2.5]
    assert entry["aisio_kept"]["epoch1_per_s"] == [1.0, 0.95, 0.5]
    table = markdown(report)
    assert "### Across networks" in table
    assert "| *aisio ÷ best peer* | 2.00× / 1.00× | 9.50× / 1.00× | 2.50× / 1.00× |" in table
    assert "| s3torch S3MapDataset.from_objects | 250 / 10 | — / — | 200 / 10 |" in table
