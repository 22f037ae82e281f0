"""The benchmark's outputs: ratios and target verdicts, a Markdown table, JSON and a PNG plot."""

from __future__ import annotations

import json
import math
import statistics
import warnings
from pathlib import Path
from typing import Any

LIMIT_ARM = "requests"
"""The arm every workload's rates are normalised to (the raw ``requests`` read)."""
WDS_ARM = "webdataset"


def summarise(result: dict[str, Any], nbytes: int, samples: int) -> None:
    """Adds medians, rates and memory in MB to one arm's result (in place)."""
    times = result.get("times") or []
    if result.get("ok") and times:
        median = statistics.median(times)
        result.update(median_s=median, mb_per_s=nbytes / median / 1e6,
                      samples_per_s=samples / median)
    else:
        result.update(median_s=None, mb_per_s=0.0, samples_per_s=0.0)
    result["peak_rss_mb"] = result.get("peak_rss", 0) / 1e6
    base = result.get("base_rss")
    result["base_rss_mb"] = base / 1e6 if base else None


def add_ratios(arms: list[dict[str, Any]]) -> None:
    """Sets ``x_limit`` and ``x_wds`` on each arm of one workload (ratios of samples/s)."""
    rates = {arm["arm"]: arm["samples_per_s"] for arm in arms}
    for arm in arms:
        rate = arm["samples_per_s"]
        for key, ref in (("x_limit", LIMIT_ARM), ("x_wds", WDS_ARM)):
            base = rates.get(ref)
            arm[key] = rate / base if base and rate else None


def _rate(workloads: dict[str, Any], workload: str, arm: str) -> float | None:
    for each in workloads.get(workload, {}).get("arms", []):
        if each["arm"] == arm and each["samples_per_s"]:
            return float(each["samples_per_s"])
    return None


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num and den else None


def _target(name: str, num: float | None, den: float | None, goal: float, what: str,
            *, at_most: bool = False, ceiling: float | None = None) -> dict[str, Any]:
    ratio = _ratio(num, den)
    met = None if ratio is None else (ratio <= goal if at_most else ratio >= goal)
    if ceiling is not None:
        what += f" (a reader as fast as the raw requests read would score {ceiling:.1f}×)"
    return {"target": name, "goal": f"{'<=' if at_most else '>='} {goal:g}×", "what": what,
            "ratio": ratio, "met": met, "ceiling": ceiling}


def targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Returns the issue's targets with the measured ratios and met / missed / not run."""
    w = report["workloads"]
    out = [
        _target("large shards: aisio vs raw requests", _rate(w, "large", "aisio"),
                _rate(w, "large", LIMIT_ARM), 0.6, "aisio one process / requests 1 MiB reads"),
        _target("large shards: aisio vs webdataset", _rate(w, "large", "aisio"),
                _rate(w, "large", WDS_ARM), 10, "aisio one process / webdataset",
                ceiling=_ratio(_rate(w, "large", LIMIT_ARM), _rate(w, "large", WDS_ARM))),
        _target("small samples: aisio vs tarfile", _rate(w, "small", "aisio"),
                _rate(w, "small", "sdk-tarfile"), 8, "samples/s, aisio / SDK reader + tarfile"),
        _target("many small objects: aisio loader (batch_get) vs sequential GETs",
                _rate(w, "objects", "aisio-moss"), _rate(w, "objects", LIMIT_ARM), 4,
                "objects/s, AISFileLoader(batch_get=N) / requests sequential GETs"),
        _target("many small objects: aisio loader (threads) vs sequential GETs",
                _rate(w, "objects", "aisio-concurrent"), _rate(w, "objects", LIMIT_ARM), 4,
                "objects/s, AISFileLoader(concurrency=N) / requests sequential GETs"),
        _target("decode: DataLoader2 2 workers vs single process",
                _rate(w, "decode", "plain-dataloader2"), _rate(w, "decode", "aisio-dl2-w0"), 1.6,
                "samples/s, 2 workers / 0 workers"),
        _target("decode: 2 decode threads vs single process",
                _rate(w, "decode", "aisio-dl2-w0-t2"), _rate(w, "decode", "aisio-dl2-w0"), 1.6,
                "samples/s, decode_threads=2 / 0 workers (same process)"),
    ]
    out += loader_targets(w)
    mem = report.get("memory") or {}
    small, big = mem.get("small_peak_mb"), mem.get("big_peak_mb")
    out.append(_target("peak memory independent of shard size", big, small, 1.1,
                       f"peak RSS over the {mem.get('big_mb', '?')} MB shard / over the "
                       f"{mem.get('small_mb', '?')} MB shard", at_most=True))
    return out


