"""The arms of the benchmark: one way each of reading a workload's objects, timed pass by pass.

An arm is a *setup* function: given a :class:`Job` it prepares what must not be timed (clients,
URLs, DataLoader2 workers' pipe) and returns a *pass* function that reads every object of the
workload once and returns ``(bytes, samples)``. The runner (:mod:`benchmarks.suite.run`) checks
those counts against the dataset, so an arm that loses or duplicates samples fails instead of
looking fast.

Workload kinds: ``shards`` (tars read whole, samples undecoded), ``objects`` (many small plain
objects, listed then loaded one by one) and ``decode`` (JPEG shards decoded to tensors).

The aistore SDK and webdataset are imported inside the arms that compare against them.
"""

from __future__ import annotations

import subprocess
import tarfile
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import requests

from aisio.core.store.urls import AISPath, Bucket, object_url
from aisio.datapipes.pipeline import webdataset_pipe
from aisio.datapipes.pipes import AISFileLister, AISFileLoader, AISSourceLister, WebDatasetParser
from benchmarks.suite.job import Arm, Counts, Job, LoaderPass, MiB, Pass
from benchmarks.suite.loaders import available, epoch_arms, loader_arms


# ---- helpers ------------------------------------------------------------------------------------
def _read_stream(read: Callable[[int], bytes]) -> int:
    total = 0
    while True:
        chunk = read(MiB)
        if not chunk:
            return total
        total += len(chunk)


def _count_keys(names: Iterator[str]) -> int:
    """Returns how many runs of consecutive names share a key (WebDataset samples)."""
    count, last = 0, None
    for name in names:
        key = name.rpartition("/")[2].partition(".")[0]
        if key != last:
            count, last = count + 1, key
    return count


def _list_requests(session: requests.Session, job: Job) -> list[str]:
    """Returns the names under ``job.prefix`` listed with plain requests (paged)."""
    url = f"{job.endpoint}/v1/buckets/{job.bucket}?provider=ais"
    value: dict[str, Any] = {"prefix": job.prefix, "props": "name"}
    names: list[str] = []
    while True:
        resp = session.get(url, json={"action": "list", "value": value}, timeout=60)
        resp.raise_for_status()
        page = resp.json()
        names.extend(entry["name"] for entry in page.get("entries") or [])
        if not page.get("continuation_token"):
            return names
        value.update(uuid=page.get("uuid", ""), continuation_token=page["continuation_token"])


def _sdk_bucket(job: Job) -> Any:
    from aistore.sdk import Client as SDKClient

    return SDKClient(job.endpoint, max_pool_size=16).bucket(job.bucket)


def _listed(job: Job, names: list[str]) -> list[str]:
    if sorted(names) != sorted(job.names):
        raise AssertionError(f"listing {job.prefix} gave {len(names)} names, not {len(job.names)}")
    return names


def _urls(session: requests.Session, job: Job) -> list[str]:
    """Returns the GET URLs a raw arm reads: the shards, or (objects) what a listing gives."""
    if job.kind != "objects":
        return job.urls()
    names = _listed(job, _list_requests(session, job))
    return [object_url(job.endpoint, AISPath(Bucket(job.bucket), n)) for n in names]


# ---- raw reads: the limit -----------------------------------------------------------------------
def curl(job: Job) -> Pass:
    """One ``curl -K`` process reads every URL to /dev/null (keep-alive, redirects followed)."""
    session = requests.Session()

    def run() -> Counts:
        urls = _urls(session, job)
        config = "".join(f'url = "{url}"\noutput = "/dev/null"\n' for url in urls)
        out = subprocess.run(["curl", "-s", "-f", "-L", "-w", "%{size_download}\n", "-K", "-"],
                             input=config, check=True, capture_output=True, text=True).stdout
        return sum(int(float(x)) for x in out.split()), job.samples

    return run


def requests_raw(job: Job) -> Pass:
    """Plain ``requests``: one pooled session, GET each object, read the body in 1 MiB reads."""
    session = requests.Session()

    def run() -> Counts:
        urls = _urls(session, job)
        total = 0
        for url in urls:
            with session.get(url, stream=True, timeout=60) as resp:
                resp.raise_for_status()
                total += _read_stream(resp.raw.read)
        return total, job.samples

    return run


# ---- the aistore SDK ------------------------------------------------------------------------
def sdk_reader(job: Job) -> Pass:
    """The SDK's ObjectReader: chunks of 1 MiB (objects: listed, then ``read_all()`` each)."""
    bucket = _sdk_bucket(job)

    def run() -> Counts:
        total = 0
        if job.kind == "objects":
            names = _listed(job, [e.name for e in bucket.list_all_objects_iter(prefix=job.prefix)])
            for name in names:
                total += len(bucket.object(name).get_reader().read_all())
            return total, job.samples
        for name in job.names:
            for chunk in bucket.object(name).get_reader(chunk_size=MiB):
                total += len(chunk)
        return total, job.samples

    return run


