"""EpochPlan: what the training process publishes reaches copies of the plan in other processes
(a pickled copy stands for a worker's), and the temporary file goes with the plan."""

from __future__ import annotations

import gc
import pickle

from aisio.core.epochs.plan import EpochPlan


def test_a_copy_in_a_worker_reads_every_later_publication() -> None:
    plan = EpochPlan.temporary()
    worker_copy = pickle.loads(pickle.dumps(plan))
    assert worker_copy.read() == (0, None)
    state = {"epoch": 4, "delivered": 12, "partial": {"3": [1, 512, [], None]}}
    plan.publish(4, state)
    assert worker_copy.read() == (4, state)
    plan.publish(5, None)
    assert worker_copy.read() == (5, None)


def test_an_in_memory_plan_serves_one_process() -> None:
    plan = EpochPlan()
    plan.publish(2, None)
    assert plan.read() == (2, None) and plan.path is None


def test_the_file_is_removed_with_the_plan() -> None:
    plan = EpochPlan.temporary()
    path = plan.path
    assert path is not None and path.exists()
    del plan
    gc.collect()
    assert not path.exists()


def test_before_anything_is_published_the_plan_is_epoch_0_from_its_start() -> None:
    """A pipe iterated without a loader (aisio.datapipes) reads its own plan unpublished:
    that is epoch 0, not resumed (epoch 1 would be another shard and sample order)."""
    assert EpochPlan().read() == (0, None)
    assert EpochPlan.temporary().read() == (0, None)