LOADERS = ("dataloader2", "dataloader", "stateful", "nodes")
SMALL_IN_PROCESS_GOAL = 250_000
"""Samples/s of 2 KiB samples in one process (issue #17)."""


def _arms(workloads: dict[str, Any], workload: str) -> dict[str, dict[str, Any]]:
    return {a["arm"]: a for a in workloads.get(workload, {}).get("arms", [])}


def epoch_rates(workloads: dict[str, Any], kind: str, loader: str
                ) -> tuple[float | None, float | None, float | None]:
    """Returns a loader arm's (first epoch, median of the later epochs, long epoch) samples/s."""
    arms = _arms(workloads, "epochs")
    short, long = arms.get(f"{kind}-{loader}", {}), arms.get(f"{kind}-{loader}-long", {})
    rates = short.get("epoch_rates") or []
    later = statistics.median(rates[1:]) if len(rates) > 1 else None
    return (rates[0] if rates else None), later, long.get("samples_per_s") or None


def loader_targets(w: dict[str, Any]) -> list[dict[str, Any]]:
    """The loader targets: resumable vs plain per loader and workload, 1 worker vs in-process,
    small samples in one process, and what a later epoch's start costs."""
    out = []
    present = [name for name in LOADERS if any(
        f"loader-{name}" in _arms(w, workload) for workload in ("large", "small", "decode"))]
    for name in present:
        for workload in ("large", "small", "decode"):
            out.append(_target(f"{workload}: {name} resumable vs plain",
                               _rate(w, workload, f"loader-{name}"),
                               _rate(w, workload, f"plain-{name}"), 0.95,
                               "samples/s, one-call loader / the same pipe on the loader "
                               "built by hand"))
        for workload in ("large", "small"):
            if f"ordered-{name}" in _arms(w, workload):
                out.append(_target(f"{workload}: {name} deterministic order vs default",
                                   _rate(w, workload, f"ordered-{name}"),
                                   _rate(w, workload, f"loader-{name}"), 0.9,
                                   "samples/s, order=\"deterministic\" / the default order"))
    for name in ("dataloader2", "dataloader"):
        if f"loader-{name}-w1" in _arms(w, "large"):
            out.append(_target(f"large: {name} 1 worker vs in-process",
                               _rate(w, "large", f"loader-{name}-w1"), _rate(w, "large", "aisio"),
                               0.8, "MB/s, resumable loader with 1 worker / lister -> loader -> "
                               "parser in one process"))
    out.append(_target("small samples in one process", _rate(w, "small", "aisio"),
                       SMALL_IN_PROCESS_GOAL, 1.0,
                       f"samples/s / {SMALL_IN_PROCESS_GOAL:,} samples/s"))
    for name in present:
        _, later, long = epoch_rates(w, "loader", name)
        out.append(_target(f"epochs: {name} resumable, epochs 2-5 vs a long epoch", later, long,
                           0.9, "samples/s, median of epochs 2-5 / one epoch as long as 5"))
    return out


def _fmt(value: float | None, spec: str = ",.0f", suffix: str = "") -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else (
        f"{value:{spec}}{suffix}")


