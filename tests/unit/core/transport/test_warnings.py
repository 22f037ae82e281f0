"""aisio's warnings given in a worker process reach the user's loop (issue #29, item 5): kept
in the worker while its deliveries carry them, pickled with the delivery, given in the
training process at the first frame outside aisio."""

from __future__ import annotations

import multiprocessing
import pickle
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from aisio.core.faults import policy
from aisio.core.faults.errors import ShardFormatError
from aisio.core.faults.policy import warn_in_user_code
from aisio.core.transport.delivery import Delivery, Failure, give_warnings, ship_errors


def _readers(fail: bool) -> Iterator[Delivery]:
    warn_in_user_code("first shard bad")
    yield Delivery([1], [(0, 0, 10, True)])
    warn_in_user_code("second shard bad")
    if fail:
        raise ShardFormatError("cut", url="ais://b/s.tar")


def _in_a_worker(fail: bool, out: Any) -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        items = list(ship_errors(_readers(fail), warnings=True))
    out.send((pickle.dumps(items), [str(w.message) for w in seen]))


@pytest.mark.parametrize("fail", [False, True])
def test_a_workers_warnings_travel_with_its_deliveries_to_the_users_loop(fail: bool) -> None:
    context = multiprocessing.get_context("fork")
    here, there = context.Pipe()
    worker = context.Process(target=_in_a_worker, args=(fail, there))
    worker.start()
    items, warned_there = here.recv()
    worker.join(10)
    assert warned_there == []  # nothing given in the worker
    first, last = pickle.loads(items)
    assert [m for _, m in first.warned] == ["first shard bad"]
    assert [m for _, m in last.warned] == ["second shard bad"]
    assert isinstance(last, Failure) if fail else last.empty
    with warnings.catch_warnings(record=True) as given:
        warnings.simplefilter("always")
        for item in (first, last):
            give_warnings(item)
    assert [str(w.message) for w in given] == ["first shard bad", "second shard bad"]
    assert given[0].filename == __file__  # this frame: the first outside aisio


def test_in_the_training_process_a_warning_is_given_at_once() -> None:
    with pytest.warns(UserWarning, match="shard bad"):
        items = list(ship_errors(_readers(False), warnings=True))
    assert all(not item.warned for item in items)


@pytest.mark.parametrize("fail", [False, True])
def test_in_a_worker_warnings_ride_with_the_items_and_the_last_on_an_empty_delivery(
        fail: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the forked test above checks of the items, in this process taken for a worker
    (so that it also runs where that one cannot, under mutation testing): each warning rides
    with the item made while it was given, those after the last item with the failure or on
    an empty delivery that names no sample and holds nothing to yield; none is given here."""
    monkeypatch.setattr(policy.multiprocessing, "parent_process", lambda: object())
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        items = list(ship_errors(_readers(fail), warnings=True))
    assert seen == []
    first, last = pickle.loads(pickle.dumps(items))
    assert first.warned == ((UserWarning, "first shard bad"),)
    assert last.warned == ((UserWarning, "second shard bad"),)
    if fail:
        assert type(last) is Failure and type(last.error) is ShardFormatError
    else:
        assert type(last) is Delivery and last.empty is True
        assert last.value is None and list(last.positions) == []


def test_a_deliverys_carried_warnings_are_given_with_their_category_and_text() -> None:
    """What a worker warned reaches the user's loop as it was warned (the travelling test
    above runs a real worker and checks where; this checks what, in process)."""
    item = Delivery([1], [(0, 0, 512, False)], False, None,
                    ((RuntimeWarning, "shard 1 skipped"), (UserWarning, "uneven")))
    with warnings.catch_warnings(record=True) as given:
        warnings.simplefilter("always")
        give_warnings(item)
        give_warnings(object())  # (nothing carried)
    assert [(w.category, str(w.message)) for w in given] == [
        (RuntimeWarning, "shard 1 skipped"), (UserWarning, "uneven")]
