"""``aisio put``: files, folders and shards into a bucket, in parallel, resumable.

:func:`put` plans first (one listing of the destination, no upload yet), then uploads in
threads. An object already there with the same size and checksum is skipped, so a put that
was interrupted is finished by running it again; AIStore writes each object whole, so a
broken upload leaves no half object behind.

Names follow the rule of :mod:`aisio.core.store.sources`: a destination ending in ``/`` (or a bare
bucket) is a prefix, and each file lands under it (a folder's files keep their paths relative
to the folder); a destination without ``/`` names one object, for one file.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import xxhash

from aisio.core.faults.errors import BucketNotFoundError, InvalidURLError
from aisio.core.store.client import Client, client_for
from aisio.core.store.config import AISConfig, resolve_config
from aisio.core.store.sources import resolve_one
from aisio.core.store.urls import AISPath
from aisio.tools.args import endpoint_config, positive

#: Parallel uploads unless ``jobs=`` says otherwise.
DEFAULT_JOBS = 8
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Upload:
    """One file and the object it becomes."""

    file: Path
    path: AISPath
    size: int


@dataclass
class PutResult:
    """What :func:`put` did: uploaded and skipped (already there, same size and checksum)."""

    uploaded: list[Upload] = field(default_factory=list)
    skipped: list[Upload] = field(default_factory=list)
    created_bucket: bool = False

    @property
    def bytes(self) -> int:
        """Bytes uploaded."""
        return sum(u.size for u in self.uploaded)


def _files(source: Path) -> Iterator[tuple[Path, str]]:
    """Yields ``(file, name)``: a file as its own name, a folder's files by relative path."""
    if source.is_file():
        yield source, source.name
    elif source.is_dir():
        for root, dirs, names in os.walk(source):
            dirs.sort()
            for name in sorted(names):
                file = Path(root) / name
                if file.is_file():
                    yield file, file.relative_to(source).as_posix()
    else:
        raise FileNotFoundError(f"no such file or folder: {source}")


def plan(sources: Sequence[str | Path], dest: str) -> list[Upload]:
    """Returns the uploads that ``put(sources, dest)`` would make (no I/O on the cluster).

    Raises:
        InvalidURLError: ``dest`` is not an AIS name, or names one object for several files.
        FileNotFoundError: a source does not exist.
    """
    target = resolve_one(dest)[0]
    if target.kind == "template":
        raise InvalidURLError(f"{dest} is a template; put into a bucket or a prefix ending in "
                              "'/' (ais://bucket/train/)", url=dest)
    files = [pair for source in sources for pair in _files(Path(source))]
    if target.kind == "object":
        if len(files) != 1 or Path(sources[0]).is_dir():
            raise InvalidURLError(
                f"{dest} names one object, but {len(files)} file(s) are to be put; end it with "
                f"'/' to put them under that prefix ({dest}/)", url=dest)
        return [Upload(files[0][0], target.path, files[0][0].stat().st_size)]
    prefix = target.path.obj
    return [Upload(file, AISPath(target.path.bucket, prefix + name), file.stat().st_size)
            for file, name in files]


