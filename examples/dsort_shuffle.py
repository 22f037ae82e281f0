"""Example 2: shuffle WebDataset shards on the server with a dSort job, then list the result.

The shards of example 1 hold samples in the order of the source dataset (all "china" crops, then
all "flower" crops). dSort, AIStore's distributed shard shuffle, reads every input shard, shuffles
the *records* (all files of a sample move together: ``x.cls``, ``x.image.jpg``, ``x.mask.png``)
and writes new shards of about ``output_shard_size`` bytes of content each. The job spec is the
one of the AIStore + WebDataset article; the Python SDK starts it from a spec file and waits.

About ``"dsorter_type"``: without it, the v1.5.0 proxy first asks every target for its memory
(GET ``/v1/daemon?what=node_status`` on the intra-control network) without the intra-cluster
headers; the target refuses ("not an intra-control request", HTTP 400) and the job fails with
``stats.NodeStatus.Status: ReadString: expects " or n, but found 4``. Naming the dsorter
(``dsort_general`` streams records through disk; ``dsort_mem`` keeps them in memory) skips that
probe.

Run: ``python examples/dsort_shuffle.py`` (uses ``AIS_ENDPOINT``, else starts a local AIStore).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

from aistore.sdk import Client
from convert_dataset import build_dataset, convert

import aisio


def shuffle_spec(bucket: str, input_template: str, output_prefix: str, shard_size: str,
                 seed: str) -> dict[str, object]:
    """Returns the dSort job spec that shuffles the shards ``input_template`` names."""
    return {
        "description": "shuffle samples across shards",
        "input_bck": {"name": bucket, "provider": "ais"},
        "input_format": {"template": input_template},  # e.g. crops-{0000..0005}.tar
        "input_extension": ".tar",
        "output_format": f"{output_prefix}{{0000..9999}}.tar",
        "output_shard_size": shard_size,  # content bytes per output shard
        "algorithm": {"kind": "shuffle", "seed": seed},
        "dsorter_type": "dsort_general",  # see the module docstring
    }


def run_dsort(endpoint: str, spec: dict[str, object], timeout: int = 120) -> str:
    """Starts the dSort job from a spec file, waits for it and returns its id."""
    dsort = Client(endpoint).dsort()
    with tempfile.TemporaryDirectory() as tmp:
        spec_file = Path(tmp) / "dsort_shuffle_samples.json"
        spec_file.write_text(json.dumps(spec, indent=2))
        job_id = dsort.start(spec_file)
    result = dsort.wait(timeout=timeout, verbose=False)
    if not result.success:
        raise RuntimeError(f"dSort job {job_id} failed: {result.error}")
    return job_id


def sample_keys(shards: list[str], endpoint: str) -> list[tuple[str, tuple[str, ...]]]:
    """Returns ``(key, fields)`` of every sample in ``shards``, in order."""
    pipe = aisio.AISFileLoader(shards, endpoint=endpoint).ais_parse_webdataset()
    return [(s["__key__"], tuple(sorted(k for k in s if not k.startswith("__")))) for s in pipe]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bucket", default="ais://aisio-dsort", help="bucket to work in")
    parser.add_argument("--stride", type=int, default=32, help="pixels between crops")
    parser.add_argument("--per-shard", type=int, default=100, help="samples per input shard")
    parser.add_argument("--shard-size", default="128KiB", help="output shard content size")
    parser.add_argument("--seed", default="1234", help="shuffle seed (same seed, same order)")
    args = parser.parse_args(argv)
    with aisio.playground.cluster_endpoint() as endpoint, tempfile.TemporaryDirectory() as tmp:
        # Start from an empty bucket, so that no shuffled shard of an earlier run is listed.
        Client(endpoint).bucket(args.bucket.removeprefix("ais://").strip("/")).delete(
            missing_ok=True)
        build_dataset(Path(tmp), stride=args.stride)
        converted = convert(Path(tmp), endpoint, args.bucket, per_shard=args.per_shard)
        bucket = converted.shards[0].split("/")[2]
        input_template = converted.template.split("/", 3)[3]
        print(f"input: {converted.samples} samples in {len(converted.shards)} shards "
              f"({converted.template})")

        spec = shuffle_spec(bucket, input_template, "shuffled-", args.shard_size, args.seed)
        job_id = run_dsort(endpoint, spec)
        print(f"dSort job {job_id} finished")

        listing = aisio.tools.ls(f"ais://{bucket}/shuffled-", endpoint=endpoint)
        print(repr(listing))

        before = sample_keys(converted.shards, endpoint)
        after = sample_keys([e.name for e in listing.entries], endpoint)
        first = Counter(key.split("_")[0] for key, _ in after[:50])
        print(f"classes among the first 50 shuffled samples: {dict(first)}")
        if sorted(before) != sorted(after):
            print(f"error: the shuffle changed the samples ({len(before)} in, {len(after)} out)",
                  file=sys.stderr)
            return 1
        print(f"all {len(after)} samples kept, each with its fields "
              f"{', '.join(after[0][1])}; order changed: {before != after}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
