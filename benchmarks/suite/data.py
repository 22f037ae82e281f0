"""Benchmark data: seeded shards and objects, generated in a temp dir and uploaded to AIStore.

Every workload of the suite (see :mod:`benchmarks.suite`) reads one :class:`Dataset`: a list of
object names under a prefix of the suite's own bucket, with their total size and sample count,
so that every arm reads exactly the same bytes and can check that it saw every sample.

Payloads are random bytes drawn from a seeded generator (incompressible, like JPEG data), except
for the decode workloads, whose images are real JPEGs made with PIL.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from aisio.core.store.client import Client
from aisio.core.store.urls import AISPath, Bucket

MiB = 1 << 20
_POOL_BYTES = 8 * MiB
TAR_OVERHEAD = 3 * 512
"""About the tar bytes a sample of two members adds to its payload (two headers, the padding)."""


@dataclass
class Dataset:
    """What one workload reads: object names (in order) under ``prefix``, with totals.

    Attributes:
        name: the workload it serves (``large``, ``small``, ``objects``, ...).
        prefix: the object-name prefix that lists exactly these objects.
        names: the object names, in the order they are read.
        nbytes: the total size of the objects.
        samples: the WebDataset samples in the shards (for plain objects: the objects).
        describe: a one-line description for the report.
    """

    name: str
    prefix: str
    names: list[str] = field(default_factory=list)
    nbytes: int = 0
    samples: int = 0
    describe: str = ""


class _Payloads:
    """Returns random byte strings cut from one seeded pool (fast, incompressible, reproducible)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.pool = rng.bytes(_POOL_BYTES)

    def __call__(self, size: int) -> bytes:
        if size > _POOL_BYTES // 2:
            return self.rng.bytes(size)
        start = int(self.rng.integers(0, _POOL_BYTES - size))
        return self.pool[start : start + size]


def write_shard(path: Path, samples: Iterator[tuple[str, dict[str, bytes]]]) -> int:
    """Writes WebDataset samples (``key -> {suffix: bytes}``) to a tar; returns the count."""
    count = 0
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for key, fields in samples:
            for suffix, data in fields.items():
                info = tarfile.TarInfo(f"{key}.{suffix}")
                info.size = len(data)
                info.mtime = 1_700_000_000
                tar.addfile(info, io.BytesIO(data))
            count += 1
    return count


def random_samples(
    payloads: Callable[[int], bytes], first: int, count: int, size: int
) -> Iterator[tuple[str, dict[str, bytes]]]:
    """Yields ``count`` samples of a ``size``-byte random "image" (``.jpg``) and a class."""
    for i in range(first, first + count):
        yield f"sample{i:08d}", {"jpg": payloads(size), "cls": str(i % 1000).encode()}


