"""Tests for aisio.core.transport.delivery's Failure: an aisio error raised in a worker,
sent on as an item (the items themselves: tests/unit/core/epochs/test_progress.py)."""

from __future__ import annotations

import multiprocessing
import os
import pickle

import pytest

import aisio
from aisio.core.transport.delivery import Failure


def raise_in_a_worker() -> aisio.ShardFormatError:
    try:
        raise aisio.ShardFormatError("s.tar is truncated", url="ais://b/s.tar", offset=512)
    except aisio.ShardFormatError as exc:
        return exc


def test_a_failure_in_the_training_process_is_the_error_alone() -> None:
    error = raise_in_a_worker()
    failure = Failure.of(error)
    assert failure.error is error and failure.traceback is None
    assert not hasattr(error, "__notes__")


def test_a_failure_in_a_worker_notes_where_and_carries_its_traceback_as_text(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # as in a worker process: multiprocessing names a parent
    monkeypatch.setattr(multiprocessing, "parent_process", lambda: object())
    error = raise_in_a_worker()
    error.__notes__ = ["a note of its own"]
    failure = pickle.loads(pickle.dumps(Failure.of(error)))
    where = f"worker process {os.getpid()}"
    assert failure.error.__notes__ == ["a note of its own", f"raised in {where}"]
    assert (failure.error.url, failure.error.offset) == ("ais://b/s.tar", 512)
    text = failure.traceback
    assert text is not None and text.startswith(f"in {where}:\nTraceback")
    assert "raise_in_a_worker" in text and "ShardFormatError: s.tar is truncated" in text
