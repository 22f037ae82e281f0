"""``samples_per_epoch`` (aisio.core.epochs.resample): checked when a loader is built."""

from __future__ import annotations

import pytest

from aisio.core.epochs.resample import check_resampled


def test_samples_per_epoch_goes_with_resampled_and_is_at_least_one() -> None:
    check_resampled(False, None)
    check_resampled(True, None)
    check_resampled(True, 1)
    with pytest.raises(ValueError, match=r"samples_per_epoch goes with resampled=True"):
        check_resampled(False, 5)
    with pytest.raises(ValueError, match=r"samples_per_epoch=0 must be at least 1"):
        check_resampled(True, 0)
