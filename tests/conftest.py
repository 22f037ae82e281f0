"""Shared fixtures: a real AIStore for the session, and a fresh bucket per test."""

from __future__ import annotations

import importlib.util
import itertools
import os
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import aisio
from aisio import AISConfig
from aisio.core.store.client import Client, client_for
from aisio.core.store.memory import MemoryStore
from aisio.core.store.urls import AISPath, Bucket
from aisio.playground import Playground

HERE = Path(__file__).parent
#: the checkout (what subprocesses run from and import aisio from)
ROOT = HERE.parent

HAS_DATALOADER2 = importlib.util.find_spec("torchdata.dataloader2") is not None
HAS_NODES = importlib.util.find_spec("torchdata.nodes") is not None
#: every aisio loader this environment's torchdata has, by name
LOADERS: dict[str, Any] = {
    name: make for name, make, present in [
        ("dataloader2", aisio.webdataset_loader, HAS_DATALOADER2),
        ("dataloader", aisio.webdataset_dataloader, True),
        ("stateful", aisio.webdataset_stateful_loader, True),
        ("nodes", aisio.webdataset_node_loader, HAS_NODES),
    ] if present
}
#: the loader tests use where any loader will do: DataLoader2 where it exists (the mission)
default_loader = aisio.webdataset_loader if HAS_DATALOADER2 else aisio.webdataset_dataloader
needs_dataloader2 = pytest.mark.skipif(
    not HAS_DATALOADER2, reason="DataLoader2 needs torchdata < 0.10 (not in this environment)")


def pytest_configure(config: pytest.Config) -> None:
    # aisio's advice when a loader has more reading workers than shards (or streams), which
    # many tests do on purpose; tests/unit/loaders/test_idle_workers.py checks it is given.
    config.addinivalue_line("filterwarnings",
                            "ignore:.*will have no (shard|stream) to read:UserWarning")
    # Subprocesses (distributed ranks, examples, notebook kernels) must import this checkout's
    # aisio, whatever checkout the shared venv's editable install points at.
    root = str(ROOT)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join([root, *[p for p in paths if p != root]])
    # With AIS_ENDPOINT unset, aisio finds the running default playground: never the user's own
    # in a test (a directory that does not exist; a test that wants one names its own).
    os.environ["AISIO_PLAYGROUND_DIR"] = os.path.join(
        tempfile.gettempdir(), f"aisio-tests-no-default-playground-{os.getpid()}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if (HERE / "integration") in Path(item.fspath).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def ais_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The endpoint of a real AIStore: AIS_ENDPOINT if set, else a playground for this session."""
    explicit = os.environ.get("AIS_ENDPOINT")
    if explicit:
        yield explicit.rstrip("/")
        return
    playground = Playground(tmp_path_factory.mktemp("ais-playground"), ntargets=1)
    endpoint = playground.up()
    try:
        yield endpoint
    finally:
        playground.down(wipe=True, quiet=True)


@pytest.fixture(scope="session")
def ais_config(ais_endpoint: str) -> AISConfig:
    return AISConfig(endpoint=ais_endpoint)


@pytest.fixture(scope="session")
def ais_client(ais_config: AISConfig) -> Client:
    return client_for(ais_config)


@pytest.fixture
def bucket(ais_client: Client) -> Iterator[Bucket]:
    """A uniquely named, empty ais:// bucket, destroyed after the test."""
    bck = Bucket(f"aisio-test-{uuid.uuid4().hex[:10]}")
    ais_client.create_bucket(bck)
    try:
        yield bck
    finally:
        ais_client.destroy_bucket(bck)


def tar_bytes(members: list[tuple[str, bytes]], tail: bytes = b"") -> bytes:
    """Returns a ustar archive of ``(name, data)`` members, with ``tail`` appended after it."""
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue() + tail


def sample_keys(samples: object) -> list[str]:
    """Returns the ``__key__`` of every sample a pipe or loader yields, in order."""
    return [s["__key__"] for s in samples]  # type: ignore[attr-defined]


def put(client: Client | MemoryStore, path: AISPath, data: bytes) -> None:
    """Writes one object to the cluster or to a MemoryStore."""
    if isinstance(client, MemoryStore):
        client.put(path, data)
    else:
        client.put_object(path, data)


def write_shards(
    client: Client | MemoryStore,
    bucket: Bucket,
    tmp_path: Path,
    *,
    shards: int,
    per_shard: int,
    prefix: str = "shard",
    payload: int = 64,
) -> tuple[str, list[str]]:
    """Uploads WebDataset shards of ``(bin, cls)`` samples to the cluster (or puts them in a
    MemoryStore); returns (template, all sample keys).

    Shards hold different numbers of samples (``per_shard`` + shard index) so that uneven splits
    are the normal case, as in real datasets.
    """
    import random

    import webdataset as wds

    rng = random.Random(shards * 1000 + per_shard)
    keys: list[str] = []
    for s in range(shards):
        path = tmp_path / f"{prefix}-{s:04d}.tar"
        with wds.TarWriter(str(path)) as sink:
            for i in range(per_shard + s):
                key = f"s{s:04d}/sample{i:05d}"
                sink.write({"__key__": key, "bin": rng.randbytes(payload), "cls": (s + i) % 10})
                keys.append(key)
        put(client, AISPath(bucket, path.name), path.read_bytes())
        path.unlink()
    return bucket.uri(f"{prefix}-{{0000..{shards - 1:04d}}}.tar"), keys


def jpeg(value: int) -> bytes:
    """Returns an 8x8 JPEG of one colour."""
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (8, 8), (value, 0, 0)).save(out, "JPEG")
    return out.getvalue()


