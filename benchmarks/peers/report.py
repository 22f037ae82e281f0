"""The peers' outputs: each figure as a ratio to the best system in the same run, a Markdown
table, JSON and a PNG plot."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

LABELS = {"aisio": "aisio", "litdata": "litdata", "streaming": "MosaicML streaming",
          "s3torch": "s3torchconnector", "sdk": "aistore SDK AISShardReader",
          "aisio-cache": "aisio + ShardCache",
          "aisio-getbatch": "aisio AISFileLoader(batch_get=64)",
          "aisio-threads": "aisio AISFileLoader(concurrency=16)",
          "sdk-iter": "SDK AISIterDataset", "sdk-getbatch": "SDK AISBatchIterDataset(64)",
          "s3torch-map": "s3torch S3MapDataset.from_prefix",
          "s3torch-iter": "s3torch S3IterableDataset.from_prefix",
          "s3torch-uris": "s3torch S3MapDataset.from_objects"}
SETTINGS = {
    "aisio": "`webdataset_dataloader(shards, batch_size=64, num_workers=W, "
             "shuffle_shards=False, shuffle_buffer=0)`, cls decoded, tuples (key, jpg, cls); "
             "decode: `decode=\"torchrgb8\"`; AIStore's native API",
    "litdata": "`StreamingDataset(\"s3://...\", storage_options=<endpoint, path-style>, "
               "shuffle=False)` + `StreamingDataLoader(batch_size=64, num_workers=W)`; "
               "chunks of 64 MiB from `optimize`; boto3",
    "streaming": "`StreamingDataset(remote=\"s3://...\", local=<cache>, batch_size=64, "
                 "shuffle=False)` + `StreamingDataLoader(batch_size=64, num_workers=W)`; MDS "
                 "shards of 64 MiB from `MDSWriter`; boto3 (`S3_ENDPOINT_URL`)",
    "s3torch": "`S3IterableDataset.from_objects(tar URIs, endpoint=<endpoint>/s3, "
               "enable_sharding=True, S3ClientConfig(force_path_style=True))`, each object "
               "parsed with `tarfile` (`r|`), torch DataLoader(batch_size=64, num_workers=W); "
               "AWS CRT (listing fails on AIStore's S3 listing: empty ETag)",
    "sdk": "`AISShardReader(bucket, prefix_map={bucket: tars})` (each shard read whole into "
           "memory) on torch DataLoader(batch_size=64, num_workers=W); AIStore's native API",
}
CANNOT = {"s3torch": "no loader state: a restart reads the epoch again",
          "sdk": "no loader state: a restart reads the epoch again"}


def to_best(values: dict[str, float | None], *, higher: bool = True) -> dict[str, float | None]:
    """Returns each value as a ratio to the best of them (the highest, or with ``higher=False``
    the lowest): 1.0 for the best, below 1 for the others when higher is better, above 1 when
    lower is better. ``None`` (a system that failed or cannot) stays ``None``; zero times are
    left out of the choice of the best."""
    present = {k: v for k, v in values.items() if v is not None and (higher or v > 0)}
    if not present:
        return dict.fromkeys(values)
    best = max(present.values()) if higher else min(present.values())
    return {k: (None if v is None or not best else v / best) for k, v in values.items()}


def add_ratios(report: dict[str, Any]) -> None:
    """Sets ``x_best_*`` on every row, ratios within each (network, workload, workers)
    group."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for row in report.get("throughput", []):
        groups.setdefault((_network(row), row["workload"], row["workers"]), []).append(row)
    for rows in groups.values():
        for key, higher in (("epoch1_per_s", True), ("epoch2_per_s", True),
                            ("first_s", False), ("peak_mb", False)):
            ratios = to_best({r["system"]: r.get(key) if r["ok"] else None for r in rows},
                             higher=higher)
            for r in rows:
                r[f"x_best_{key}"] = ratios[r["system"]]
    for section, key in (("fresh", "first_s"), ("resume", "first_s")):
        rows = report.get(section, [])
        ratios = to_best({r["system"]: r.get(key) if r["ok"] else None for r in rows},
                         higher=False)
        for r in rows:
            r[f"x_best_{key}"] = ratios[r["system"]]


def _network(row: dict[str, Any]) -> str:
    return str(row.get("network", "loopback"))


