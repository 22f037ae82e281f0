"""Example 4: the DataLoader2 training pipeline, WebLoader-style: batch in workers, rebatch after.

As in the article's ``WebLoader(dataset, batch_size=None).unbatched().shuffle(1000).batched(64)``,
each worker process reads whole shards, decodes them and hands over *small* batches (cheap to
send between processes); the main process then unbatches, shuffles across the workers' output and
rebatches to the size the model wants::

    workers (DataLoader2):  shards -> samples -> shuffle -> decode -> to_tuple -> batch(16)
    main process:           IterableWrapper(loader) -> unbatch -> shuffle(256) -> batch(64)
                            -> collate

DataLoader2's output iterator is not a DataPipe, so the second stage wraps the loader in an
``IterableWrapper``: each pass over it is one epoch of the loader. The model is a small CNN that
tells the two photos of example 1 apart from 32x32 crops.

Run: ``python examples/dataloader2_pipeline.py`` (uses ``AIS_ENDPOINT``, else a local AIStore).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
from convert_dataset import build_dataset, convert

import aisio

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from torchdata.dataloader2 import DataLoader2
    from torchdata.datapipes.iter import IterableWrapper, IterDataPipe


def training_batches(template: str, endpoint: str, *, workers: int, worker_batch: int,
                     batch_size: int, shuffle: int) -> tuple[IterDataPipe, DataLoader2]:
    """Returns (the main-process DataPipe of training batches, the DataLoader2 to shut down)."""
    pipe = aisio.webdataset_pipe(
        template, endpoint=endpoint, shuffle_buffer=100, decode="torchrgb",
        tuple_fields=("image.jpg", "cls", "mask.png"),
        batch_size=worker_batch, collate=False,  # lists of samples cross the process boundary
    )
    loader = aisio.make_loader(pipe, num_workers=workers, seed=0)
    batches = (IterableWrapper(loader, deepcopy=False)
               .unbatch().shuffle(buffer_size=shuffle).batch(batch_size).collate())
    return batches, loader


@dataclass
class Report:
    """What training saw: samples per epoch, the mean loss per epoch, the first batch's shapes."""

    samples_per_epoch: list[int] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    shapes: tuple[tuple[int, ...], ...] = ()


def train(batches: IterDataPipe, epochs: int) -> Report:
    """Trains a small CNN for ``epochs`` passes over ``batches``; returns what it saw."""
    torch.manual_seed(0)  # also seeds the main-process shuffle
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(32, 2),
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    report = Report()
    for epoch in range(1, epochs + 1):
        start, seen, total, steps = time.perf_counter(), 0, 0.0, 0
        for images, labels, masks in batches:
            if not report.shapes:
                report.shapes = (tuple(images.shape), tuple(labels.shape), tuple(masks.shape))
                print(f"first batch: images {report.shapes[0]}, labels {report.shapes[1]}, "
                      f"masks {report.shapes[2]}")
            optimizer.zero_grad()
            loss = loss_fn(model(images), labels)
            loss.backward()
            optimizer.step()
            seen += len(labels)
            total += loss.item()
            steps += 1
        elapsed = time.perf_counter() - start
        report.samples_per_epoch.append(seen)
        report.losses.append(total / max(1, steps))
        print(f"epoch {epoch}: {seen} samples in {steps} batches, {seen / elapsed:,.0f} "
              f"samples/s, loss {report.losses[-1]:.3f}")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bucket", default="ais://aisio-crops", help="bucket for the shards")
    parser.add_argument("--stride", type=int, default=32, help="pixels between crops")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader2 worker processes")
    parser.add_argument("--worker-batch", type=int, default=16, help="batch size in workers")
    parser.add_argument("--batch-size", type=int, default=64, help="batch size for the model")
    args = parser.parse_args(argv)
    with aisio.playground.cluster_endpoint() as endpoint, tempfile.TemporaryDirectory() as tmp:
        build_dataset(Path(tmp), stride=args.stride)
        converted = convert(Path(tmp), endpoint, args.bucket, per_shard=100)
        print(f"{converted.samples} samples in {converted.template}")
        batches, loader = training_batches(
            converted.template, endpoint, workers=args.workers, worker_batch=args.worker_batch,
            batch_size=args.batch_size, shuffle=256)
        try:
            train(batches, args.epochs)
        finally:
            loader.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
