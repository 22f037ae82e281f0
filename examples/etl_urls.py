"""Example 3: ETL-applied URLs, and what a cluster without an ETL runtime answers.

An AIStore ETL transforms objects on the server as they are read: a GET that names the ETL
(``?etl_name=...&etl_args=...``) returns the transformed bytes. ``AISSourceLister(..., etl=...)``
builds such URLs for any HTTP reader (``webdataset.WebDataset`` among them), and
``AISFileLoader(..., etl=...)`` reads through them.

ETL transformers are pods, so they need AIStore deployed on Kubernetes: there one starts an ETL
(``aisio etl init FILE:CLASS --name N``, ``ais etl init ...`` or the SDK's
``client.etl(name).init_class(...)``) and every URL below returns transformed shards. The local
node has no ETL runtime; unless an ETL of that name runs as a local process beside it
(``examples/etl_resize.py``, ``aisio etl init``), it answers such reads with HTTP 501 (or 404
naming the ETL when it is built with ETL support), which aisio raises as
``ETLUnavailableError`` (``ETLNotFoundError``) naming the ETL. Plain reads keep working.

Run: ``python examples/etl_urls.py`` (uses ``AIS_ENDPOINT``, else starts a local AIStore).
"""

from __future__ import annotations

import argparse
import io
import sys
from dataclasses import dataclass

import webdataset as wds
from aistore.sdk import Client

import aisio


def upload_demo_shards(endpoint: str, bucket: str, shards: int = 2, per_shard: int = 5) -> str:
    """Uploads a few small text shards; returns their template."""
    ais_bucket = Client(endpoint).bucket(bucket)
    ais_bucket.create(exist_ok=True)
    for s in range(shards):
        buf = io.BytesIO()
        with wds.TarWriter(buf) as writer:
            for i in range(per_shard):
                writer.write({"__key__": f"s{s}-{i:03d}", "txt": f"sample {i} of shard {s}",
                              "cls": i % 2})
        ais_bucket.object(f"text-{s:02d}.tar").get_writer().put_content(buf.getvalue())
    return f"ais://{bucket}/text-{{00..{shards - 1:02d}}}.tar"


@dataclass
class Outcome:
    """What the example saw: the ETL URLs, the plain sample count, and the ETL error (if any)."""

    urls: list[str]
    plain_samples: int
    error: aisio.AISIOError | None


def run(endpoint: str, bucket: str, etl: aisio.ETL) -> Outcome:
    """Builds ETL URLs for the demo shards, reads them plainly, then through the ETL."""
    template = upload_demo_shards(endpoint, bucket)
    urls = list(aisio.AISSourceLister(template, etl=etl, endpoint=endpoint))
    print(f"ETL-applied URLs for {template}:")
    for url in urls:
        print(f"  {url}")
    # The same URLs feed webdataset the way the articles do: .map(lambda u: {"url": u})

    plain = list(aisio.AISFileLoader(template, endpoint=endpoint).ais_parse_webdataset())
    print(f"without the ETL: {len(plain)} samples, e.g. {plain[0]['txt'].decode()!r}")

    try:
        transformed = list(aisio.AISFileLoader(urls, endpoint=endpoint).ais_parse_webdataset())
    except (aisio.ETLUnavailableError, aisio.ETLNotFoundError) as exc:
        print(f"with the ETL: {type(exc).__name__}: {exc}")
        print("  On AIStore deployed on Kubernetes, start the ETL first (`aisio etl init "
              "FILE:CLASS --name N`, or the SDK's client.etl(name).init_class(...)); on a cluster "
              "on this machine the same command runs it as a local process "
              "(examples/etl_resize.py); then these URLs stream transformed shards.")
        return Outcome(urls, len(plain), exc)
    print(f"with the ETL: {len(transformed)} transformed samples")
    return Outcome(urls, len(plain), None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bucket", default="aisio-etl", help="bucket for the demo shards")
    parser.add_argument("--etl", default="resize-images", help="ETL name")
    args = parser.parse_args(argv)
    with aisio.playground.cluster_endpoint() as endpoint:
        run(endpoint, args.bucket, aisio.ETL(args.etl, {"width": 64, "height": 64}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