def _probe_words(probe: dict[str, Any]) -> str:
    if not probe:
        return "not probed"
    from benchmarks.net.shaped import describe_probe

    return describe_probe(probe)


def _err(error: Any) -> str:
    """Returns an error as one table cell: its last line, short, without pipes."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return "failed: " + (lines[-1] if lines else "?")[:160].replace("|", "/")


def _n(value: float | None, spec: str = ",.0f") -> str:
    return "—" if value is None else format(value, spec)


def _x(ratio: float | None) -> str:
    return "—" if ratio is None else f"{ratio:.2f}×"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def markdown(report: dict[str, Any]) -> str:
    """Returns the peers' tables as Markdown (each ratio against the best in this run)."""
    add_ratios(report)
    m = report.get("machine", {})
    out = [f"Command: `{report.get('command', 'python -m benchmarks.suite --peers')}`", "",
           f"Machine: {m.get('cpu', '?')} ({m.get('cores', '?')} cores), Python "
           f"{m.get('python', '?')}; AIStore {m.get('aistore', '?')} ({m.get('cluster', '?')}).",
           ""]
    versions = report.get("versions", {})
    out += ["| system | versions | settings |", "| --- | --- | --- |"]
    for system in report.get("systems", []):
        v = ", ".join(f"{k} {val}" for k, val in versions.get(system, {}).items())
        out.append(_row([LABELS[system], v, SETTINGS[system]]))
    data = report.get("data", {})
    titles = {"large": "100 KiB samples", "small": "2 KiB samples", "decode": "JPEG decode",
              "objects": "Objects one by one"}
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for row in report.get("throughput", []):
        groups.setdefault((_network(row), row["workload"], row["workers"]), []).append(row)
    probes = {n["network"]: n.get("probe", {}) for n in report.get("networks", [])}
    for net in report.get("networks", []):
        if "error" in net:
            out += ["", f"### Network: {net['network']}", "",
                    f"Could not be made: {_err(net['error'])}."]
    shown = None
    for (network, workload, workers), rows in groups.items():
        if network != shown and (probes or network != "loopback"):
            shown = network
            out += ["", f"### Network: {network}", "", f"Measured before the run: "
                    f"{_probe_words(probes.get(network, {}))} (noisy, machine shared)."]
        out += ["", f"**{titles.get(workload, workload)}, {workers} workers** — "
                f"{data.get(workload, {}).get('describe', '')}", "",
                _row(["system", "epoch 1 samples/s", "× best", "epoch 2 samples/s", "× best",
                      "first batch s", "× best", "epoch gap s", "peak MB", "× best",
                      "cache MB", "client CPU s/GB"]),
                _row(["---"] + ["---:"] * 11)]
        for r in rows:
            if not r["ok"]:
                out.append(_row([LABELS[r["system"]], _err(r["error"])]
                                + [""] * 10))
                continue
            out.append(_row([LABELS[r["system"]], _n(r["epoch1_per_s"]),
                             _x(r["x_best_epoch1_per_s"]), _n(r["epoch2_per_s"]),
                             _x(r["x_best_epoch2_per_s"]), _n(r["first_s"], ".2f"),
                             _x(r["x_best_first_s"]), _n(r["gap_s"], ".3f"),
                             _n(r["peak_mb"]), _x(r["x_best_peak_mb"]), _n(r["cache_mb"]),
                             _n(r.get("cpu_s_per_gb"), ".1f")]))
    if report.get("fresh"):
        out += ["", "**Fresh job** — 2 KiB samples, 2 workers, empty cache: new process to "
                "first batch", "",
                _row(["system", "process start to first batch s", "× best",
                      "loader built to first batch s", "peak MB"]),
                _row(["---", "---:", "---:", "---:", "---:"])]
        for r in report["fresh"]:
            if not r["ok"]:
                out.append(_row([LABELS[r["system"]], _err(r["error"]),
                                 "", "", ""]))
                continue
            out.append(_row([LABELS[r["system"]], _n(r["first_s"], ".2f"),
                             _x(r["x_best_first_s"]), _n(r["build_to_first_s"], ".2f"),
                             _n(r["peak_mb"])]))
    if report.get("resume"):
        out += ["", "**Resume mid-epoch** — 2 KiB samples, 2 workers: half an epoch, state "
                "saved, a new process resumes", "",
                _row(["system", "resumes?", "new process to first batch s", "× best",
                      "state loaded to first batch s", "GET MB (epoch MB)", "lost",
                      "repeated", "peak MB", "cache MB"]),
                _row(["---", "---", "---:", "---:", "---:", "---:", "---:", "---:", "---:",
                      "---:"])]
        for r in report["resume"]:
            if not r["ok"]:
                out.append(_row([LABELS[r["system"]], _err(r["error"])]
                                + [""] * 8))
                continue
            can = "yes" if r["resumable"] else CANNOT.get(r["system"], "no")
            out.append(_row([LABELS[r["system"]], can, _n(r["first_s"], ".2f"),
                             _x(r["x_best_first_s"]), _n(r.get("restored_to_first_s"), ".2f"),
                             f"{_n(r['get_mb'], ',.1f')} ({_n(r['epoch_mb'], ',.1f')})",
                             str(r["lost"]), str(r["repeated"]), _n(r["peak_mb"]),
                             _n(r["cache_mb"])]))
    if len([n for n in report.get("networks", []) if "error" not in n]) > 1:
        out += ["", "### Across networks", "", across_markdown(report)]
    out += ["", *[f"- {note}" for note in report.get("notes", [])], ""]
    return "\n".join(out)