def sdk_tarfile(job: Job) -> Pass:
    """The SDK reader as a file, parsed by ``tarfile.open(mode="r|")`` (the AIStore blog's way)."""
    bucket = _sdk_bucket(job)

    def members(tar: tarfile.TarFile) -> Iterator[str]:
        for info in tar:
            if info.isreg():
                handle = tar.extractfile(info)
                assert handle is not None
                handle.read()
                yield info.name

    def run() -> Counts:
        samples = 0
        for name in job.names:
            reader = bucket.object(name).get_reader(chunk_size=MiB).as_file()
            with tarfile.open(fileobj=reader, mode="r|") as tar:
                samples += _count_keys(members(tar))
        return job.nbytes, samples

    return run


def sdk_batch(job: Job) -> Pass:
    """The SDK's Get-Batch (``client.batch``, ``/v1/ml/moss``): listed, then N names a request."""
    from aistore.sdk import Client as SDKClient

    client = SDKClient(job.endpoint, max_pool_size=16)
    bucket = client.bucket(job.bucket)
    size = int(job.options.get("batch_objects", 512))

    def run() -> Counts:
        names = _listed(job, [e.name for e in bucket.list_all_objects_iter(prefix=job.prefix)])
        total = count = 0
        for start in range(0, len(names), size):
            for _, data in client.batch(names[start : start + size], bucket=bucket).get():
                total += len(data)
                count += 1
        return total, count

    return run


# ---- webdataset ----------------------------------------------------------------------------
def webdataset_arm(job: Job) -> Pass:
    """``webdataset.WebDataset(urls, shardshuffle=False)`` over the AISSourceLister URLs."""
    import webdataset as wds

    urls = list(AISSourceLister([f"ais://{job.bucket}/{job.prefix}"], url=job.endpoint))
    if len(urls) != len(job.names):
        raise AssertionError(f"AISSourceLister gave {len(urls)} URLs, not {len(job.names)}")

    def run() -> Counts:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dataset = wds.WebDataset(urls, shardshuffle=False)
            if job.kind == "decode":
                decoded = dataset.decode(job.options.get("decode", "torchrgb8"))
                batches = decoded.to_tuple("jpg", "cls").batched(32)
                return job.nbytes, sum(len(batch[1]) for batch in batches)
            return job.nbytes, sum(1 for sample in dataset if "jpg" in sample)

    return run


# ---- aisio ------------------------------------------------------------------------------------
def aisio_single(job: Job) -> Pass:
    """aisio in one process: AISFileLister -> AISFileLoader -> WebDatasetParser."""

    def run() -> Counts:
        lister = AISFileLister(f"ais://{job.bucket}/{job.prefix}", url=job.endpoint)
        samples = WebDatasetParser(AISFileLoader(lister, url=job.endpoint))
        return job.nbytes, sum(1 for sample in samples if "jpg" in sample)

    return run


def aisio_one_call(job: Job) -> Pass:
    """``webdataset_dataloader`` in one process, what a user calls: batches of 64, the class
    decoded and collated, payloads as bytes; without the sample shuffle (``shuffle=False``
    in the options: issue #40's regression, runs of regular samples on 100 KiB members) or
    with its default shuffle buffer. One loader, one epoch a pass."""
    from aisio import Decoder, webdataset_dataloader

    shuffle = bool(job.options.get("shuffle", False))
    options: dict[str, Any] = {} if shuffle else {"shuffle_buffer": 0, "shuffle_shards": False}
    loader = webdataset_dataloader(job.ais_names(), url=job.endpoint, num_workers=0,
                                   batch_size=64, seed=0, decode=Decoder(None, only=["cls"]),
                                   tuple_fields=("jpg", "cls"), **options)

    def run() -> Counts:
        return job.nbytes, sum(len(labels) for _, labels in loader)

    return run


def aisio_dl2(job: Job) -> Pass:
    """aisio's ``webdataset_pipe`` under DataLoader2, batched inside the workers."""
    workers = int(job.options.get("workers", 2))
    if job.kind == "decode":
        pipe = webdataset_pipe(job.ais_names(), url=job.endpoint, shuffle_shards=False,
                               shuffle_buffer=0,
                               decode=job.options.get("decode", "torchrgb8"),
                               decode_threads=int(job.options.get("threads", 0)),
                               tuple_fields=("jpg", "cls"), batch_size=32)
    else:
        pipe = webdataset_pipe(job.ais_names(), url=job.endpoint, shuffle_shards=False,
                               shuffle_buffer=0,
                               batch_size=int(job.options.get("batch", 64)), collate=False)
    from aisio.datapipes.dataloader2 import make_loader

    loader = make_loader(pipe, num_workers=workers, seed=0)
    return LoaderPass(loader, _decoded_count if job.kind == "decode" else len, job.nbytes)


