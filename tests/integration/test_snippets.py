"""Every Python snippet of the README and the docs runs, as written, against a real AIStore
(#41 item 7): the ones whose note says otherwise are left to the test it names, or say why
they cannot run here (tests/snippets.py; tests/unit/test_readme.py checks the notes).

The snippets' names are the docs' own (``ais://bucket/shard-{000..099}.tar``,
``ais://b/train-{0000..0099}.tar``): a bucket of this test holds those shards, small, and each
snippet reads them with its bucket's name put in. What a snippet takes from its reader's
context (``model``, ``shards``) is given here; it runs in a directory of its own.
"""

from __future__ import annotations

import importlib.util
import io
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import webdataset as wds
from PIL import Image

import aisio
from aisio.core.store.client import Client
from aisio.core.store.urls import AISPath, Bucket
from tests.conftest import HAS_DATALOADER2, HAS_NODES
from tests.snippets import Snippet, snippets

RUN = [s for s in snippets() if s.note is None]
#: what a snippet needs that not every environment has
NEEDS = {"webdataset_loader(": HAS_DATALOADER2, "make_loader(": HAS_DATALOADER2,
         "webdataset_node_loader(": HAS_NODES,
         "pytorch_lightning": importlib.util.find_spec("pytorch_lightning") is not None}


@pytest.fixture(scope="module")
def docs_bucket(ais_client: Client) -> Iterator[Bucket]:
    """A bucket holding the shards the docs name: shard-{000..099}.tar and
    train-{0000..0099}.tar, 3 samples each (jpg, png, cls)."""
    import uuid

    bucket = Bucket(f"aisio-snippets-{uuid.uuid4().hex[:8]}")
    ais_client.create_bucket(bucket)
    try:
        for name in [f"shard-{i:03d}.tar" for i in range(100)] + [
                f"train-{i:04d}.tar" for i in range(100)]:
            out = io.BytesIO()
            with wds.TarWriter(out) as sink:
                for k in range(3):
                    image = Image.new("RGB", (8, 6), (k * 60, 0, 0))
                    png, jpg = io.BytesIO(), io.BytesIO()
                    image.save(png, "PNG")
                    image.save(jpg, "JPEG")
                    sink.write({"__key__": f"{name[:-4]}/img-{k}", "png": png.getvalue(),
                                "jpg": jpg.getvalue(), "cls": k})
            ais_client.put_object(AISPath(bucket, name), out.getvalue())
        yield bucket
    finally:
        ais_client.destroy_bucket(bucket)


def _model() -> torch.nn.Module:
    """The reader's ``model``: a LightningModule (so the trainer snippets can fit it), which
    is an ``nn.Module`` for the others."""
    import pytorch_lightning as pl

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1))

        def training_step(self, batch: Any, index: int) -> torch.Tensor:
            return (self.weight - 1).pow(2).sum()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Model()


@pytest.mark.slow
@pytest.mark.parametrize("snippet", RUN, ids=lambda s: s.id)
def test_the_snippet_runs(snippet: Snippet, docs_bucket: Bucket, ais_endpoint: str,
                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = [need for need, present in NEEDS.items() if need in snippet.code and not present]
    if missing:
        pytest.skip(f"needs {missing[0].rstrip('(')}, not in this environment (the other one "
                    "runs it)")
    monkeypatch.setenv("AIS_ENDPOINT", ais_endpoint)
    monkeypatch.chdir(tmp_path)
    code = snippet.code.replace("ais://bucket/", docs_bucket.uri("")).replace(
        "ais://b/", docs_bucket.uri(""))
    namespace: dict[str, Any] = {"__name__": "__snippet__", "aisio": aisio, "torch": torch,
                                 "model": _model(),
                                 "shards": docs_bucket.uri("shard-{000..099}.tar")}
    try:
        with warnings.catch_warnings():
            # Shown, not raised: the snippet is what a user runs (Lightning, say, advises
            # more workers on a 2-core machine), and this test is about it running.
            warnings.simplefilter("default")
            exec(compile(code, snippet.id, "exec"), namespace)
    finally:
        # Every loader the snippet built, its own or a trainer's (which keeps its workers until
        # shut down): the next snippet's workers should not share the cores with them.
        import gc

        with warnings.catch_warnings():
            # type(), not isinstance: the latter reads __class__, which some objects in the
            # heap warn on (torch.distributed's deprecated reduce_op)
            warnings.simplefilter("ignore")
            loaders = [value for value in gc.get_objects()
                       if issubclass(type(value), aisio.ResumableLoader)]
        for value in loaders:
            value.shutdown()
