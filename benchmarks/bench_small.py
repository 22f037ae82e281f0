"""Small samples in one process: how fast aisio turns 2 KiB samples into dicts, old vs new.

Writes one shard of ``--samples`` samples (a 2 KiB random ``.jpg`` and a ``.cls``, as the
suite's ``small`` workload), uploads it to a bucket of its own on ``AIS_ENDPOINT`` (else a
playground it starts), and times, each in a fresh process, these arms:

- ``raw``: the shard's stream read in 1 MiB chunks through ``AISFileLoader`` (the limit);
- ``parse``: ``AISFileLoader([shard]).ais_parse_webdataset()``;
- ``resumable``: the same over a ``ShardTask`` (the resumable loaders' path: every sample
  carries its position);
- ``loader`` / ``loader-noshuffle``: ``webdataset_dataloader`` in one process, batches of
  64 with the labels decoded and collated (``tuple_fields=("jpg", "cls")``), with its
  default sample shuffle and without (what a user of the one-call loader gets);
  ``loader-deterministic`` the same in ``order="deterministic"``, ``loader-dl2`` and
  ``loader-nodes`` on DataLoader2 and ``torchdata.nodes`` (the venv's torchdata decides
  which of the two runs: the other is shown as ``-``);
- ``local`` / ``local-resumable``: ``WebDatasetParser`` over the shard in a ``BytesIO`` (the
  parser alone, no network).

``--compare DIR ...`` adds other checkouts of aisio (e.g. ``git worktree add --detach
/tmp/rel 24a949c``), imported with ``PYTHONPATH=DIR`` into this venv. Rounds alternate the
checkouts and arms; each child does a warm-up pass and ``--passes`` timed passes and reports
their median; the table shows the median over rounds and each checkout's ratio to this one,
taken round by round. An arm a checkout does not have is shown as ``-``.

``--profile ARM`` instead runs ARM under cProfile in this process and prints the top functions
by own time as a Markdown table (``PYTHONPATH=DIR`` profiles another checkout)::

    .venv/bin/python -m benchmarks.bench_small --rounds 5 --compare /tmp/old-main /tmp/rel
    .venv/bin/python -m benchmarks.bench_small --profile parse --top 12
    PYTHONPATH=/tmp/old-main .venv/bin/python benchmarks/bench_small.py --profile parse
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
ARMS = ("raw", "parse", "resumable", "loader", "loader-noshuffle", "loader-deterministic",
        "loader-dl2", "loader-nodes", "local", "local-resumable")


# ---- the shard --------------------------------------------------------------------------------
def shard_bytes(samples: int, member_bytes: int = 2048, seed: int = 0) -> bytes:
    """Returns a ustar shard of ``samples`` samples: random ``.jpg`` bytes and a ``.cls``."""
    import random

    rng = random.Random(seed)
    pool = rng.randbytes(1 << 20)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(samples):
            for suffix, data in (("jpg", pool[(s := i % 4096 * 64) : s + member_bytes]),
                                 ("cls", str(i % 1000).encode())):
                info = tarfile.TarInfo(f"sample{i:08d}.{suffix}")
                info.size = len(data)
                info.mtime = 1_700_000_000
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


# ---- arms (run in a child process, against whichever aisio PYTHONPATH names) ---------------
def _arm(name: str, endpoint: str, uri: str, local: bytes) -> Callable[[], int]:
    """Returns a function that runs one pass of arm ``name`` and returns its sample count."""
    import aisio

    def raw() -> int:
        total = 0
        for _, stream in aisio.AISFileLoader([uri], url=endpoint):
            while chunk := stream.read(1 << 20):
                total += len(chunk)
            stream.close()
        return total

    def parse() -> int:
        return sum(1 for _ in aisio.AISFileLoader([uri], url=endpoint).ais_parse_webdataset())

    def task() -> Any:
        from aisio.core.epochs.progress import ShardTask  # resumable checkouts only
        from aisio.core.store.sources import ObjectRef
        from aisio.core.store.urls import parse_ais_url

        return ShardTask(0, ObjectRef(parse_ais_url(uri)))

    def resumable() -> int:
        count = 0
        for sample in aisio.WebDatasetParser(aisio.AISFileLoader([task()], url=endpoint)):
            count += "__pos__" in sample
        return count

    def loader(make: Any = None, **options: Any) -> int:
        # what a user calls: batches of 64, labels decoded and collated, payloads as bytes
        one_call = (make or aisio.webdataset_dataloader)(
            uri, url=endpoint, num_workers=0, batch_size=64, seed=0,
            decode=aisio.Decoder(None, only=["cls"]), tuple_fields=("jpg", "cls"), **options)
        try:
            return sum(len(labels) for _, labels in one_call)
        finally:
            one_call.shutdown()

    def local_parse() -> int:
        return sum(1 for _ in aisio.WebDatasetParser([(uri, io.BytesIO(local))]))

    def local_resumable() -> int:
        pairs = [(task(), io.BytesIO(local))]
        return sum("__pos__" in sample for sample in aisio.WebDatasetParser(pairs))

    arms = {"raw": raw, "parse": parse, "resumable": resumable, "loader": loader,
            "loader-noshuffle": lambda: loader(shuffle_buffer=0),
            "loader-deterministic": lambda: loader(order="deterministic"),
            "loader-dl2": lambda: loader(aisio.webdataset_loader),
            "loader-nodes": lambda: loader(aisio.webdataset_node_loader), "local": local_parse,
            "local-resumable": local_resumable}
    return arms[name]


def _pythonpath_only() -> None:
    """Imports aisio from PYTHONPATH only: the venv's editable finder would otherwise serve the
    modules an older checkout lacks (aisio.core...) from the venv's own checkout."""
    sys.meta_path[:] = [f for f in sys.meta_path
                        if not str(getattr(f, "__module__", "")).startswith("__editable__")]


