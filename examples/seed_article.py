"""The seed article's pipeline, run as written, with one change ("AIStore with WebDataset Part 3").

The article lists AIStore URLs with ``AISSourceLister`` (ETL applied on the server), feeds them
to ``webdataset.WebDataset``, shuffles, decodes, makes tuples and batches in each of the
``WebLoader``'s workers, then unbatches, shuffles and rebatches after the loader. Its code ran
against the AIStore SDK's DataPipes, which are gone; aisio's ``AISSourceLister`` accepts their
signature (``ais_sources=``, ``etl_name=``), so the calls stay as they were.

The one change: the article maps each URL to ``{"url": u}`` and hands WebDataset that DataPipe;
webdataset 1.0 rejects it with a bare AssertionError. WebDataset takes the list of URLs itself:

    # the article:   sources = AISSourceLister(...).map(lambda u: {"url": u}).shuffle()
    #                dataset = wds.WebDataset(sources)
    # works:         sources = list(AISSourceLister(ais_sources=[bucket], etl_name=etl_name))
    #                dataset = wds.WebDataset(sources, shardshuffle=len(sources))

Run: ``python examples/seed_article.py`` (``AIS_ENDPOINT``, else a local AIStore; ``--etl NAME``
on a cluster that runs that ETL).
"""

from __future__ import annotations

import argparse
import io
import os
import sys

import numpy as np
import webdataset as wds
from aistore.sdk import Client
from PIL import Image

import aisio
from aisio import AISSourceLister


def upload_pets(client: Client, bucket_name: str, shards: int = 4, per_shard: int = 24) -> int:
    """Uploads shards shaped like the article's pets: ``image.jpg``, ``trimap.png``, ``cls``."""
    bucket = client.bucket(bucket_name)
    bucket.create(exist_ok=True)
    rng = np.random.default_rng(0)
    for s in range(shards):
        buf = io.BytesIO()
        with wds.TarWriter(buf) as sink:
            for i in range(per_shard):
                image, trimap = io.BytesIO(), io.BytesIO()
                Image.fromarray(rng.integers(0, 255, (32, 32, 3), np.uint8)).save(image, "JPEG")
                Image.fromarray(rng.integers(1, 4, (32, 32), np.uint8)).save(trimap, "PNG")
                sink.write({"__key__": f"pet{s:02d}_{i:03d}", "image.jpg": image.getvalue(),
                            "trimap.png": trimap.getvalue(), "cls": (s * per_shard + i) % 37})
        bucket.object(f"pets-{s:02d}.tar").get_writer().put_content(buf.getvalue())
    return shards * per_shard


# ---- the article's code (Part 3), with the one change marked ---------------------------------
def create_dataset(client: Client, bucket_name: str, etl_name: str | None) -> wds.WebDataset:
    bucket = client.bucket(bucket_name)
    # Get a list of urls for each object in AIS, with ETL applied, converted to the format
    # WebDataset expects  (changed: a list of URLs, not a DataPipe of {"url": u} dicts)
    sources = list(AISSourceLister(ais_sources=[bucket], etl_name=etl_name))
    # Load shuffled list of transformed shards into WebDataset pipeline  (the article shuffled
    # the URL DataPipe; webdataset 1.0 shuffles the list itself and asks for a buffer size)
    dataset = wds.WebDataset(sources, shardshuffle=len(sources))
    # Shuffle samples and apply built-in webdataset decoder for image files
    dataset = dataset.shuffle(size=1000).decode("torchrgb")
    # Return iterator over samples as tuples in batches
    return dataset.to_tuple("cls", "image.jpg", "trimap.png").batched(16)


def create_dataloader(dataset: wds.WebDataset, workers: int = 4) -> wds.WebLoader:
    loader = wds.WebLoader(dataset, num_workers=workers, batch_size=None)
    return loader.unbatched().shuffle(1000).batched(64)


def view_data(dataloader: wds.WebLoader) -> tuple[int, int]:
    # Get the first batch
    batch = next(iter(dataloader))
    classes, images, trimaps = batch
    # Result is a set of tensors with the first dimension being the batch size
    print(classes.shape, images.shape, trimaps.shape)
    return len(classes), sum(len(b[0]) for b in dataloader)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bucket", default="aisio-pets")
    parser.add_argument("--etl", default=None, help="an ETL running on the cluster")
    parser.add_argument("--workers", type=int, default=4, help="WebLoader workers (article: 4)")
    args = parser.parse_args(argv)
    with aisio.playground.cluster_endpoint() as endpoint:
        os.environ["AIS_ENDPOINT"] = endpoint  # what the article's AISSourceLister reads
        client = Client(endpoint)
        total = upload_pets(client, args.bucket)
        first, seen = view_data(create_dataloader(create_dataset(client, args.bucket, args.etl),
                                                  args.workers))
        print(f"first batch of {first}; one pass: {seen} of {total} samples")
    return 0 if seen == total else 1


if __name__ == "__main__":
    sys.exit(main())