def jpeg_bytes(rng: np.random.Generator, px: int, quality: int = 90) -> bytes:
    """Returns a ``px`` x ``px`` RGB JPEG of smooth random shapes plus noise (a photo-like cost)."""
    from PIL import Image

    low = rng.integers(0, 256, size=(max(2, px // 16), max(2, px // 16), 3), dtype=np.uint8)
    image = Image.fromarray(low).resize((px, px), Image.Resampling.BICUBIC)
    noisy = np.asarray(image, dtype=np.int16) + rng.integers(-12, 13, size=(px, px, 3))
    out = io.BytesIO()
    Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)).save(out, "JPEG", quality=quality)
    return out.getvalue()


def jpeg_samples(
    rng: np.random.Generator, first: int, count: int, px: int
) -> Iterator[tuple[str, dict[str, bytes]]]:
    """Yields ``count`` samples of a real JPEG (``.jpg``) and a class in 0..9 (``.cls``)."""
    for i in range(first, first + count):
        yield f"img{i:08d}", {"jpg": jpeg_bytes(rng, px), "cls": str(i % 10).encode()}


class Uploader:
    """Writes generated files to a temp dir, uploads them and deletes them; builds Datasets.

    Args:
        client: the aisio client of the suite's cluster.
        bucket: the suite's bucket (already created).
        tmp: a scratch directory.
        seed: seeds every random generator (each dataset gets its own stream).
        log: progress messages.
    """

    def __init__(self, client: Client, bucket: Bucket, tmp: Path, seed: int,
                 log: Callable[[str], None]) -> None:
        self.client = client
        self.bucket = bucket
        self.tmp = tmp
        self.seed = seed
        self.log = log

    def rng(self, salt: int) -> np.random.Generator:
        """Returns the generator for one dataset (the suite seed plus a per-dataset salt)."""
        return np.random.default_rng([self.seed, salt])

    def put_file(self, path: Path, name: str, dataset: Dataset) -> None:
        """Uploads ``path`` as object ``name`` of ``dataset`` and removes the file."""
        with open(path, "rb") as fh:
            self.client.put_object(AISPath(self.bucket, name), fh)
        dataset.names.append(name)
        dataset.nbytes += path.stat().st_size
        path.unlink()

    def shards(self, name: str, nshards: int, per_shard: int,
               make: Callable[[int, int], Iterator[tuple[str, dict[str, bytes]]]],
               describe: str) -> Dataset:
        """Returns a Dataset of ``nshards`` tars of ``per_shard`` samples each, from ``make``."""
        dataset = Dataset(name, f"{name}/", describe=describe)
        for i in range(nshards):
            path = self.tmp / f"{name}-{i:06d}.tar"
            dataset.samples += write_shard(path, make(i * per_shard, per_shard))
            self.put_file(path, f"{name}/shard-{i:06d}.tar", dataset)
        self.log(f"aisio bench: uploaded {name}: {describe} ({dataset.nbytes / 1e6:,.0f} MB)")
        return dataset

    def random_shards(self, name: str, nshards: int, per_shard: int, member_bytes: int,
                      salt: int) -> Dataset:
        """Returns ``nshards`` tars of ``per_shard`` samples: random ``member_bytes`` + a class."""
        payloads = _Payloads(self.rng(salt))
        describe = f"{nshards} tars of {per_shard:,} samples ({_size(member_bytes)} + class)"
        dataset = self.shards(name, nshards, per_shard,
                              lambda first, n: random_samples(payloads, first, n, member_bytes),
                              describe)
        dataset.describe += f", {dataset.nbytes / nshards / 1e6:,.1f} MB each"
        return dataset

    def jpeg_shards(self, name: str, images: int, per_shard: int, px: int, salt: int) -> Dataset:
        """Returns shards holding ``images`` real ``px``-pixel JPEGs, ``per_shard`` per tar."""
        rng = self.rng(salt)
        nshards = max(1, -(-images // per_shard))
        per_shard = -(-images // nshards)
        describe = f"{nshards} tars of {per_shard:,} JPEGs {px}x{px} + class"
        return self.shards(name, nshards, per_shard,
                           lambda first, n: jpeg_samples(rng, first, n, px), describe)

    def objects(self, name: str, count: int, size: int, salt: int) -> Dataset:
        """Returns ``count`` plain objects of ``size`` random bytes each."""
        payloads = _Payloads(self.rng(salt))
        dataset = Dataset(name, f"{name}/", describe=f"{count:,} objects of {_size(size)}")
        dataset.names = [f"{name}/obj-{i:06d}.bin" for i in range(count)]
        with ThreadPoolExecutor(8) as pool:
            for start in range(0, count, 512):  # bounded memory: 512 bodies at a time
                chunk = dataset.names[start : start + 512]
                list(pool.map(self.client.put_object, (AISPath(self.bucket, o) for o in chunk),
                              [payloads(size) for _ in chunk]))
        dataset.nbytes = size * count
        dataset.samples = count
        self.log(f"aisio bench: uploaded {name}: {dataset.describe}")
        return dataset


def _size(nbytes: int) -> str:
    return f"{nbytes / MiB:g} MiB" if nbytes >= MiB else f"{nbytes / 1024:g} KiB"


__all__ = ["TAR_OVERHEAD", "Dataset", "Uploader", "jpeg_bytes", "write_shard"]