def child(args: argparse.Namespace) -> None:
    """Runs one arm: a warm-up pass, then timed passes; prints JSON with the median rate."""
    _pythonpath_only()
    local = Path(args.local).read_bytes()
    run = _arm(args.child, args.endpoint, args.uri, local)
    import aisio

    try:
        expected = run()
    except (ImportError, aisio.LoaderUnavailableError) as exc:  # an older checkout, another
        # torchdata: no such arm
        print(json.dumps({"missing": f"{type(exc).__name__}: {exc}"}))
        return
    rates, cpu_rates = [], []
    for _ in range(args.passes):
        start, cpu = time.perf_counter(), time.process_time()
        got = run()
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
        assert got == expected, (got, expected)
        rates.append(args.samples / seconds)
        cpu_rates.append(args.samples / cpu_seconds)
    want = len(local) if args.child == "raw" else args.samples
    assert expected == want, (args.child, expected, want)
    print(json.dumps({"rate": statistics.median(rates), "cpu": statistics.median(cpu_rates)}))


# ---- the parent ---------------------------------------------------------------------------
def _endpoint() -> Iterator[str]:
    endpoint = os.environ.get("AIS_ENDPOINT")
    if endpoint:
        yield endpoint
        return
    from aisio.playground import Playground

    with tempfile.TemporaryDirectory(prefix="aisio-bench-small-") as tmp, \
            Playground(tmp, ntargets=1) as pg:
        yield str(pg.endpoint)