def write_json(report: dict[str, Any], path: Path) -> None:
    """Writes the whole report as JSON."""
    path.write_text(json.dumps(report, indent=1, default=str))


def plot(report: dict[str, Any], path: Path) -> None:
    """Plots each system's epoch-1 and epoch-2 rate as a ratio to the best, per workload."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        warnings.warn("matplotlib is missing: no plot", stacklevel=2)
        return
    add_ratios(report)
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    rows_ = report.get("throughput", [])
    first = _network(rows_[0]) if rows_ else "loopback"
    for row in rows_:  # the plot: the first network's shard rows (the tables have them all)
        if _network(row) == first and row["workload"] != "objects":
            groups.setdefault((row["workload"], row["workers"]), []).append(row)
    if not groups:
        return
    systems = report.get("systems", [])
    fig, axes = plt.subplots(1, len(groups), figsize=(3.2 * len(groups), 3.6), sharey=True,
                             squeeze=False)
    for ax, ((workload, workers), rows) in zip(axes[0], groups.items(), strict=True):
        by = {r["system"]: r for r in rows}
        xs = range(len(systems))
        for offset, key, label in ((-0.2, "x_best_epoch1_per_s", "epoch 1"),
                                   (0.2, "x_best_epoch2_per_s", "epoch 2")):
            ax.bar([x + offset for x in xs],
                   [by.get(s, {}).get(key) or 0 for s in systems], width=0.4, label=label)
        ax.set_xticks(list(xs), [LABELS[s].split()[0] for s in systems], rotation=45,
                      ha="right", fontsize=8)
        ax.set_title(f"{workload}, {workers} workers", fontsize=9)
        ax.axhline(1.0, color="grey", linewidth=0.5)
    axes[0][0].set_ylabel("samples/s ÷ best system")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- across networks: one row per reader, a column per network --------------------------------
def _is_aisio(system: str) -> bool:
    return system == "aisio" or system.startswith("aisio-")


def across(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Returns one entry per (workload, workers): each reader's epoch-1 and epoch-2 rates per
    network, aisio's best (without the ShardCache arm, which runs on slow links only) over the
    best peer's on each network, and aisio's own rate on each network over its loopback rate."""
    nets = [n["network"] for n in report.get("networks", []) if "error" not in n] or ["loopback"]
    groups: dict[tuple[str, int], dict[str, dict[str, dict[str, Any]]]] = {}
    for row in report.get("throughput", []):
        by_net = groups.setdefault((row["workload"], row["workers"]), {})
        by_net.setdefault(_network(row), {})[row["system"]] = row
    out = []
    for (workload, workers), by_net in groups.items():
        systems = list(dict.fromkeys(s for rows in by_net.values() for s in rows))
        entry: dict[str, Any] = {"workload": workload, "workers": workers, "networks": nets,
                                 "rates": {}, "aisio_vs_peer": {}, "aisio_kept": {}}
        for key in ("epoch1_per_s", "epoch2_per_s"):
            rates = {s: [_rate(by_net, n, s, key) for n in nets] for s in systems}
            entry["rates"][key] = rates
            ours = _best_per_network(rates, lambda s: _is_aisio(s) and s != "aisio-cache")
            peer = _best_per_network(rates, lambda s: not _is_aisio(s))
            entry["aisio_vs_peer"][key] = [None if a is None or not p else a / p
                                           for a, p in zip(ours, peer, strict=True)]
            entry["aisio_kept"][key] = [None if a is None or not ours[0] else a / ours[0]
                                        for a in ours]
        out.append(entry)
    return out


