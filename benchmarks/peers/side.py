"""The peer side: one system's loader over one workload, run inside that system's environment.

Imports nothing of aisio's at module level and nothing beyond the standard library, so that it
runs in every peer's venv (``benchmarks/peers/envs.py``) with the checkout on ``PYTHONPATH``.
The suite side (:mod:`benchmarks.peers.run`) sends it a job (a JSON dict) and reads back a JSON
result. Three ways to run:

* ``python -m benchmarks.peers.side --serve``: imports torch and the system's modules once, then
  forks a child per job line (``JOB.json<TAB>OUT.json``) on stdin, answers its pid and writes
  its exit code to ``OUT.json.exit`` (the design of ``benchmarks.suite.run --serve``);
* ``python -m benchmarks.peers.side JOB.json OUT.json``: one job in a new interpreter (time to
  the first batch of a fresh job, the two halves of a resume).

Modes of a job: ``epochs`` (two epochs on one loader: the first batch, each epoch's time, the
gap between the last batch of the first and the first batch of the second), ``fresh`` (the
first batch of a new process, then stop), ``resume-a`` (read ``stop_after`` batches, save the
loader's state and the keys seen) and ``resume-b`` (load that state, read to the end).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import sys
import tarfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.forkserver import serve

ACCESS = {"AWS_ACCESS_KEY_ID": "aisio-bench", "AWS_SECRET_ACCESS_KEY": "aisio-bench",
          "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1"}
"""Dummy S3 credentials: AIStore without authentication ignores them; S3 clients need some."""

BATCH_NOTE = 50
"""Every this many batches, a job notes its progress."""
PRELOAD = {"aisio": ["aisio"], "sdk": ["aistore.pytorch"], "litdata": ["litdata"],
           "streaming": ["streaming"], "s3torch": ["s3torchconnector"]}


# ---- what every system yields per batch -----------------------------------------------------
def decode_jpeg(data: bytes) -> Any:
    """Returns a JPEG as a uint8 C x H x W tensor (PIL, as aisio's ``torchrgb8``)."""
    import numpy as np
    import torch
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        array = np.asarray(image.convert("RGB"))
    return torch.from_numpy(array.copy()).permute(2, 0, 1)


def _collate_samples(samples: list[tuple[str, Any, int]]) -> dict[str, Any]:
    """Collates ``(key, payload, label)`` samples: keys and payloads as lists (payloads stacked
    when they are tensors), labels as a tensor."""
    import torch

    keys = [s[0] for s in samples]
    payloads: Any = [s[1] for s in samples]
    if payloads and isinstance(payloads[0], torch.Tensor):
        payloads = torch.stack(payloads)
    return {"key": keys, "data": payloads, "cls": torch.tensor([s[2] for s in samples])}


def tar_samples(stream: Any, decode: bool) -> Iterator[tuple[str, Any, int]]:
    """Yields ``(key, payload, label)`` of a WebDataset tar read as a stream (``r|``)."""
    pending: dict[str, Any] = {}
    key = None
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            if not member.isfile():
                continue
            base, _, ext = member.name.rpartition("/")[2].partition(".")
            fh = tar.extractfile(member)
            assert fh is not None
            data = fh.read()
            if key is not None and base != key:
                yield _sample(key, pending, decode)
                pending = {}
            key = base
            pending[ext] = data
    if key is not None:
        yield _sample(key, pending, decode)


def object_label(name: str) -> int:
    """Returns the class of a plain object of the ``objects`` workload, from its name
    (``.../obj-000123.bin`` -> 123 % 1000), as an ImageNet-style layout keeps it in the path."""
    return int(name.rpartition("-")[2].partition(".")[0]) % 1000


def _object_sample(key: str, data: bytes) -> tuple[str, bytes, int]:
    return key, data, object_label(key)


def _s3_object(reader: Any) -> tuple[str, bytes, int]:
    return _object_sample(reader.key, reader.read())


def _collate_objects(pairs: list[tuple[str, bytes]]) -> dict[str, Any]:
    return _collate_samples([_object_sample(k, d) for k, d in pairs])


def _sample(key: str, fields: dict[str, bytes], decode: bool) -> tuple[str, Any, int]:
    data = fields["jpg"]
    return key, decode_jpeg(data) if decode else data, int(fields["cls"])


# ---- each system's loader -------------------------------------------------------------------
class Loader:
    """One system's loader over one job: ``iterate()`` is one epoch of batches (dicts with
    ``key``, ``data``, ``cls``); ``state()`` / ``restore()`` when the system can resume."""

    resumable = False

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.decode = job["workload"] == "decode"
        self.workers = int(job["workers"])
        self.batch = int(job["batch"])
        self.loader: Any = None

    def iterate(self) -> Iterator[dict[str, Any]]:
        return iter(self.loader)

    def state(self) -> Any:
        return self.loader.state_dict()

    def restore(self, state: Any) -> None:
        self.loader.load_state_dict(state)

    def close(self) -> None:
        pass


class AisioLoader(Loader):
    """aisio's resumable ``webdataset_dataloader`` (torch DataLoader), raw payloads and the
    class decoded, the batch collated (keys, payloads, labels); decode: ``torchrgb8``."""

    resumable = True

    def __init__(self, job: dict[str, Any]) -> None:
        super().__init__(job)
        import aisio

        arm = job.get("options", {})
        if job["workload"] == "objects":
            self.resumable = False
            self.loader = self._objects(arm)
            return
        options: dict[str, Any] = {"endpoint": job["endpoint"], "shuffle_shards": False,
                                   "shuffle_buffer": 0, "batch_size": self.batch}
        if arm.get("shard_cache"):  # later epochs from local disk
            options["cache"] = aisio.ShardCache(job["cache"], max_bytes=64 << 30)
        if self.decode:
            options.update(decode="torchrgb8", tuple_fields=("__key__", "jpg", "cls"))
        else:
            options.update(decode=aisio.Decoder(None, only=["cls"]),
                           tuple_fields=("__key__", "jpg", "cls"))
        self.loader = aisio.webdataset_dataloader(
            [f"ais://{job['bucket']}/{name}" for name in job["tars"]],
            num_workers=self.workers, seed=0, **options)

    def _objects(self, arm: dict[str, Any]) -> Any:
        """AISFileLister -> AISFileLoader (``concurrency`` GETs at a time, or Get-Batch with
        ``batch_get`` names a request) on torch DataLoader, the listing sharded over workers."""
        from torch.utils.data import DataLoader

        import aisio

        job = self.job
        lister = aisio.AISFileLister([f"ais://{job['bucket']}/{job['prefix']}"],
                                     url=job["endpoint"]).sharding_filter()
        pipe = aisio.AISFileLoader(lister, url=job["endpoint"], **arm).map(_read_object)
        return DataLoader(pipe, batch_size=self.batch, num_workers=self.workers,
                          collate_fn=_collate_samples, persistent_workers=self.workers > 0)

    def iterate(self) -> Iterator[dict[str, Any]]:
        if self.job["workload"] == "objects":
            yield from self.loader
            return
        for keys, data, cls in self.loader:
            yield {"key": keys, "data": data, "cls": cls}

    def close(self) -> None:
        if self.job["workload"] != "objects":
            self.loader.shutdown()


def _read_object(pair: tuple[str, Any]) -> tuple[str, bytes, int]:
    url, stream = pair
    try:
        data = stream.read()
    finally:
        stream.close()
    return _object_sample(url.partition("://")[2].partition("/")[2], data)


class SDKLoader(Loader):
    """The aistore SDK's ``AISShardReader`` (whole shards read into memory) on DataLoader."""

    def __init__(self, job: dict[str, Any]) -> None:
        super().__init__(job)
        from aistore.pytorch import AISShardReader
        from aistore.sdk import Client
        from torch.utils.data import DataLoader

        client = Client(job["endpoint"])
        bucket = client.bucket(job["bucket"])
        if job["workload"] == "objects":  # AISIterDataset (a GET each) or Get-Batch
            from aistore.pytorch import AISIterDataset

            # (aistore 2.0.0 has it, but its aistore.pytorch does not export it)
            from aistore.pytorch.batch_iter_dataset import AISBatchIterDataset

            arm = job.get("options", {})
            prefix = {bucket: job["prefix"]}
            dataset = (AISBatchIterDataset(bucket, client=client, prefix_map=prefix,
                                           max_batch_size=int(arm.get("max_batch_size", 32)))
                       if arm.get("dataset") == "batch"
                       else AISIterDataset(bucket, prefix_map=prefix))
            self.loader = DataLoader(dataset, batch_size=self.batch,
                                     num_workers=self.workers, collate_fn=_collate_objects,
                                     persistent_workers=self.workers > 0)
            return
        reader = AISShardReader(bucket_list=bucket, prefix_map={bucket: list(job["tars"])})
        decode = self.decode

        def collate(samples: list[tuple[str, dict[str, bytes]]]) -> dict[str, Any]:
            return _collate_samples([(k, decode_jpeg(f["jpg"]) if decode else f["jpg"],
                                      int(f["cls"])) for k, f in samples])

        self.loader = DataLoader(reader, batch_size=self.batch, num_workers=self.workers,
                                 collate_fn=collate, persistent_workers=self.workers > 0)


class S3TorchLoader(Loader):
    """s3torchconnector's ``S3IterableDataset.from_objects`` (AWS CRT) over the tar shards,
    sharded across workers, each object parsed as a tar stream (its WebDataset example)."""

    def __init__(self, job: dict[str, Any]) -> None:
        super().__init__(job)
        import torch
        from s3torchconnector import (  # type: ignore[import-not-found]
            S3ClientConfig,
            S3IterableDataset,
        )

        os.environ.update(ACCESS)
        if job["workload"] == "objects":
            self.loader = self._objects(job.get("options", {}))
            return
        shards = S3IterableDataset.from_objects(
            [f"s3://{job['bucket']}/{name}" for name in job["tars"]], region="us-east-1",
            endpoint=job["endpoint"] + "/s3", enable_sharding=True,
            s3client_config=S3ClientConfig(force_path_style=True))
        decode = self.decode

        class Samples(torch.utils.data.IterableDataset):
            def __iter__(self) -> Iterator[tuple[str, Any, int]]:
                for reader in shards:
                    yield from tar_samples(reader, decode)

        self.loader = torch.utils.data.DataLoader(
            Samples(), batch_size=self.batch, num_workers=self.workers,
            collate_fn=_collate_samples, persistent_workers=self.workers > 0)


    def _objects(self, arm: dict[str, Any]) -> Any:
        """``S3MapDataset.from_prefix`` or ``S3IterableDataset.from_prefix`` (its listing),
        or ``S3MapDataset.from_objects`` over the names listed by the suite (``dataset="uris"``:
        AIStore's S3 listing fails the CRT), each object read whole, on torch DataLoader."""
        import torch
        from s3torchconnector import S3ClientConfig, S3IterableDataset, S3MapDataset

        job = self.job
        common: dict[str, Any] = {
            "region": "us-east-1", "endpoint": job["endpoint"] + "/s3", "transform": _s3_object,
            "s3client_config": S3ClientConfig(force_path_style=True)}
        uri = f"s3://{job['bucket']}/{job['prefix']}"
        kind = arm.get("dataset")
        if kind == "uris":
            dataset = S3MapDataset.from_objects(
                [f"s3://{job['bucket']}/{name}" for name in job["objects"]], **common)
        elif kind == "map":
            dataset = S3MapDataset.from_prefix(uri, **common)
        else:
            dataset = S3IterableDataset.from_prefix(uri, enable_sharding=True, **common)
        return torch.utils.data.DataLoader(
            dataset, batch_size=self.batch, num_workers=self.workers,
            collate_fn=_collate_samples, persistent_workers=self.workers > 0)


def _boto_options(endpoint: str) -> dict[str, Any]:
    from botocore.config import Config  # type: ignore[import-not-found]

    return {"endpoint_url": endpoint + "/s3", "aws_access_key_id": ACCESS["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": ACCESS["AWS_SECRET_ACCESS_KEY"], "region_name": "us-east-1",
            "config": Config(s3={"addressing_style": "path"})}


class LitdataLoader(Loader):
    """litdata's ``StreamingDataset`` over its own chunks (``optimize``) + ``StreamingDataLoader``
    (boto3 to AIStore's S3 API), its defaults (no shuffle, to read the order the others do)."""

    resumable = True

    def __init__(self, job: dict[str, Any]) -> None:
        super().__init__(job)
        import litdata.streaming.downloader as downloader  # type: ignore[import-not-found]
        from litdata import (
            StreamingDataLoader,
            StreamingDataset,
        )

        # litdata fetches chunks with obstore, whose client refuses http:// endpoints unless
        # allow_http is set, and litdata offers no option for it (0.2.76): set it here.
        downloader._OBSTORE_CLIENT_OPTIONS = {**downloader._OBSTORE_CLIENT_OPTIONS,
                                              "allow_http": True}
        decode = self.decode

        def transform(item: dict[str, Any]) -> dict[str, Any]:
            return {**item, "data": decode_jpeg(item["data"])} if decode else item

        dataset = StreamingDataset(f"s3://{job['bucket']}/{job['prefix']}",
                                   storage_options=_boto_options(job["endpoint"]),
                                   cache_dir=job["cache"], shuffle=False, transform=transform)
        self.loader = StreamingDataLoader(dataset, batch_size=self.batch,
                                          num_workers=self.workers, collate_fn=_collate_dicts)


def _collate_dicts(items: list[dict[str, Any]]) -> dict[str, Any]:
    # litdata gives a bytes field as a memoryview over its chunk: bytes, so that a worker's
    # batch can be pickled to the training process (a memoryview cannot: the worker's queue
    # feeder fails and the loader waits for ever)
    return _collate_samples([(i["key"], bytes(i["data"]) if isinstance(i["data"], memoryview)
                              else i["data"], int(i["cls"])) for i in items])


class StreamingLoader(Loader):
    """MosaicML streaming's ``StreamingDataset`` over its MDS shards (``MDSWriter``) +
    ``StreamingDataLoader`` (boto3 to AIStore's S3 API, ``S3_ENDPOINT_URL``), no shuffle."""

    resumable = True

    def __init__(self, job: dict[str, Any]) -> None:
        super().__init__(job)
        os.environ.update(ACCESS, S3_ENDPOINT_URL=job["endpoint"] + "/s3")
        from streaming import (  # type: ignore[import-not-found]
            StreamingDataLoader,
            StreamingDataset,
        )
        from streaming.base.util import (  # type: ignore[import-not-found]
            clean_stale_shared_memory,
        )

        clean_stale_shared_memory()
        decode = self.decode

        class Dataset(StreamingDataset):
            def __getitem__(self, index: int) -> dict[str, Any]:
                item = super().__getitem__(index)
                return {**item, "data": decode_jpeg(item["data"])} if decode else item

        dataset = Dataset(remote=f"s3://{job['bucket']}/{job['prefix']}", local=job["cache"],
                          batch_size=self.batch, shuffle=False)
        self.loader = StreamingDataLoader(dataset, batch_size=self.batch,
                                          num_workers=self.workers, collate_fn=_collate_dicts,
                                          persistent_workers=self.workers > 0)


LOADERS: dict[str, Callable[[dict[str, Any]], Loader]] = {
    "aisio": AisioLoader, "sdk": SDKLoader, "s3torch": S3TorchLoader,
    "litdata": LitdataLoader, "streaming": StreamingLoader}


# ---- a job ----------------------------------------------------------------------------------
def _count(batch: dict[str, Any]) -> int:
    return len(batch["cls"])


def _disk(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def run(job: dict[str, Any]) -> dict[str, Any]:
    """Returns the measurements of one job (see the module doc)."""
    imported = time.time()
    mode = job["mode"]
    Path(job["cache"]).mkdir(parents=True, exist_ok=True)
    loader = LOADERS[job["system"]](job)
    out: dict[str, Any] = {"imported_at": imported, "resumable": loader.resumable}
    try:
        if mode == "epochs":
            out.update(_epochs(loader, int(job.get("epochs", 2))))
        elif mode == "fresh":
            start = time.perf_counter()
            batch = next(iter(loader.iterate()))
            out.update(first_at=time.time(), first_s=time.perf_counter() - start,
                       samples=_count(batch))
        elif mode == "resume-a":
            keys: list[str] = []
            for i, batch in enumerate(loader.iterate()):
                keys.extend(batch["key"])
                if i + 1 >= int(job["stop_after"]):
                    break
            state = loader.state() if loader.resumable else None
            Path(job["state"]).write_bytes(pickle.dumps(state))
            out.update(keys=keys)
        elif mode == "resume-b":
            state = pickle.loads(Path(job["state"]).read_bytes())
            if loader.resumable:
                loader.restore(state)
            out["restored_at"] = time.time()
            keys, first_at = [], None
            for batch in loader.iterate():
                if first_at is None:
                    first_at = time.time()
                keys.extend(batch["key"])
            out.update(keys=keys, first_at=first_at)
        out["cache_bytes"] = _disk(job["cache"])
    finally:
        if mode != "resume-a":  # (a killed job does not shut its loader down)
            loader.close()
    return out


def _progress(job: dict[str, Any], epoch: int, samples: int) -> None:
    """Notes where a job is (read by the suite when the job times out)."""
    with contextlib.suppress(OSError):
        Path(job["progress"]).write_text(json.dumps({"epoch": epoch, "samples": samples}))


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            with contextlib.suppress(OSError, ValueError):
                kids = [int(k) for k in Path(f"/proc/{parent}/task/{task}/children")
                        .read_text().split()]
                out += kids
                todo += kids
    return out


def tree_cpu_seconds() -> float:
    """Returns the CPU seconds (user + system) of this process, its children already waited
    for, and its live descendants (DataLoader workers, their threads)."""
    import resource

    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    tick = os.sysconf("SC_CLK_TCK")
    for pid in _descendants(os.getpid()):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def _epochs(loader: Loader, epochs: int) -> dict[str, Any]:
    times, samples, gaps, first = [], [], [], None
    cpu = tree_cpu_seconds()
    start = time.perf_counter()
    last = start
    for epoch in range(epochs):
        epoch_start, count, seen_first = time.perf_counter(), 0, False
        _progress(loader.job, epoch + 1, 0)
        for batch in loader.iterate():
            now = time.perf_counter()
            if not seen_first:
                if first is None:
                    first = now - start
                else:
                    gaps.append(now - last)
                seen_first = True
            count += _count(batch)
            last = time.perf_counter()
            if count % (BATCH_NOTE * _count(batch) or 1) == 0:
                _progress(loader.job, epoch + 1, count)
        times.append(last - epoch_start)
        samples.append(count)
    return {"first_s": first, "epoch_s": times, "epoch_samples": samples, "gap_s": gaps,
            "cpu_s": tree_cpu_seconds() - cpu}


# ---- processes ------------------------------------------------------------------------------
def _child(spec: str, out: str) -> None:
    try:
        job = json.loads(Path(spec).read_text())
        result = {"ok": True, **run(job)}
    except BaseException as exc:  # reported to the suite, which goes on with the next arm
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000],
                  "traceback": traceback.format_exc(limit=12)}
    Path(out).write_text(json.dumps(result))


def _serve(system: str) -> None:
    serve(["torch", *PRELOAD.get(system, [])], _child, poll_seconds=0.02)


def main(argv: list[str]) -> None:
    if argv[:1] == ["--serve"]:
        _serve(argv[1] if len(argv) > 1 else "")
        return
    _child(argv[0], argv[1])
    sys.stdout.flush()
    os._exit(0)  # a resumed or killed job: no waiting on the loader's teardown


__all__ = ["LOADERS", "decode_jpeg", "object_label", "run", "tar_samples", "tree_cpu_seconds"]

if __name__ == "__main__":
    main(sys.argv[1:])
