"""The peers' JPEG decode workload alone: aisio beside the peers on the same JPEG shards.

Run: ``.venv/bin/python -m benchmarks.bench_peers_decode [--systems aisio litdata s3torch]
[--repeat 3] [--jpegs 2048] [--per-shard 256] [--px 256] [--endpoint URL]``. The same jobs as
``python -m benchmarks.suite --peers`` runs for its ``decode`` rows (each system in its own
environment, forked from its server; 0 and 2 workers; systems alternated in each round), without
the other workloads, the fresh job and the resume: a quicker way to see one change to decoding.
It prints each system's epoch 1 and epoch 2 rates (medians) and each one's ratio to the best
other system in the same run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from benchmarks.peers import run as peers_run
from benchmarks.peers.envs import cache_dir, peer_python


class DecodeRun(peers_run.PeersRun):
    """A peers run whose only workload is ``decode``."""

    def prepare(self) -> None:
        c = self.cfg
        self.data["decode"] = self.up.jpeg_shards("peers-decode", c["jpegs"],
                                                  c["jpegs_per_shard"], c["jpeg_px"], salt=13)
        for system in self.systems:
            if system in peers_run.FORMATS:
                self.prefixes[(system, "decode")] = self._convert(system, "decode",
                                                                  self.data["decode"])


def table(rows: list[dict[str, Any]]) -> str:
    """Returns the rows as a markdown table, each rate with its ratio to the best other system
    of the same worker count."""
    lines = ["| workers | system | epoch 1 /s | × best other | epoch 2 /s | × best other |",
             "| ---: | --- | ---: | ---: | ---: | ---: |"]
    for row in rows:
        cells = [str(row["workers"]), row["system"]]
        if not row["ok"]:
            lines.append("| " + " | ".join([*cells, "failed: " + str(row.get("error"))[:80],
                                            "", "", ""]) + " |")
            continue
        for key in ("epoch1_per_s", "epoch2_per_s"):
            others = [r[key] for r in rows if r["ok"] and r["workers"] == row["workers"]
                      and r["system"] != row["system"]]
            cells += [f"{row[key]:,.0f}", f"{row[key] / max(others):.2f}×" if others else "—"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", help="AIStore endpoint (default: AIS_ENDPOINT, else a "
                        "temporary playground)")
    parser.add_argument("--systems", nargs="+", default=["aisio", "litdata", "s3torch"],
                        choices=peers_run.SYSTEMS)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jpegs", type=int, default=2048)
    parser.add_argument("--per-shard", type=int, default=256)
    parser.add_argument("--px", type=int, default=256)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)

    from aisio.core.store.client import client_for
    from aisio.core.store.config import AISConfig
    from aisio.core.store.urls import Bucket
    from benchmarks.suite.data import Uploader
    from benchmarks.suite.suite import cluster

    systems = tuple(args.systems)
    pythons = {"aisio": sys.executable}
    for system in systems:
        if system in peers_run.ENVS:
            pythons[system] = peer_python(peers_run.ENVS[system], log=peers_run._log)
    cfg = {"jpegs": args.jpegs, "jpegs_per_shard": args.per_shard, "jpeg_px": args.px,
           "repeat": args.repeat}
    with cluster(args.endpoint) as (endpoint, _):
        flags = peers_run.features(endpoint)
        peers_run.set_features(endpoint, flags | peers_run.S3_REVERSE_PROXY)
        client = client_for(AISConfig(endpoint=endpoint))
        bucket = Bucket(f"aisio-peers-{uuid.uuid4().hex[:8]}")
        client.create_bucket(bucket)
        runner = peers_run.Runner(pythons, args.timeout)
        scratch = Path(tempfile.mkdtemp(prefix="aisio-peers-", dir=cache_dir()))
        try:
            up = Uploader(client, bucket, scratch, 0, peers_run._log)
            run = DecodeRun(endpoint, bucket.name, client, up, cfg, systems, runner, scratch)
            run.prepare()
            rows = run.throughput()
        finally:
            runner.close()
            shutil.rmtree(scratch, ignore_errors=True)
            client.destroy_bucket(bucket)
            peers_run.set_features(endpoint, flags)
    print(table(rows))
    print(json.dumps([{k: v for k, v in r.items() if k != "traceback"} for r in rows]),
          file=sys.stderr)
    return 0 if all(row["ok"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