def _best_per_network(rates: dict[str, list[float | None]],
                      chosen: Callable[[str], bool]) -> list[float | None]:
    """Returns, per network, the highest rate of the chosen readers (None: none read there)."""
    rows = [r for s, r in rates.items() if chosen(s)]
    if not rows:
        return [None] * len(next(iter(rates.values()), []))
    return [max((r for r in column if r is not None), default=None)
            for column in zip(*rows, strict=True)]


def _rate(by_net: dict[str, dict[str, dict[str, Any]]], network: str, system: str,
          key: str) -> float | None:
    row = by_net.get(network, {}).get(system)
    return None if row is None or not row["ok"] else row.get(key)


def across_markdown(report: dict[str, Any]) -> str:
    """Returns the across-networks table: epoch 1 (whole epoch) and epoch 2 (steady state)
    samples/s of every reader on each network, aisio's best ÷ the best peer, and aisio's rate
    ÷ its own loopback rate."""
    titles = {"large": "100 KiB samples", "small": "2 KiB samples", "decode": "JPEG decode",
              "objects": "objects one by one"}
    out = []
    for entry in across(report):
        nets = entry["networks"]
        out += ["", f"**{titles.get(entry['workload'], entry['workload'])}, "
                f"{entry['workers']} workers** — samples/s, epoch 1 / epoch 2", "",
                _row(["reader", *nets]), _row(["---"] + ["---:"] * len(nets))]
        e1, e2 = entry["rates"]["epoch1_per_s"], entry["rates"]["epoch2_per_s"]
        for system in e1:
            out.append(_row([LABELS.get(system, system)]
                            + [f"{_n(a)} / {_n(b)}" for a, b in
                               zip(e1[system], e2[system], strict=True)]))
        for key, label in (("aisio_vs_peer", "aisio ÷ best peer"),
                           ("aisio_kept", "aisio ÷ aisio on " + nets[0])):
            out.append(_row([f"*{label}*"] + [f"{_x(a)} / {_x(b)}" for a, b in zip(
                entry[key]["epoch1_per_s"], entry[key]["epoch2_per_s"], strict=True)]))
    return "\n".join(out)


def plot_networks(report: dict[str, Any], path: Path) -> None:
    """Plots each reader's epoch-1 rate over the networks, one panel per workload and
    workers (log scale: the readers differ by orders of magnitude on objects)."""
    entries = [e for e in across(report) if len(e["networks"]) > 1]
    if not entries:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        warnings.warn("matplotlib is missing: no plot", stacklevel=2)
        return
    cols = min(len(entries), 4)
    rows = -(-len(entries) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.2 * rows), squeeze=False)
    for ax, entry in zip(axes.flat, entries, strict=False):
        nets = entry["networks"]
        for system, rates in entry["rates"]["epoch1_per_s"].items():
            xs = [i for i, r in enumerate(rates) if r]
            ax.plot(xs, [rates[i] for i in xs], marker="o", label=LABELS.get(system, system),
                    linewidth=2.2 if _is_aisio(system) else 1.0,
                    linestyle="-" if _is_aisio(system) else "--")
        ax.set_xticks(range(len(nets)), [n.replace(",", "\n") for n in nets], fontsize=7)
        ax.set_yscale("log")
        ax.set_title(f"{entry['workload']}, {entry['workers']} workers", fontsize=9)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(entries):]:
        ax.set_visible(False)
    axes[0][0].set_ylabel("epoch 1 samples/s")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


__all__ = ["across", "across_markdown", "add_ratios", "markdown", "plot", "plot_networks",
           "to_best", "write_json"]
