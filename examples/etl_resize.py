"""Example: the articles' ETL, run here. Resize the images of WebDataset shards on the way out of
AIStore, written as an AIStore SDK ETL class, and train through it with a one-call loader.

``ResizeShards`` is a plain AIStore SDK ETL: a subclass of the SDK's ``HTTPMultiThreadedServer``
that overrides ``transform(data, path, etl_args)``. For each shard it decodes every image, resizes
it to ``etl_args`` ``{"size": N}`` (default 16) pixels a side, re-encodes it in its own format,
and keeps every other field, the keys and the order.

AIStore runs ETLs only on Kubernetes. Against a cluster on this machine the example serves the
same class with the SDK's own server as a local process (``aisio.localetl``), which reads each
shard from the cluster as an ETL pod does; against any other cluster it deploys the class with
the SDK's ``Etl.init_class`` (``hpull``), which needs AIStore on Kubernetes. Either way the
training code is the same: ``webdataset_loader(..., etl=aisio.ETL(name, {"size": 16}))``.

Run: ``python examples/etl_resize.py`` (uses ``AIS_ENDPOINT``, else starts a local AIStore).
From the shell: ``aisio etl init examples/etl_resize.py:ResizeShards --name resize-shards``,
then ``aisio etl show resize-shards ais://bucket/digits-0000.tar``.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tarfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aistore.sdk.etl.webserver.http_multi_threaded_server import HTTPMultiThreadedServer
from PIL import Image

import aisio

DEFAULT_SIZE = 16
FORMATS = {"png": "PNG", "jpg": "JPEG", "jpeg": "JPEG"}
ETL_NAME = "resize-shards"


def resize_image(data: bytes, size: int, fmt: str) -> bytes:
    """Returns an encoded image resized to ``size`` x ``size``, in the same format."""
    with Image.open(io.BytesIO(data)) as image:
        out = io.BytesIO()
        image.resize((size, size), Image.Resampling.BILINEAR).save(out, format=fmt)
        return out.getvalue()


def resize_shard(data: bytes, size: int) -> bytes:
    """Returns a tar shard with every image resized; other members are kept as they are."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(data)) as src, tarfile.open(fileobj=out, mode="w") as dst:
        for member in src:
            body = src.extractfile(member) if member.isfile() else None
            if body is None:
                dst.addfile(member)
                continue
            payload = body.read()
            fmt = FORMATS.get(member.name.rsplit(".", 1)[-1].lower())
            if fmt is not None:
                payload = resize_image(payload, size, fmt)
            member.size = len(payload)
            dst.addfile(member, io.BytesIO(payload))
    return out.getvalue()


class ResizeShards(HTTPMultiThreadedServer):
    """An AIStore ETL: resizes the images of every shard (``etl_args``: ``{"size": N}``)."""

    def transform(self, data: bytes, path: str, etl_args: str) -> bytes:
        size = int(json.loads(etl_args).get("size", DEFAULT_SIZE)) if etl_args else DEFAULT_SIZE
        return resize_shard(data, size)


def upload_digits(endpoint: str, bucket: str, per_shard: int = 300) -> str:
    """Uploads scikit-learn's digits as 32x32 PNG shards; returns their template."""
    import numpy as np
    import webdataset as wds
    from aistore.sdk import Client
    from sklearn.datasets import load_digits

    digits = load_digits()
    ais_bucket = Client(endpoint).bucket(bucket)
    ais_bucket.create(exist_ok=True)
    shards = 0
    for start in range(0, len(digits.images), per_shard):
        buf = io.BytesIO()
        with wds.TarWriter(buf) as writer:
            for i in range(start, min(start + per_shard, len(digits.images))):
                pixels = (digits.images[i] * 255 / 16).astype(np.uint8)
                big = Image.fromarray(pixels).resize((32, 32), Image.Resampling.NEAREST)
                png = io.BytesIO()
                big.save(png, format="PNG")
                writer.write({"__key__": f"digit{i:05d}", "png": png.getvalue(),
                              "cls": int(digits.target[i])})
        ais_bucket.object(f"digits-{shards:04d}.tar").get_writer().put_content(buf.getvalue())
        shards += 1
    return f"ais://{bucket}/digits-{{0000..{shards - 1:04d}}}.tar"


@dataclass
class Result:
    """What the run saw: the image shape the ETL delivered, samples per epoch, final accuracy."""

    image_shape: tuple[int, ...]
    samples_per_epoch: int
    accuracy: float
    where: str


def make_loader(template: str, endpoint: str, etl: aisio.ETL, **opts: Any) -> Any:
    """Returns the one-call loader: DataLoader2 where torchdata has it, else torch's DataLoader."""
    options: dict[str, Any] = dict(endpoint=endpoint, etl=etl, decode="l8",
                                   tuple_fields=("png", "cls"), batch_size=64, seed=0, **opts)
    try:
        return aisio.webdataset_loader(template, **options)
    except aisio.LoaderUnavailableError:
        return aisio.webdataset_dataloader(template, **options)


def train(template: str, endpoint: str, etl: aisio.ETL, size: int, epochs: int,
          num_workers: int) -> Result:
    """Trains a linear classifier on the ETL's ``size`` x ``size`` digits; returns what it saw."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(size * size, 10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    loader = make_loader(template, endpoint, etl, num_workers=num_workers)
    shape: tuple[int, ...] = ()
    seen = correct = 0
    for epoch in range(epochs):
        seen = correct = 0
        for images, labels in loader:
            shape = tuple(images.shape[1:])
            x = images.reshape(len(images), -1).float() / 255
            logits = model(x)
            loss = torch.nn.functional.cross_entropy(logits, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            seen += len(labels)
            correct += int((logits.argmax(1) == labels).sum())
        print(f"epoch {epoch}: {seen} samples of {'x'.join(map(str, shape))} pixels, "
              f"train accuracy {correct / max(seen, 1):.3f}")
    return Result(shape, seen, correct / max(seen, 1), "")


def run(endpoint: str, bucket: str, *, size: int = DEFAULT_SIZE, epochs: int = 3,
        num_workers: int = 2) -> Result:
    """Uploads the digits, starts the ETL (locally or on the cluster), trains through it."""
    from aisio.core.store.etl import is_loopback

    template = upload_digits(endpoint, bucket)
    etl = aisio.ETL(ETL_NAME, {"size": size})
    source = f"{Path(__file__).resolve()}:{ResizeShards.__name__}"
    if is_loopback(endpoint):  # no Kubernetes here: the SDK's server, as a local process
        with aisio.localetl.running(source, ETL_NAME, endpoint, replace=True) as server:
            print(f"ETL {ETL_NAME!r} runs locally at {server.url} (the SDK's "
                  f"{HTTPMultiThreadedServer.__name__}), reading from {endpoint}")
            result = train(template, endpoint, etl, size, epochs, num_workers)
            result.where = "local"
        return result
    from aistore.sdk import Client  # a Kubernetes AIStore: the same class, deployed as a pod

    sdk_etl = Client(endpoint).etl(ETL_NAME)
    sdk_etl.init_class(comm_type="hpull")(ResizeShards)
    try:
        result = train(template, endpoint, etl, size, epochs, num_workers)
        result.where = "cluster"
    finally:
        sdk_etl.stop()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bucket", default=f"aisio-etl-{uuid.uuid4().hex[:8]}")
    parser.add_argument("--size", type=int, default=DEFAULT_SIZE, help="pixels a side")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    with aisio.playground.cluster_endpoint() as endpoint:
        run(endpoint, args.bucket, size=args.size, epochs=args.epochs, num_workers=args.workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