def write_jpeg_shards(client: Client | MemoryStore, bucket: Bucket) -> str:
    """Writes two shards of 10 (jpg, json, cls) samples, sample s1/0003's JPEG cut short;
    returns their template."""
    import io

    import webdataset as wds

    for s in range(2):
        out = io.BytesIO()
        with wds.TarWriter(out) as sink:
            for i in range(10):
                image = jpeg(i)
                if (s, i) == (1, 3):
                    image = image[:40]
                sink.write({"__key__": f"s{s}/{i:04d}", "jpg": image, "json": {"i": i},
                            "cls": i})
        put(client, AISPath(bucket, f"train-{s}.tar"), out.getvalue())
    return bucket.uri("train-{0..1}.tar")


_thread_local = threading.local()
_thread_tokens = itertools.count(1)


def thread_token() -> tuple[int, int]:
    """Returns ``(pid, n)``: the calling thread's own number ``n`` in its process, never given to
    another thread (a thread's name or ident may be reused by one started later; a forked child
    keeps its parent's number for the thread that forked, hence the pid)."""
    if getattr(_thread_local, "pid", None) != os.getpid():
        _thread_local.pid, _thread_local.token = os.getpid(), next(_thread_tokens)
    return _thread_local.pid, _thread_local.token


def child_pids() -> set[int]:
    """Returns the pids of this process's live child processes (Linux's /proc)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[1]) == os.getpid():
                found.add(int(entry))
    return found


@pytest.fixture
def own_ring(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A shared-memory ring of this test's own as this process's (the slots it maps are
    unmapped after): for tests that send deliveries or chunks across as a worker would."""
    from aisio.core.transport import ring as ring_module

    monkeypatch.setattr(ring_module, "_ring", ring_module.Ring(slots=2))
    yield
    ring_module._held.clear()


class FakeClock:
    """``time`` for the HTTP client and its view of the cluster: ``sleep`` advances
    ``monotonic`` and is recorded (retries and waits, without waiting)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    from aisio.core.store import client as client_module
    from aisio.core.store import cluster as cluster_module

    fake = FakeClock()
    monkeypatch.setattr(client_module, "time", fake)
    monkeypatch.setattr(cluster_module, "time", fake)
    return fake
