"""The main job: a real pipeline from a local AIStore into a training loop.

1. Start a local AIStore (unless AIS_ENDPOINT points at one).
2. Convert scikit-learn's digits (1,797 8x8 images that ship inside the package) into WebDataset
   shards with ``webdataset.ShardWriter``, uploading each shard as soon as it is written.
3. Stream the shards back: AISFileLoader -> WebDatasetParser -> decode -> batches, through
   DataLoader2 with worker processes.
4. Train a small classifier for a few epochs, printing samples/s and the loss going down.

Run: ``make demo`` (or ``python examples/train_digits.py --help``).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import webdataset as wds
from PIL import Image
from sklearn.datasets import load_digits

import aisio
from aisio.core.client import client_for
from aisio.core.urls import parse_ais_url


def write_shards(bucket: str, workdir: Path, per_shard: int, endpoint: str) -> str:
    """Writes the digits as PNG + cls WebDataset shards and uploads each one; returns a template."""
    client = client_for(aisio.AISConfig(endpoint=endpoint))
    client.create_bucket(parse_ais_url(bucket).bucket, exist_ok=True)
    digits = load_digits()
    uploaded: list[str] = []

    def upload(path: str) -> None:
        name = f"{bucket}/{Path(path).name}"
        with open(path, "rb") as fh:
            client.put_object(parse_ais_url(name), fh)
        uploaded.append(name)
        os.unlink(path)  # only one shard on local disk at a time

    pattern = str(workdir / "digits-%04d.tar")
    with wds.ShardWriter(pattern, maxcount=per_shard, post=upload, verbose=0) as sink:
        for i, (image, label) in enumerate(zip(digits.images, digits.target, strict=True)):
            png = io.BytesIO()
            Image.fromarray((image * 255 / 16).astype(np.uint8), mode="L").save(png, "PNG")
            sink.write({"__key__": f"sample{i:05d}", "png": png.getvalue(), "cls": int(label)})
    print(f"uploaded {len(digits.images)} samples as {len(uploaded)} shards to {bucket}/")
    return f"{bucket}/digits-{{0000..{len(uploaded) - 1:04d}}}.tar"


def train(template: str, endpoint: str, epochs: int, workers: int, batch_size: int) -> float:
    """Trains a small MLP on batches streamed from AIStore; returns the last epoch's mean loss."""
    loader = aisio.webdataset_loader(
        template, url=endpoint, decode="torchl", tuple_fields=("png", "cls"),
        shuffle_buffer=256, batch_size=batch_size, num_workers=workers, seed=0,
    )
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    mean_loss = float("nan")
    try:
        for epoch in range(1, epochs + 1):
            start, seen, total_loss, correct, steps = time.perf_counter(), 0, 0.0, 0, 0
            for images, labels in loader:
                optimizer.zero_grad()
                logits = model(images)
                loss = loss_fn(logits, labels)
                loss.backward()
                optimizer.step()
                seen += len(labels)
                steps += 1
                total_loss += loss.item()
                correct += int((logits.argmax(1) == labels).sum())
            elapsed = time.perf_counter() - start
            mean_loss = total_loss / max(steps, 1)
            print(f"epoch {epoch}: {seen} samples in {elapsed:.2f} s = {seen / elapsed:,.0f} "
                  f"samples/s | loss {mean_loss:.3f} | train accuracy {correct / seen:.1%}")
    finally:
        loader.shutdown()
    return mean_loss


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bucket", default="ais://aisio-demo", help="bucket to upload to")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader2 worker processes")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--per-shard", type=int, default=200, help="samples per shard")
    args = parser.parse_args()

    try:
        with aisio.playground.cluster_endpoint() as endpoint:
            print(f"AIStore at {endpoint}")
            with tempfile.TemporaryDirectory() as tmp:
                template = write_shards(args.bucket, Path(tmp), args.per_shard, endpoint)
            print(f"streaming {template} through DataLoader2 with {args.workers} workers")
            train(template, endpoint, args.epochs, args.workers, args.batch_size)
    except aisio.AISIOError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not os.environ.get("AIS_ENDPOINT"):
        print("stopped the local AIStore (keep one running with `aisio playground up`)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
