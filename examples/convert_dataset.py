"""Example 1: convert an images + class list + masks dataset into WebDataset shards in AIStore.

Like the Oxford-IIIT Pets dataset of the AIStore + WebDataset articles, the source dataset is not
in WebDataset form: images, classes and masks live in separate places::

    dataset/
    ├── classes.txt        # "<name> <class id>" per line (like annotations/list.txt)
    ├── images/<name>.jpg
    └── masks/<name>.png   # a segmentation mask per image (like annotations/trimaps)

It is built here from the two photos that ship inside scikit-learn (``load_sample_images``): each
photo is cut into crops (class 0: china, class 1: flower) and each crop gets a mask thresholded at
its mean brightness. ``webdataset.ShardWriter`` then packs the records into shards, and its
``post`` callback uploads each shard as soon as it is written (and deletes the local copy).

Run: ``python examples/convert_dataset.py`` (uses ``AIS_ENDPOINT``, else starts a local AIStore).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import webdataset as wds
from aistore.sdk import Client
from PIL import Image
from sklearn.datasets import load_sample_images

import aisio

CLASSES = ("china", "flower")  # one class per photo of load_sample_images(), in its order


def build_dataset(root: Path, crop: int = 32, stride: int = 32) -> int:
    """Writes ``images/``, ``masks/`` and ``classes.txt`` under ``root``; returns the records."""
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "masks").mkdir(exist_ok=True)
    lines = ["# name class_id   (class ids: " + ", ".join(
        f"{i}={c}" for i, c in enumerate(CLASSES)) + ")"]
    for class_id, photo in enumerate(load_sample_images().images):
        height, width = photo.shape[:2]
        for y in range(0, height - crop + 1, stride):
            for x in range(0, width - crop + 1, stride):
                name = f"{CLASSES[class_id]}_{y:03d}_{x:03d}"
                pixels = photo[y : y + crop, x : x + crop]
                Image.fromarray(pixels).save(root / "images" / f"{name}.jpg", quality=90)
                gray = pixels.mean(axis=2)
                mask = np.where(gray > gray.mean(), 255, 0).astype(np.uint8)
                Image.fromarray(mask, mode="L").save(root / "masks" / f"{name}.png")
                lines.append(f"{name} {class_id}")
    (root / "classes.txt").write_text("\n".join(lines) + "\n")
    return len(lines) - 1


def samples(root: Path) -> Iterator[dict[str, object]]:
    """Yields one WebDataset sample per complete record; records missing a file are skipped."""
    for line in (root / "classes.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, class_id = line.split()
        image, mask = root / "images" / f"{name}.jpg", root / "masks" / f"{name}.png"
        if not (image.is_file() and mask.is_file()):
            print(f"skipping incomplete record {name}", file=sys.stderr)
            continue
        yield {"__key__": name, "image.jpg": image.read_bytes(), "cls": int(class_id),
               "mask.png": mask.read_bytes()}


@dataclass
class Converted:
    """What :func:`convert` wrote: the shards' template, their names and the sample count."""

    template: str
    shards: list[str]
    samples: int


def convert(root: Path, endpoint: str, bucket: str, *, per_shard: int = 100,
            prefix: str = "crops") -> Converted:
    """Packs the dataset at ``root`` into shards, uploading each one as soon as it is written."""
    ais_bucket = Client(endpoint).bucket(bucket.removeprefix("ais://").strip("/"))
    ais_bucket.create(exist_ok=True)
    uploaded: list[str] = []

    def upload(path: str) -> None:
        name = Path(path).name
        ais_bucket.object(name).get_writer().put_file(path)
        uploaded.append(f"ais://{ais_bucket.name}/{name}")
        os.unlink(path)  # only one shard on local disk at a time

    count = 0
    with tempfile.TemporaryDirectory() as workdir, wds.ShardWriter(
        f"{workdir}/{prefix}-%04d.tar", maxcount=per_shard, post=upload, verbose=0
    ) as writer:
        for sample in samples(root):
            writer.write(sample)
            count += 1
    template = f"ais://{ais_bucket.name}/{prefix}-{{0000..{len(uploaded) - 1:04d}}}.tar"
    return Converted(template, uploaded, count)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bucket", default="ais://aisio-crops", help="bucket to upload to")
    parser.add_argument("--crop", type=int, default=32, help="crop size in pixels")
    parser.add_argument("--stride", type=int, default=32, help="pixels between crops")
    parser.add_argument("--per-shard", type=int, default=100, help="samples per shard")
    args = parser.parse_args(argv)
    with aisio.playground.cluster_endpoint() as endpoint, tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "dataset"
        records = build_dataset(root, args.crop, args.stride)
        print(f"built {records} records in {root}: images/*.jpg, masks/*.png, classes.txt")
        try:
            result = convert(root, endpoint, args.bucket, per_shard=args.per_shard)
        except aisio.AISIOError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"uploaded {result.samples} samples as {len(result.shards)} shards: "
              f"{result.template}")
        first = next(iter(aisio.AISFileLoader(result.shards[:1], endpoint=endpoint)
                          .ais_parse_webdataset()))
        fields = {k: f"{len(v)} bytes" for k, v in first.items() if not k.startswith("__")}
        print(f"first sample {first['__key__']!r}: class {int(first['cls'])}, {fields}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