def _rest(method: str, url: str, body: bytes | None = None) -> None:
    """One request to AIStore's REST API with the standard library only (``--profile`` of
    another checkout imports that checkout's aisio, whose modules may be laid out otherwise).
    A PUT asks the proxy for its target with no body first (the proxy answers 307 before
    reading one), then sends the body there."""
    import urllib.error
    import urllib.request

    def send(to: str, data: bytes | None) -> str | None:
        request = urllib.request.Request(to, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(request, timeout=300).read()
        except urllib.error.HTTPError as exc:
            if exc.code not in (301, 302, 307, 308):
                raise
            return str(exc.headers["Location"])
        return None

    if method == "PUT":
        target = send(url, b"")
        if target is not None:
            send(target, body)
        return
    send(url, body)


@contextlib.contextmanager
def _uploaded(data: bytes) -> Iterator[tuple[str, str]]:
    """Yields ``(endpoint, ais:// name)`` of ``data`` put as one shard in a bucket of its own
    (AIS_ENDPOINT's cluster, else a playground), destroyed afterwards."""
    for endpoint in _endpoint():
        bucket = f"aisio-bench-small-{uuid.uuid4().hex[:8]}"
        _rest("POST", f"{endpoint}/v1/buckets/{bucket}?provider=ais",
              json.dumps({"action": "create-bck"}).encode())
        try:
            _rest("PUT", f"{endpoint}/v1/objects/{bucket}/small-000000.tar?provider=ais", data)
            yield endpoint, f"ais://{bucket}/small-000000.tar"
        finally:
            _rest("DELETE", f"{endpoint}/v1/buckets/{bucket}?provider=ais",
                  json.dumps({"action": "destroy-bck"}).encode())


def _run_child(tree: Path, arm: str, endpoint: str, uri: str, local: Path,
               args: argparse.Namespace) -> dict[str, float]:
    """Returns ``{"rate": wall samples/s, "cpu": samples per CPU second}`` of one child run
    (empty when the checkout has no such arm)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    # Run as a script, not with -m: the checkout directory must not come before PYTHONPATH.
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", arm, "--endpoint",
           endpoint, "--uri", uri, "--local", str(local), "--samples", str(args.samples),
           "--passes", str(args.passes)]
    out = subprocess.run(cmd, env=env, cwd=HERE, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"{tree} {arm} failed:\n{out.stderr[-2000:]}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return {k: v for k, v in result.items() if k in ("rate", "cpu")}


def _label(tree: Path) -> str:
    try:
        rev = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        rev = "?"
    return f"{tree.name} ({rev})"


Rates = dict[tuple[str, str, int], list[float]]  # (metric, arm, checkout) -> one value a round


def compare(args: argparse.Namespace) -> None:
    """Uploads the shard, runs every arm of every checkout round by round, prints a table."""
    trees = [HERE, *(Path(p).resolve() for p in args.compare)]
    arms = args.arms or list(ARMS)
    data = shard_bytes(args.samples, args.member_bytes)
    with _uploaded(data) as (endpoint, uri), \
            tempfile.NamedTemporaryFile(suffix=".tar") as local:
        local.write(data)
        local.flush()
        rates: Rates = {}
        ratios: Rates = {}
        for r in range(args.rounds):
            for arm in arms:
                got: dict[int, dict[str, float]] = {}
                order = list(range(len(trees)))
                for index in order if r % 2 == 0 else order[::-1]:
                    got[index] = _run_child(trees[index], arm, endpoint, uri,
                                            Path(local.name), args)
                for index, result in got.items():
                    for metric, value in result.items():
                        rates.setdefault((metric, arm, index), []).append(value)
                        here = got[0].get(metric)
                        if index and here:
                            ratios.setdefault((metric, arm, index), []).append(
                                here / value)
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    _table(trees, arms, rates, ratios, args)


def _table(trees: list[Path], arms: list[str], rates: Rates, ratios: Rates,
           args: argparse.Namespace) -> None:
    labels = [_label(tree) for tree in trees]
    print(f"\n{args.samples:,} samples x 2 members ({args.member_bytes:,} bytes + class); "
          f"medians of {args.rounds} "
          f"rounds, each the median of {args.passes} passes in a fresh process; ratios taken "
          "round by round")
    for metric, what in (("rate", "samples/s (wall clock)"),
                         ("cpu", "samples per CPU second of the reading process")):
        print(f"\n{what}:\n")
        head = ["arm", *labels, *(f"this / {label}" for label in labels[1:])]
        print("| " + " | ".join(head) + " |")
        print("| --- |" + " ---: |" * (len(head) - 1))
        for arm in arms:
            cells = [arm]
            for index in range(len(trees)):
                values = rates.get((metric, arm, index))
                cells.append(f"{statistics.median(values):,.0f}" if values else "-")
            for index in range(1, len(trees)):
                values = ratios.get((metric, arm, index))
                cells.append(f"{statistics.median(values):.2f}x" if values else "-")
            print("| " + " | ".join(cells) + " |")


def profile(args: argparse.Namespace) -> None:
    """Runs one arm under cProfile in this process (after a plain timed pass) and prints the
    top functions by own time."""
    if os.environ.get("PYTHONPATH"):
        _pythonpath_only()
    data = shard_bytes(args.samples, args.member_bytes)
    with _uploaded(data) as (endpoint, uri):
        run = _arm(args.profile, endpoint, uri, data)
        run()
        start = time.perf_counter()
        count = run()
        plain = time.perf_counter() - start
        profiler = cProfile.Profile()
        start = time.perf_counter()
        profiler.runcall(run)
        profiled = time.perf_counter() - start
        stats = pstats.Stats(profiler)
        total = stats.total_tt  # type: ignore[attr-defined]
        print(f"arm {args.profile}: {count:,} samples in {plain:.3f} s without the profiler "
              f"({args.samples / plain:,.0f} samples/s), {profiled:.3f} s under cProfile\n")
        print("| own time % | own s | calls | function |")
        print("| ---: | ---: | ---: | --- |")
        rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)  # type: ignore[attr-defined]
        import aisio

        tree = str(Path(aisio.__file__).resolve().parent.parent)
        for (file, line, func), (_, calls, own, _, _) in rows[: args.top]:
            where = file.replace(tree + "/", "").replace(str(HERE) + "/", "")
            if "site-packages/" in where:
                where = where.split("site-packages/", 1)[1]
            name = func if file == "~" else f"{where}:{line}({func})"
            print(f"| {100 * own / total:.1f} | {own:.3f} | {calls:,} | `{name}` |")


def main(argv: list[str] | None = None) -> None:
    """Parses the command line and runs the comparison, a profile, or one child arm."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=25_000, help="samples in the shard")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (medians reported)")
    parser.add_argument("--passes", type=int, default=3, help="timed passes per child")
    parser.add_argument("--member-bytes", type=int, default=2048,
                        help="bytes of each sample's payload member (102400: the 100 KiB arm)")
    parser.add_argument("--compare", nargs="*", default=[], metavar="DIR",
                        help="other aisio checkouts to alternate with this one")
    parser.add_argument("--arms", nargs="*", choices=ARMS, help="arms to run (default: all)")
    parser.add_argument("--profile", choices=ARMS, help="profile one arm in this process")
    parser.add_argument("--top", type=int, default=15, help="rows of the profile table")
    parser.add_argument("--child", choices=ARMS, help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--uri", help=argparse.SUPPRESS)
    parser.add_argument("--local", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
    elif args.profile:
        profile(args)
    else:
        compare(args)


if __name__ == "__main__":
    main()
