"""Shards -> samples -> batches through DataLoader2, over a MemoryStore (moved from
tests/integration/datapipes/test_pipeline.py, which keeps what only a cluster shows)."""

from __future__ import annotations

import io
import itertools
import tarfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import aisio
from aisio.core.store.memory import MemoryStore
from aisio.core.store.urls import AISPath, Bucket
from tests.conftest import needs_dataloader2, sample_keys, write_shards

pytestmark = needs_dataloader2


@pytest.fixture
def shards(store: MemoryStore, bucket: Bucket, tmp_path: Path) -> tuple[str, list[str]]:
    return write_shards(store, bucket, tmp_path, shards=5, per_shard=20)


def test_two_workers_read_every_sample_once(store: MemoryStore,
                                            shards: tuple[str, list[str]]) -> None:
    template, keys = shards
    loader = aisio.webdataset_loader(template, store=store, num_workers=2, seed=1)
    try:
        for _ in range(2):
            got = sample_keys(loader)
            assert Counter(got) == Counter(keys)
    finally:
        loader.shutdown()


def test_more_workers_than_shards(store: MemoryStore, bucket: Bucket,
                                  tmp_path: Path) -> None:
    template, keys = write_shards(store, bucket, tmp_path, shards=2, per_shard=5)
    loader = aisio.webdataset_loader(template, store=store, num_workers=3)
    try:
        assert sorted(sample_keys(loader)) == sorted(keys)
        assert sorted(sample_keys(loader)) == sorted(keys)  # a second iter() works too
    finally:
        loader.shutdown()


def test_seed_reproduces_order_and_epochs_reshuffle(store: MemoryStore,
                                                    shards: tuple[str, list[str]]) -> None:
    template, keys = shards

    def two_epochs(seed: int) -> tuple[list[str], list[str]]:
        loader = aisio.webdataset_loader(template, store=store, num_workers=2, seed=seed,
                                         shuffle_buffer=30)
        try:
            return sample_keys(loader), sample_keys(loader)
        finally:
            loader.shutdown()

    first, second = two_epochs(3)
    assert sorted(first) == sorted(keys) == sorted(second)
    assert first != second
    assert two_epochs(3) == (first, second)
    assert two_epochs(4)[0] != first


def test_batches_train_a_model(store: MemoryStore, bucket: Bucket,
                               tmp_path: Path) -> None:
    template, keys = write_shards(store, bucket, tmp_path, shards=4, per_shard=64,
                                  payload=16)
    # Each sample's label, by its (random, unique) bytes, read with tarfile (not aisio): what
    # every batch must pair them with.
    label_of: dict[bytes, int] = {}
    for s in range(4):
        raw = store.read(AISPath(bucket, f"shard-{s:04d}.tar"))
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            files = {m.name: tar.extractfile(m).read() for m in tar}  # type: ignore[union-attr]
        for name, data in files.items():
            if name.endswith(".bin"):
                label_of[data] = int(files[name[: -len(".bin")] + ".cls"])
    assert len(label_of) == len(keys)
    loader = aisio.webdataset_loader(
        template, store=store, decode=aisio.Decoder(image=None), tuple_fields=("bin", "cls"),
        batch_size=32, num_workers=2,
        seed=0, post=lambda p: p.map(_to_tensor))
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    try:
        for _ in range(8):
            for x, y in loader:
                raw = (x * 255).round().to(torch.uint8)
                assert [label_of[bytes(row.tolist())] for row in raw] == y.tolist()
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
    finally:
        loader.shutdown()
    assert len(losses) >= 8 * 8
    assert sum(losses[-8:]) < sum(losses[:8])  # the model learns the pairing (memorises it)


