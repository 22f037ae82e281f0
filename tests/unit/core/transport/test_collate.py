"""Tests for aisio.core.transport.collate: a batch of mixed shapes is a typed error naming its
samples."""

from __future__ import annotations

import numpy as np
import pytest

import aisio


def test_images_of_different_sizes_raise_a_typed_error_naming_the_samples() -> None:
    import torch
    from torch.utils.data import default_collate

    from aisio.core.transport.collate import BatchCollate, MixedShapesError

    batch = [(torch.zeros(3, 8, 8), 0), (torch.zeros(3, 8, 8), 1), (torch.zeros(3, 9, 8), 2)]
    names = ["sample #0 of ais://b/a.tar", "sample #1 of ais://b/a.tar", "sample #5 of ais://b/c.tar"]
    with pytest.raises(MixedShapesError) as info:
        BatchCollate(default_collate, lambda n: names[-n:])(batch)
    assert isinstance(info.value, aisio.DecodeError)
    message = str(info.value)
    assert "field 0" in message and "3x8x8 in 2" in message
    assert "3x9x8 in 1 (sample #5 of ais://b/c.tar)" in message
    assert BatchCollate(default_collate)(batch[:2])[1].tolist() == [0, 1]
    # Not a shape problem: torch's own error, untouched.
    with pytest.raises(TypeError):
        BatchCollate(default_collate)([object(), object()])
    assert np.array_equal(BatchCollate(default_collate)([np.zeros(2)])[0], np.zeros(2))
