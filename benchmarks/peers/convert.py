"""Converts a workload's tar shards into a peer's own format with the peer's own writer.

Runs in the peer's environment: ``python -m benchmarks.peers.convert JOB.json``, the job naming
the system (``litdata``: ``litdata.optimize``; ``streaming``: MosaicML's ``MDSWriter``), the
cluster, the bucket, the tar shards (read back from AIStore over its HTTP API) and a local
output directory, which the suite then uploads under the peer's prefix. Each sample keeps its
key (``key``), its payload (``data``: the ``.jpg`` member's bytes, not decoded) and its class
(``cls``).
"""

from __future__ import annotations

import json
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.peers.side import tar_samples

CHUNK_BYTES = 1 << 26
"""Both writers' chunk (shard) size: 64 MiB (litdata's ``chunk_bytes``, MDS's ``size_limit``)."""


def _download(endpoint: str, bucket: str, names: list[str], into: Path) -> list[str]:
    paths = []
    for i, name in enumerate(names):
        path = into / f"{i:06d}.tar"
        with urllib.request.urlopen(f"{endpoint}/v1/objects/{bucket}/{name}?provider=ais",
                                    timeout=300) as resp, open(path, "wb") as fh:
            while chunk := resp.read(1 << 20):
                fh.write(chunk)
        paths.append(str(path))
    return paths


def samples_of(path: str) -> Iterator[dict[str, Any]]:
    """Yields ``{"key", "data", "cls"}`` of one local tar shard (litdata's ``fn``)."""
    with open(path, "rb") as fh:
        for key, data, cls in tar_samples(fh, decode=False):
            yield {"key": key, "data": data, "cls": cls}


def convert(job: dict[str, Any]) -> int:
    """Writes the shards of ``job`` in its system's format to ``job["out"]``; returns samples."""
    out = Path(job["out"])
    with tempfile.TemporaryDirectory(prefix="aisio-peer-src-") as tmp:
        paths = _download(job["endpoint"], job["bucket"], job["tars"], Path(tmp))
        if job["system"] == "litdata":
            from litdata import optimize  # type: ignore[import-not-found]

            optimize(fn=samples_of, inputs=paths, output_dir=str(out),
                     chunk_bytes=CHUNK_BYTES, num_workers=1, mode="overwrite")
            index = json.loads((out / "index.json").read_text())
            return sum(chunk["chunk_size"] for chunk in index["chunks"])
        from streaming import MDSWriter  # type: ignore[import-not-found]

        count = 0
        with MDSWriter(out=str(out), columns={"key": "str", "data": "bytes", "cls": "int"},
                       size_limit=CHUNK_BYTES) as writer:
            for path in paths:
                for sample in samples_of(path):
                    writer.write(sample)
                    count += 1
        return count


if __name__ == "__main__":
    spec = json.loads(Path(sys.argv[1]).read_text())
    print(json.dumps({"samples": convert(spec)}))