def _precise(ratio: float | None) -> str:
    """Returns a ratio with enough digits to show which side of a goal it falls (0.599×)."""
    if ratio is None:
        return "—"
    return f"{ratio:.3f}×" if ratio < 1 else f"{ratio:.2f}×" if ratio < 10 else f"{ratio:.1f}×"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def markdown(report: dict[str, Any]) -> str:
    """Returns the report as Markdown: machine, command, one table per section, targets, notes."""
    m = report["machine"]
    lines = [
        f"**Machine:** {m['cpu']} ({m['cores']} cores), {m['ram_gb']:.0f} GiB RAM, {m['os']}; "
        f"Python {m['python']}, torch {m['torch']}, torchdata {m['torchdata']}, aistore SDK "
        f"{m['aistore_sdk']}, webdataset {m['webdataset']}; AIStore {m['aistore']} "
        f"({m['cluster']}), sharing the cores.",
        "",
        f"**Command:** `{report['command']}` — each rate is the median of "
        f"{report['config']['repeat']} rounds; in a round every arm runs in turn, in a fresh "
        f"process, {report['config']['warmup']} warm-up pass then one timed pass.",
    ]
    unit = {"objects": "objects/s"}
    for name, workload in report["workloads"].items():
        lines += ["", f"**{name}** — {workload['describe']}", "",
                  _row(["arm", "MB/s", unit.get(name, "samples/s"), "peak mem MB", "Δ mem MB",
                        "× limit", "× webdataset", "note"]),
                  _row(["---", "---:", "---:", "---:", "---:", "---:", "---:", "---"])]
        for arm in workload["arms"]:
            base = arm.get("base_rss_mb")
            delta = arm["peak_rss_mb"] - base if base else None
            note = arm["note"] if arm.get("ok") else f"FAILED: {arm.get('error', '')[:80]}"
            lines.append(_row([arm["label"], _fmt(arm["mb_per_s"]), _fmt(arm["samples_per_s"]),
                               _fmt(arm["peak_rss_mb"]), _fmt(delta),
                               _fmt(arm.get("x_limit"), ".2f", "×"),
                               _fmt(arm.get("x_wds"), ".1f", "×"), note]))
    if report["workloads"].get("epochs", {}).get("arms"):
        lines += _epoch_lines(report["workloads"])
    mem = report.get("memory")
    if mem:
        small, big = f"{mem['small_mb']:,} MB", f"{mem['big_mb']:,} MB"
        lines += ["", "**Peak memory vs shard size** (one shard of 100 KiB members, one pass, "
                  "fresh process)", "",
                  _row(["arm", f"peak mem MB, {small}", f"peak mem MB, {big}", f"Δ mem, {small}",
                        f"Δ mem, {big}", "big / small peak", f"MB/s, {big}"]),
                  _row(["---", "---:", "---:", "---:", "---:", "---:", "---:"])]
        for row in mem["arms"]:
            lines.append(_row([row["label"], _fmt(row["small_peak_mb"]), _fmt(row["big_peak_mb"]),
                               _fmt(row["small_delta_mb"]), _fmt(row["big_delta_mb"]),
                               _fmt(_ratio(row["big_peak_mb"], row["small_peak_mb"]), ".2f", "×"),
                               _fmt(row["big_mb_per_s"])]))
    keep = report.get("keepup")
    if keep and keep.get("ok"):
        lines += _keepup_lines(keep)
    lines += ["", "**Targets**", "", _row(["target", "goal", "measured", "verdict", "ratio of"]),
              _row(["---", "---", "---:", "---", "---"])]
    for t in report["targets"]:
        verdict = "not run" if t["met"] is None else ("met" if t["met"] else "MISSED")
        lines.append(_row([t["target"], t["goal"], _precise(t["ratio"]), verdict,
                           t["what"]]))
    lines += ["", "Notes: " + " ".join(report["notes"])]
    return "\n".join(lines) + "\n"


def _epoch_lines(w: dict[str, Any]) -> list[str]:
    lines = ["", "**What an epoch's start costs** (samples/s per epoch of the epochs workload; "
             "the long epoch reads the same shards listed 5 times)", "",
             _row(["loader", "epoch 1", "epochs 2-5 (median)", "one long epoch",
                   "epochs 2-5 / long"]), _row(["---", "---:", "---:", "---:", "---:"])]
    for name in LOADERS:
        for kind, what in (("plain", "plain"), ("loader", "resumable")):
            first, later, long = epoch_rates(w, kind, name)
            if first is None and long is None:
                continue
            lines.append(_row([f"{name} ({what})", _fmt(first), _fmt(later), _fmt(long),
                               _precise(_ratio(later, long))]))
    return lines


