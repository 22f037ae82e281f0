"""DataLoader2's round robin as aisio patches it, against a scripted worker (the real one is
killed in tests/integration/core/transport/test_ring.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import deque
from typing import Any

import pytest

from aisio.core.faults.errors import WorkerDiedError

pytest.importorskip("torchdata.dataloader2", reason="DataLoader2 needs torchdata <= 0.9")
from aisio.datapipes import mpfix


class _Protocol:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    def waiting_for_response(self) -> bool:
        return True

    def request_next(self) -> None:
        pass

    def get_response_next(self, block: bool = False, timeout: float | None = None) -> Any:
        raise self.error


class _Pipe:
    def __init__(self, error: BaseException) -> None:
        self.protocol = _Protocol(error)


class _Killed:
    pid = 4242
    exitcode = -signal.SIGKILL

    def join(self, timeout: float | None = None) -> None:
        pass


class _Running(_Killed):
    exitcode = None


class _RoundRobin:
    def __init__(self, error: BaseException) -> None:
        self._num_processes = 1
        self.datapipes = [_Pipe(error)]
        self.res_buffers = [deque()]
        self._limit = None
        self._request_cnt = 0
        self._terminated = False


@pytest.mark.parametrize("error", [ConnectionResetError(104, "reset"), EOFError(),
                                   FileNotFoundError(2, "gone")])
def test_an_answer_that_cannot_be_unpickled_from_a_killed_worker_is_its_death(
        error: BaseException) -> None:
    """A worker SIGKILLed while passing a shared-memory handle leaves an answer whose
    unpickling fails (the handle's socket is gone): that is the worker's death, not a
    ConnectionResetError from torchdata's prefetcher."""
    robin = _RoundRobin(error)
    mpfix._PROCESSES[id(robin)] = [_Killed()]
    try:
        with pytest.raises(WorkerDiedError, match="SIGKILL") as info:
            next(mpfix._round_robin(robin))
        assert info.value.pid == 4242 and info.value.__cause__ is error
    finally:
        del mpfix._PROCESSES[id(robin)]


def test_the_same_error_from_a_live_worker_is_raised_as_it_is() -> None:
    robin = _RoundRobin(ConnectionResetError(104, "reset"))
    mpfix._PROCESSES[id(robin)] = [_Running()]
    try:
        with pytest.raises(ConnectionResetError):
            next(mpfix._round_robin(robin))
    finally:
        del mpfix._PROCESSES[id(robin)]


def test_the_fix_reaches_a_dataloader2_imported_after_aisio_datapipes() -> None:
    """Building an aisio DataPipe leaves torchdata's DataLoader2 unimported (a fresh job on
    another front end never pays for it); importing it afterwards installs the fix."""
    code = """
import sys
import aisio
from aisio.datapipes.base import IterableWrapper
aisio.AISFileLoader(IterableWrapper(["ais://b/s.tar"]), url="http://127.0.0.1:9")
print("torchdata.dataloader2" in sys.modules)
from torchdata.dataloader2 import MultiProcessingReadingService
from torchdata.dataloader2.communication.iter import _IterateQueueDataPipes
print(_IterateQueueDataPipes.__iter__.__name__, MultiProcessingReadingService.initialize.__name__)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "_round_robin", "_initialize"]