def _to_tensor(batch: tuple[list[bytes], torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    raw, labels = batch
    x = torch.stack([torch.frombuffer(bytearray(b), dtype=torch.uint8).float() / 255 for b in raw])
    return x, labels


def test_resampled_epochs_have_the_asked_length(store: MemoryStore,
                                                shards: tuple[str, list[str]]) -> None:
    template, keys = shards
    loader = aisio.webdataset_loader(template, store=store, resampled=True,
                                     samples_per_epoch=150, num_workers=2, seed=5)
    try:
        first, second = sample_keys(loader), sample_keys(loader)
    finally:
        loader.shutdown()
    assert len(first) == len(second) == 150
    assert set(first) <= set(keys)
    assert first != second


def test_resampled_shards_are_drawn_with_replacement(store: MemoryStore,
                                                     shards: tuple[str, list[str]]) -> None:
    # One worker, no shuffle buffer: the epoch is whole shards in the order drawn, each draw
    # starting at its shard's sample00000. Drawn with replacement, a shard comes back before
    # all 5 were drawn (in 5 draws: 1 - 5!/5**5 = 96 %; in one of two epochs: 99.9 %).
    # Without replacement (a shuffled cycle), the first 5 draws are always 5 shards.
    template, _ = shards
    loader = aisio.webdataset_loader(template, store=store, resampled=True,
                                     samples_per_epoch=150, num_workers=1, seed=5)
    try:
        epochs = [sample_keys(loader) for _ in range(2)]
    finally:
        loader.shutdown()
    draws = [[k.split("/")[0] for k in epoch if k.endswith("/sample00000")] for epoch in epochs]
    assert all(len(d) >= 6 for d in draws), draws  # 150 samples of 20-24-sample shards
    assert any(len(set(d[:5])) < 5 for d in draws), draws


def test_decode_threads_keep_order_and_values(store: MemoryStore,
                                              shards: tuple[str, list[str]]) -> None:
    template, keys = shards
    plain = list(aisio.webdataset_pipe(template, store=store, shuffle_shards=False,
                                       shuffle_buffer=0, decode="pil", tuple_fields=("cls",)))
    threaded = list(aisio.webdataset_pipe(template, store=store, shuffle_shards=False,
                                          shuffle_buffer=0, decode="pil", decode_threads=3,
                                          tuple_fields=("cls",)))
    assert threaded == plain
    assert len(plain) == len(keys)


def test_resampled_shards_from_one_template_string(store: MemoryStore, jpeg_shards: str) -> None:
    names = aisio.ResampledShards(jpeg_shards, seed=1)
    assert sorted(set(names.names)) == [jpeg_shards.replace("{0..1}", str(i)) for i in range(2)]
    four = list(itertools.islice(iter(names), 4))
    pipe = aisio.AISFileLoader(four, store=store).ais_parse_webdataset()
    assert len(list(pipe)) == 40


def _label(sample: tuple[Any, ...]) -> int:
    return int(sample[1])


def _post(pipe: Any) -> Any:
    return pipe.map(_label)


# torch's map() warns about lambdas when the pipe is built; the error then came much later.
@needs_dataloader2
@pytest.mark.filterwarnings("ignore:.*function is not supported by pickle:UserWarning")
def test_lambda_in_post_is_named_when_the_loader_is_built(store: MemoryStore,
                                                          jpeg_shards: str) -> None:
    with pytest.raises(aisio.ConfigError) as info:
        aisio.webdataset_loader(jpeg_shards, store=store, tuple_fields="jpg cls",
                                num_workers=2, post=lambda p: p.map(lambda s: s[1]))
    message = str(info.value)
    assert "\n" not in message
    assert "<lambda>" in message and Path(__file__).name in message
    assert "module level" in message
    loader = aisio.webdataset_loader(jpeg_shards, store=store, tuple_fields="jpg cls",
                                     num_workers=2, post=_post)
    try:
        assert sorted(_labels(loader)) == sorted(list(range(10)) * 2)
    finally:
        loader.shutdown()


def _labels(loader: Any) -> Iterator[int]:
    yield from loader