def _keepup_lines(keep: dict[str, Any]) -> list[str]:
    window = keep["window"]
    train = keep["train"]
    lines = ["", f"**Does the loader keep up?** seconds per {window} iterations, batches of "
             f"{keep['shape'][0]} x {keep['shape'][1:]} decoded JPEGs; training: 2-conv CNN, "
             f"SGD, one cached batch, {keep['torch_threads']} torch threads", "",
             _row(["", f"mean s / {window}", "variance", "bottleneck"]),
             _row(["---", "---:", "---:", "---"])]
    for workers, stats in keep["loaders"].items():
        slow = "data loading" if stats["mean"] > train["mean"] else "compute (loader keeps up)"
        lines.append(_row([f"loader, {workers} workers", f"{stats['mean']:.3f}",
                           f"{stats['variance']:.2e}", slow]))
    lines.append(_row([f"training steps ({keep['shape'][0]} images)", f"{train['mean']:.3f}",
                       f"{train['variance']:.2e}", ""]))
    return lines


def write_json(report: dict[str, Any], path: Path) -> None:
    """Writes the whole report (machine, command, config, every arm's timings) as JSON."""
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")


def plot(report: dict[str, Any], path: Path) -> None:
    """Draws one horizontal bar chart per workload: each arm's rate / the limit (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # Workloads measured against the raw read (the epochs workload has no such arm: its table
    # says what an epoch's start costs).
    workloads = [(n, w) for n, w in report["workloads"].items()
                 if any(a.get("x_limit") for a in w["arms"])]
    if not workloads:
        return
    heights = [max(1.6, 0.42 * len(w["arms"]) + 0.9) for _, w in workloads]
    fig, axes = plt.subplots(len(workloads), 1, figsize=(10, sum(heights)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, (name, workload) in zip(axes[:, 0], workloads, strict=True):
        arms = workload["arms"][::-1]
        values = [a.get("x_limit") or 0.0 for a in arms]
        colors = ["#76b900" if a["arm"].startswith("aisio") else
                  "#888888" if a["arm"] in ("curl", LIMIT_ARM) else "#4a90d9" for a in arms]
        ax.barh([a["label"] for a in arms], [v or 1e-3 for v in values], color=colors)
        ax.set_xscale("log")
        ax.axvline(1.0, color="black", lw=0.8, ls="--")
        unit = "objects/s" if name == "objects" else "samples/s"
        for y, (arm, value) in enumerate(zip(arms, values, strict=True)):
            text = (f" {value:.2f}× ({arm['samples_per_s']:,.0f} {unit}, {arm['mb_per_s']:,.0f} "
                    f"MB/s)" if value else " failed")
            ax.text(value or 1e-3, y, text, va="center", fontsize=8)
        low = min([v for v in values if v] or [1.0])
        high = max([v for v in values if v] or [1.0])
        ax.set_xlim(low / 1.6, high * 8)
        ax.set_title(f"{name}: {workload['describe']}", fontsize=9, loc="left")
        ax.tick_params(axis="y", labelsize=8)
    from matplotlib.patches import Patch

    axes[0, 0].legend(handles=[Patch(color="#888888", label="raw HTTP read (the limit)"),
                               Patch(color="#4a90d9", label="aistore SDK / webdataset"),
                               Patch(color="#76b900", label="aisio")],
                      loc="lower right", fontsize=7, frameon=False)
    axes[-1, 0].set_xlabel("rate relative to the raw requests read of the same objects (log)")
    fig.suptitle(f"aisio benchmark — {report['machine']['cpu']}, "
                 f"{report['machine']['cores']} cores", fontsize=10)
    with warnings.catch_warnings():  # long arm labels: the layout does what it can
        warnings.filterwarnings("ignore", message="Tight layout not applied")
        fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


__all__ = ["LIMIT_ARM", "LOADERS", "add_ratios", "epoch_rates", "loader_targets", "markdown",
           "plot", "summarise", "targets", "write_json"]
