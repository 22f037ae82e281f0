"""#41 item 6: a loader with more reading workers than shards says so once, when it is built,
with the option that helps (building opens no socket: the shards are a template)."""

from __future__ import annotations

import warnings

import pytest

import aisio
from tests.conftest import LOADERS

SEVEN = "ais://b/shapes-{0000..0006}.tar"
READERS = [name for name in LOADERS if name != "nodes"]  # nodes reads in the training process


@pytest.mark.parametrize("loader", READERS)
def test_more_workers_than_shards_warns_once_naming_the_fix(loader: str) -> None:
    with pytest.warns(UserWarning) as caught:
        made = LOADERS[loader](SEVEN, url="http://127.0.0.1:9", num_workers=10, batch_size=4)
    try:
        [idle] = [w for w in caught if "no shard to read" in str(w.message)]
        said = str(idle.message)
        assert "7 shard(s) for 10 reading worker(s): 3 worker(s) will have no shard" in said
        assert "num_workers=7" in said and "at least 10 shards" in said
        assert idle.filename == __file__  # the user's line, not aisio's
    finally:
        made.shutdown()


@pytest.mark.parametrize("loader", READERS)
def test_more_workers_than_streams_warns_in_the_deterministic_order(loader: str) -> None:
    with pytest.warns(UserWarning) as caught:
        made = LOADERS[loader](SEVEN, url="http://127.0.0.1:9", num_workers=4, batch_size=4,
                               order="deterministic", streams=2)
    try:
        [idle] = [w for w in caught if "no stream to read" in str(w.message)]
        said = str(idle.message)
        assert "2 stream(s) for 4 reading worker(s): 2 worker(s) will have no stream" in said
        assert "num_workers=2" in said and "streams=4 or more" in said
    finally:
        made.shutdown()


@pytest.mark.parametrize("options", [{"num_workers": 7}, {"num_workers": 2},
                                     {"num_workers": 10, "resampled": True}])
def test_as_many_shards_as_workers_or_resampling_says_nothing(options: dict[str, int]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.filterwarnings("ignore", "This DataLoader will create", UserWarning)
        made = aisio.webdataset_dataloader(SEVEN, url="http://127.0.0.1:9", batch_size=4,
                                           **options)
    made.shutdown()
