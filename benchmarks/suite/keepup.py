"""Does the loader keep up? Time per N loader iterations against time per N training steps.

The method of the streaming-benchmark article: iterate the loader alone (no training) and time
each window of ``window`` batches; then train a small CNN on one cached batch and time each window
of ``window`` steps. The first window of each is a warm-up and is dropped; the others give a mean
and a variance. If a loader window takes longer than a training window, data loading is the
bottleneck; otherwise compute is, and the loader keeps the model fed.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from aisio.datapipes.dataloader2 import webdataset_loader


@dataclass(frozen=True)
class KeepUpJob:
    """The keep-up measurement: the JPEG shards, the loader's settings and the window sizes.

    Attributes:
        endpoint: the AIStore endpoint.
        shards: ``ais://`` names of the 64x64 JPEG shards.
        workers: the DataLoader2 worker counts to measure the loader with.
        batch: images per batch.
        window: iterations (or steps) per timed window.
        windows: timed windows, after one warm-up window.
    """

    endpoint: str
    shards: tuple[str, ...]
    workers: tuple[int, ...] = (0, 2)
    batch: int = 32
    window: int = 100
    windows: int = 5
    classes: int = field(default=10)


def _stats(times: list[float]) -> dict[str, Any]:
    kept = times[1:]  # the first window warms up (worker start, first connections, allocator)
    return {"windows": times, "mean": statistics.mean(kept),
            "variance": statistics.variance(kept) if len(kept) > 1 else 0.0}


def _windows(step: Callable[[], Any], window: int, count: int) -> list[float]:
    """Returns the seconds taken by each of ``count`` windows of ``window`` calls of ``step``."""
    times = []
    for _ in range(count):
        start = time.perf_counter()
        for _ in range(window):
            step()
        times.append(time.perf_counter() - start)
    return times


def _endless(loader: Any) -> Iterator[Any]:
    while True:  # epoch after epoch: the windows may span epoch boundaries, as in training
        yield from loader


def small_cnn(classes: int) -> Any:
    """Returns two 3x3 conv layers (16, 32 channels, ReLU, 2x2 max-pool) and a linear head."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.LazyLinear(classes),
    )


def run_keepup(job: KeepUpJob) -> dict[str, Any]:
    """Returns loader and training window statistics (child side of the runner)."""
    import torch

    torch.manual_seed(0)
    loaders: dict[str, Any] = {}
    cached: Any = None
    for workers in job.workers:
        loader = webdataset_loader(list(job.shards), url=job.endpoint, decode="torchrgb",
                                   tuple_fields=("jpg", "cls"), batch_size=job.batch,
                                   num_workers=workers, seed=0,
                                   shuffle_buffer=0)  # as recorded: no sample shuffle
        try:
            batches = _endless(loader)
            cached = next(batches)
            times = _windows(partial(next, batches), job.window, job.windows + 1)
        finally:
            loader.shutdown()
        loaders[str(workers)] = _stats(times)
    images, labels = cached
    model = small_cnn(job.classes)
    model(images)  # materialise the lazy layer
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def train_step() -> None:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()

    train = _stats(_windows(train_step, job.window, job.windows + 1))
    return {"loaders": loaders, "train": train, "shape": list(images.shape),
            "torch_threads": torch.get_num_threads()}


__all__ = ["KeepUpJob", "run_keepup", "small_cnn"]