def _digest(file: Path, checksum: str) -> str | None:
    """Returns the file's digest in the algorithm a listed checksum's length suggests:
    xxhash64 (AIStore's default, 16 hex digits), MD5 (32) or SHA-256 (64)."""
    makers: dict[int, Callable[[], Any]] = {16: xxhash.xxh64, 32: hashlib.md5,
                                            64: hashlib.sha256}
    make = makers.get(len(checksum))
    if make is None:
        return None
    digest = make()
    with open(file, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return str(digest.hexdigest())


def _present(upload: Upload, listed: dict[str, dict[str, str]]) -> bool:
    """True when the object is there with the file's size and checksum (or, in a bucket
    that keeps no checksums, its size)."""
    entry = listed.get(upload.path.obj)
    if entry is None or str(entry.get("size")) != str(upload.size):
        return False
    checksum = str(entry.get("checksum") or "")
    return not checksum or _digest(upload.file, checksum) == checksum


def _listed(client: Client, uploads: Sequence[Upload]) -> tuple[dict[str, dict[str, str]], bool]:
    """Returns ``({name: entry}, created)`` for the destination; creates a missing ``ais://``
    bucket."""
    bucket = uploads[0].path.bucket
    prefix = os.path.commonprefix([u.path.obj for u in uploads])  # noqa: RUF071 - a string prefix
    try:
        return {e["name"]: e for e in client.list_objects(bucket, prefix,
                                                          props="name,size,checksum")}, False
    except BucketNotFoundError:
        if bucket.provider != "ais":
            raise
        client.create_bucket(bucket, exist_ok=True)
        return {}, True


def put(sources: Sequence[str | Path], dest: str, *, endpoint: str | None = None,
        config: AISConfig | None = None, jobs: int = DEFAULT_JOBS, force: bool = False,
        on_bytes: Callable[[int], None] | None = None,
        on_plan: Callable[[list[Upload], list[Upload]], None] | None = None) -> PutResult:
    """Uploads files and folders into a bucket or prefix; returns what it did.

    Args:
        sources: files and folders (a folder's files keep their relative paths).
        dest: ``ais://bucket/prefix/`` (or a bucket) for any number of files, or
            ``ais://bucket/name`` for one file. A missing ``ais://`` bucket is created.
        endpoint: the AIStore endpoint (else ``config``, else ``AIS_ENDPOINT``).
        config: an :class:`~aisio.AISConfig`.
        jobs: uploads in parallel.
        force: upload even what is already there with the same size and checksum.
        on_bytes: called with the size of each file as its upload ends (progress).
        on_plan: called with ``(to upload, to skip)`` before the first upload.

    Example:
        >>> put(["shards/"], "ais://bucket/train/", endpoint=endpoint)   # doctest: +SKIP
    """
    if jobs < 1:
        raise ValueError(f"jobs={jobs} must be at least 1")
    uploads = plan(sources, dest)
    result = PutResult()
    if not uploads:
        return result
    client = client_for(resolve_config(endpoint, config))
    listed, result.created_bucket = _listed(client, uploads)
    for upload in uploads:
        (result.uploaded if force or not _present(upload, listed) else result.skipped
         ).append(upload)
    if on_plan is not None:
        on_plan(result.uploaded, result.skipped)

    def send(upload: Upload) -> Upload:
        with open(upload.file, "rb") as fh:
            client.put_object(upload.path, fh)
        return upload

    with ThreadPoolExecutor(min(jobs, max(1, len(result.uploaded))),
                            thread_name_prefix="aisio-put") as pool:
        futures = [pool.submit(send, u) for u in result.uploaded]
        try:
            for future in as_completed(futures):
                done = future.result()
                if on_bytes is not None:
                    on_bytes(done.size)
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    return result


# ---- the command -----------------------------------------------------------------------------
def _run(args: argparse.Namespace) -> int:
    from aisio.tools.display import Progress, human_bytes, plural

    bar: list[Progress] = []

    def start(todo: list[Upload], skip: list[Upload]) -> None:
        if skip:
            print(f"skipping {plural(len(skip), 'file')} already in the bucket (same size and "
                  "checksum; --force uploads them anyway)", file=sys.stderr)
        bar.append(Progress("put", total=sum(u.size for u in todo)))

    try:
        result = put(args.sources, args.dest, config=endpoint_config(args), jobs=args.jobs,
                     force=args.force, on_bytes=lambda n: bar[0].update(n), on_plan=start)
    finally:
        if bar:
            bar[0].close()
    made = f"created {resolve_one(args.dest)[0].path.bucket.uri()}; " if result.created_bucket \
        else ""
    print(f"{made}put {plural(len(result.uploaded), 'file')} ({human_bytes(result.bytes)}) into "
          f"{args.dest}, skipped {len(result.skipped)} already there")
    return 0


def add_command(add: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """Registers ``aisio put`` with the command's parser (``add(name, help)`` makes one)."""

    p = add("put", "upload files, folders and shards into a bucket, in parallel; objects "
                   "already there (same size and checksum) are skipped, so a rerun resumes")
    p.add_argument("sources", nargs="+", metavar="SOURCE", help="files or folders")
    p.add_argument("dest", metavar="DEST",
                   help="ais://bucket/prefix/ (ending in '/': each file under it, a folder's "
                   "by relative path) or ais://bucket/name for one file")
    p.add_argument("-j", "--jobs", type=positive, default=DEFAULT_JOBS,
                   help="uploads in parallel (default %(default)s)")
    p.add_argument("--force", action="store_true",
                   help="upload even files already there with the same size and checksum")
    p.set_defaults(func=_run)


__all__ = ["DEFAULT_JOBS", "PutResult", "Upload", "add_command", "plan", "put"]
