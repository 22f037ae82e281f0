"""Tests for aisio.runtime.collate: stack_collate is torch's default_collate, its CPU tensors
stacked by a numpy copy in the training process and by torch everywhere else."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.utils.data import default_collate

from aisio.runtime import collate as collate_module
from aisio.runtime.collate import stack_collate


def images(n: int = 5, dtype: torch.dtype = torch.uint8) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randint(0, 255, (3, 4, 6), generator=generator).to(dtype) for _ in range(n)]


def same(ours: Any, theirs: Any) -> bool:
    """Whether two collated batches have the same structure, types, dtypes, shapes and values."""
    if type(ours) is not type(theirs):
        return False
    if isinstance(ours, torch.Tensor):
        return (ours.dtype == theirs.dtype and ours.shape == theirs.shape
                and ours.is_contiguous() and torch.equal(ours, theirs))
    if isinstance(ours, dict):
        return ours.keys() == theirs.keys() and all(same(ours[k], theirs[k]) for k in ours)
    if isinstance(ours, (list, tuple)):
        return len(ours) == len(theirs) and all(map(same, ours, theirs))
    return bool(ours == theirs)


BATCHES = {
    "tuples": [(f"key{i}", image, i % 3) for i, image in enumerate(images())],
    "dicts": [{"jpg": image, "cls": float(i)} for i, image in enumerate(images())],
    "numpy HWC": [image.permute(1, 2, 0).numpy() for image in images()],
    "permuted views": [image.permute(2, 0, 1) for image in images()],
    "float32": images(dtype=torch.float32),
    "bool": images(dtype=torch.bool),
    "bfloat16": images(dtype=torch.bfloat16),
    "scalars": [torch.tensor(i) for i in range(4)],
}


@pytest.fixture
def torch_stacks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the batches stacked by torch's own tensor collate."""
    calls: list[int] = []
    real = collate_module.collate_tensor_fn

    def spy(batch: Any, **kwargs: Any) -> Any:
        calls.append(len(batch))
        return real(batch, **kwargs)

    monkeypatch.setattr(collate_module, "collate_tensor_fn", spy)
    return calls


@pytest.mark.parametrize("name", sorted(BATCHES))
def test_the_same_batch_as_default_collate(name: str) -> None:
    batch = BATCHES[name]
    assert same(stack_collate(batch), default_collate(batch))


@pytest.mark.parametrize("name", ["tuples", "dicts", "numpy HWC", "permuted views", "float32"])
def test_cpu_tensors_are_stacked_without_torch(name: str, torch_stacks: list[int]) -> None:
    stack_collate(BATCHES[name])
    assert torch_stacks == []


def test_torch_stacks_what_numpy_cannot(torch_stacks: list[int]) -> None:
    stack_collate(BATCHES["bfloat16"])
    grads = [t.float().requires_grad_() for t in images(2)]
    assert torch.equal(stack_collate(grads), torch.stack(grads))
    assert torch_stacks == [5, 2]


def test_a_worker_leaves_the_stack_to_torch(torch_stacks: list[int],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # torch allocates a worker's batch in shared memory, and a worker has one thread anyway.
    monkeypatch.setattr(collate_module, "get_worker_info", lambda: SimpleNamespace(id=0))
    stack_collate(images())
    assert torch_stacks == [5]


def test_mixed_shapes_fail_as_in_torch() -> None:
    # BatchCollate turns torch's RuntimeError into a MixedShapesError naming the samples.
    batch = [torch.zeros(3, 4, 6, dtype=torch.uint8), torch.zeros(3, 5, 6, dtype=torch.uint8)]
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        default_collate(batch)
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        stack_collate(batch)
