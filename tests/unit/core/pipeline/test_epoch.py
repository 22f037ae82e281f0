"""Tests for aisio.core.pipeline.epoch: one reader's epoch, framework-free, over shards held in
memory (``Store`` of tests/unit/core/order/test_streams.py, opened in place of the cluster).

The readers are what every front end runs in its workers; here they run in this process,
their items interleaved as a loader's workers' are, under the one loader class. Each epoch must
deliver every sample once, whatever the workers; a resume from ``state_dict()`` must deliver
exactly the rest; the small generators must each work on a plain list.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import pytest

from aisio.core.epochs.plan import EpochPlan
from aisio.core.faults.policy import SKIPPED
from aisio.core.pipeline.epoch import (
    FastReader,
    ResampledReader,
    drop_last,
    reader_rng,
    shuffle,
)
from aisio.core.pipeline.fetch import Fetcher
from aisio.core.pipeline.loop import FastOrder, ResumableLoader
from aisio.core.pipeline.spec import PipelineSpec
from aisio.core.transport.delivery import Delivery
from tests.unit.core.order.test_streams import Store, interleave

SIZES = [7, 3, 9, 5, 6, 4]
STORE = Store(SIZES, 5)
ALL = sorted(key for i in range(len(SIZES)) for key in STORE.samples(i))


@pytest.fixture(autouse=True)
def _in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Fetcher, "open", lambda self, ref, **kw: STORE.open(ref, **kw))


def _collate(values: list[Any]) -> list[Any]:
    return list(values)


def loader(workers: int, **options: Any) -> ResumableLoader:
    """A loader whose ``workers`` readers run here, their deliveries interleaved."""
    spec = PipelineSpec.build(endpoint="http://127.0.0.1:9", tuple_fields="__key__",
                              **options)
    plan = EpochPlan()
    reader = FastReader(tuple(STORE.refs), spec, 3, plan, collate=_collate)

    def open_epoch(epoch: int, state: dict[str, Any] | None) -> Iterator[Any]:
        plan.publish(epoch, state)
        return interleave([reader.read(w, workers) for w in range(workers)], None)

    return ResumableLoader(FastOrder(STORE.refs, seed=3), open_epoch=open_epoch,
                           report=spec.report)


def keys(items: list[Any]) -> list[str]:
    """The sample keys of what a loader yielded (batches of 1-tuples, or 1-tuples)."""
    out: list[str] = []
    for item in items:
        for value in (item if isinstance(item, list) else [item]):
            out.append(value[0])
    return out


@pytest.mark.parametrize("workers", [1, 2, 4])
@pytest.mark.parametrize("options", [{}, {"batch_size": 4},
                                     {"batch_size": 4, "shuffle_buffer": 0},
                                     {"shuffle_buffer": 5, "decode_threads": 2}])
def test_an_epoch_delivers_every_sample_once_whatever_the_workers(
        workers: int, options: dict[str, Any]) -> None:
    run = loader(workers, **options)
    first, second = keys(list(run)), keys(list(run))
    assert sorted(first) == sorted(second) == ALL
    assert first != second  # each epoch reshuffled


@pytest.mark.parametrize("options", [{"batch_size": 4}, {"batch_size": 4, "shuffle_buffer": 0}])
def test_a_resume_delivers_exactly_the_rest_on_other_workers(options: dict[str, Any]) -> None:
    run = loader(2, **options)
    batches = iter(run)
    seen = keys([next(batches) for _ in range(3)])
    state = json.loads(json.dumps(run.state_dict()))
    resumed = loader(3, **options)
    resumed.load_state_dict(state)
    rest = keys(list(resumed))
    assert sorted(seen + rest) == ALL


def test_drop_last_keeps_the_positions_of_the_short_batch() -> None:
    run = loader(2, batch_size=4, drop_last=True)
    finished: list[dict[str, Any]] = []
    run.on_finish = lambda epoch, state: finished.append(state)
    got = list(run)
    assert all(len(batch) == 4 for batch in got) and len(keys(got)) < len(ALL)
    assert finished[0]["done"] == [[0, len(SIZES) - 1]]  # every position arrived


def test_the_small_generators_work_on_plain_lists() -> None:
    triples = [(i, (0, i, 10 * i, False), None) for i in range(5)]
    assert [v for v, _, _ in drop_last(triples, 2)] == [0, 1, 2, 3, SKIPPED]
    assert list(shuffle([1, 2, 3], 0, random.Random(0))) == [1, 2, 3]
    assert sorted(shuffle(range(10), 3, reader_rng(1, 0, 0, 0))) == list(range(10))
    assert reader_rng(1, 0, 0, 0).random() != reader_rng(1, 0, 0, 1).random()


def test_a_resampled_reader_splits_the_ranks_samples_across_its_readers() -> None:
    spec = PipelineSpec.build(endpoint="http://127.0.0.1:9", tuple_fields="__key__",
                              batch_size=3, shuffle_buffer=0)
    plan = EpochPlan()
    reader = ResampledReader(tuple(STORE.refs), spec, 3, plan, samples_per_epoch=10,
                             collate=_collate)
    got = [list(reader.read(w, 3)) for w in range(3)]
    assert [sum(len(batch) for batch in batches) for batches in got] == [4, 3, 3]
    assert not any(isinstance(batch, Delivery) for batches in got for batch in batches)
    assert got[0] == list(reader.read(0, 3))  # the same draw for the same reader and epoch