def _decoded_count(batch: Any) -> int:
    return len(batch[1])


def aisio_objects(job: Job) -> Pass:
    """aisio over plain objects: AISFileLister -> AISFileLoader (threads or Get-Batch), read each.

    Options: ``concurrency`` (parallel GETs) or ``batch_objects`` (names per Get-Batch request).
    """
    concurrency = int(job.options.get("concurrency", 1))
    batch_get = int(job.options.get("batch_objects", 0))

    def run() -> Counts:
        lister = AISFileLister(f"ais://{job.bucket}/{job.prefix}", url=job.endpoint)
        total = count = 0
        for _, stream in AISFileLoader(lister, url=job.endpoint, concurrency=concurrency,
                                       batch_get=batch_get):
            total += len(stream.read())
            stream.close()
            count += 1
        return total, count

    return run


_CURL = Arm("curl -L -o /dev/null", curl, "one curl process, keep-alive")
_REQUESTS = Arm("requests, 1 MiB reads", requests_raw, "the limit")
_WDS = Arm("webdataset", webdataset_arm, "reads http URLs through a curl pipe + tarfile")

ARMS: dict[str, dict[str, Arm]] = {
    "shards": {
        "curl": _CURL,
        "requests": _REQUESTS,
        "sdk-reader": Arm("SDK ObjectReader, 1 MiB chunks", sdk_reader),
        "sdk-tarfile": Arm("SDK reader + tarfile r|", sdk_tarfile, "the 'tarfile arm'"),
        "webdataset": _WDS,
        "aisio": Arm("aisio lister -> loader -> parser", aisio_single, "one process"),
        "aisio-one-call": Arm("aisio webdataset_dataloader, 0 workers, no shuffle",
                              aisio_one_call, "batches of 64, cls decoded (#40's regression)",
                              {"shuffle": False}),
        "aisio-one-call-shuffled": Arm("aisio webdataset_dataloader, 0 workers",
                                       aisio_one_call, "its default shuffle buffer",
                                       {"shuffle": True}),
        **loader_arms("batches of {batch} in the workers", {"batch": 64},
                      one_worker=("dataloader2", "dataloader"), ordered=True),
    },
    "objects": {
        "curl": _CURL,
        "requests": Arm("requests, sequential GETs", requests_raw, "the limit"),
        "sdk-reader": Arm("SDK ObjectReader.read_all", sdk_reader, "sequential"),
        "sdk-batch": Arm("SDK client.batch (Get-Batch)", sdk_batch,
                         "{batch_objects} names a request", {"batch_objects": 512}),
        "aisio": Arm("aisio loader, concurrency=1", aisio_objects, "sequential",
                     {"concurrency": 1}),
        "aisio-concurrent": Arm("aisio loader, concurrency={concurrency}", aisio_objects,
                                "threads", {"concurrency": 8}),
        "aisio-moss": Arm("aisio loader, batch_get={batch_objects}", aisio_objects,
                          "{batch_objects} names a request, iter_tar", {"batch_objects": 512}),
    },
    "decode": {
        "requests": _REQUESTS,
        "webdataset": Arm("webdataset .decode('{decode}')", webdataset_arm,
                          "one process, batches of 32", {"decode": "torchrgb8"}),
        **({f"aisio-dl2-w{n}": Arm(f"aisio DataLoader2, {n} worker{'s' if n != 1 else ''}",
                                   aisio_dl2, "{decode}, batches of 32 collated",
                                   {"workers": n, "decode": "torchrgb8"}) for n in (0, 1)}
           if available("dataloader2") else {}),
        **({"aisio-dl2-w0-t2": Arm("aisio DataLoader2, 0 workers, 2 decode threads", aisio_dl2,
                                   "{decode}, batches of 32 collated, decode_threads=2",
                                   {"workers": 0, "threads": 2, "decode": "torchrgb8"})}
           if available("dataloader2") else {}),
        **loader_arms("{decode}, batches of 32 collated", {"decode": "torchrgb8"}),
    },
    "epochs": epoch_arms(),
}
"""Arms by workload kind, in table order; the first arm named ``requests`` is the limit."""


__all__ = ["ARMS", "Arm", "Counts", "Job", "Pass"]
