"""The retry rules README.md promises, request by request through the fault proxy: timeouts are
retried; delays grow exponentially with full jitter; a (re)forming cluster is waited for 90 s
whatever ``max_retries`` says; other 400s are final.

Delays and the 90 s budget run on a fake clock (``time`` in :mod:`aisio.core.store.client`): every
request is real, no test waits for them."""

from __future__ import annotations

import json
import logging
import random

import pytest

import aisio
from aisio.core.store import client as client_module
from aisio.core.store.client import FORMING_POLL, Client, client_for
from aisio.core.store.urls import AISPath, Bucket
from tests.conftest import FakeClock
from tests.faultproxy import fault_proxy


class RecordingRandom(random.Random):
    """A seeded ``random`` whose ``uniform(a, b)`` calls are recorded with what they returned."""

    def __init__(self) -> None:
        super().__init__(0)
        self.calls: list[tuple[float, float, float]] = []

    def uniform(self, a: float, b: float) -> float:
        value = super().uniform(a, b)
        self.calls.append((a, b, value))
        return value


def _error(tcode: str, status: int = 400) -> tuple[int, bytes]:
    """An AIStore error answer: its JSON body carries the error code."""
    body = {"message": f"{tcode} (injected by the test)", "status": status, "tcode": tcode}
    return status, json.dumps(body).encode()


@pytest.fixture
def obj(ais_client: Client, bucket: Bucket) -> AISPath:
    path = AISPath(bucket, "o.bin")
    ais_client.put_object(path, b"payload" * 10_000)
    return path


def test_timeouts_are_retried(ais_endpoint: str, obj: AISPath,
                              caplog: pytest.LogCaptureFixture) -> None:
    # The first two answers stall after their headers: the read times out, the request is
    # sent again.
    with fault_proxy(ais_endpoint, stall_after=0, stall_seconds=5, max_stalls=2) as proxy:
        client = client_for(aisio.AISConfig(endpoint=proxy.endpoint, read_timeout=0.3,
                                            backoff=0.01, max_retries=3))
        with caplog.at_level(logging.DEBUG, logger="aisio"):
            assert client.get_bytes(obj) == b"payload" * 10_000
        assert (proxy.stalls, proxy.object_gets) == (2, 3)
    retries = [r.getMessage() for r in caplog.records if "retry" in r.getMessage()]
    assert len(retries) == 2 and all("timed out" in m for m in retries), retries


def test_backoff_doubles_to_its_cap_with_full_jitter(ais_endpoint: str, obj: AISPath,
                                                     clock: FakeClock,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    rng = RecordingRandom()
    monkeypatch.setattr(client_module, "random", rng)
    with fault_proxy(ais_endpoint, fail_statuses=(503,) * 7) as proxy:
        client = client_for(aisio.AISConfig(endpoint=proxy.endpoint, max_retries=7,
                                            backoff=0.2, backoff_max=1.0))
        assert client.get_bytes(obj) == b"payload" * 10_000
        assert proxy.requests == 8
    # Full jitter: each delay is drawn from [0, cap], the cap doubling from `backoff` up to
    # `backoff_max`; the delay slept is the one drawn.
    assert [(a, b) for a, b, _ in rng.calls] == [
        (0, 0.2), (0, 0.4), (0, 0.8), (0, 1.0), (0, 1.0), (0, 1.0), (0, 1.0)]
    assert clock.slept == [value for _, _, value in rng.calls]


@pytest.mark.parametrize("tcode", ["ErrNoNodes", "ErrMembershipChange"])
def test_a_forming_cluster_is_waited_for_whatever_max_retries_says(
        ais_endpoint: str, obj: AISPath, clock: FakeClock, tcode: str) -> None:
    with fault_proxy(ais_endpoint, fail_statuses=(_error(tcode),) * 12) as proxy:
        client = client_for(aisio.AISConfig(endpoint=proxy.endpoint, max_retries=0))
        with pytest.warns(aisio.ClusterWaitWarning, match="re.forming.*up to 120 s"):
            assert client.get_bytes(obj) == b"payload" * 10_000
        assert proxy.requests == 13
    assert 0 < sum(clock.slept) < client.config.cluster_wait


def test_a_forming_cluster_is_waited_for_cluster_wait_seconds_then_the_error_raised(
        ais_endpoint: str, obj: AISPath, clock: FakeClock) -> None:
    with fault_proxy(ais_endpoint, fail_statuses=(_error("ErrNoNodes"),) * 2000) as proxy:
        client = client_for(aisio.AISConfig(endpoint=proxy.endpoint, max_retries=2,
                                            cluster_wait=90))
        with pytest.warns(aisio.ClusterWaitWarning) as said, pytest.raises(
                aisio.AISRequestError, match=r"ErrNoNodes.*waited 90 s.*cluster_wait") as info:
            client.get_bytes(obj)
        assert info.value.status == 400
        sent = proxy.requests
    assert len(said) == 1  # once for the whole wait
    # Each wait is at most FORMING_POLL: the last request went out at the 90th second.
    assert max(clock.slept) <= FORMING_POLL
    assert sum(clock.slept) == pytest.approx(90.0)
    assert sent == len(clock.slept) + 1 > 90


def test_other_400s_stay_final(ais_endpoint: str, obj: AISPath, clock: FakeClock) -> None:
    with fault_proxy(ais_endpoint, fail_statuses=(_error("ErrInvalidArg"),) * 5) as proxy:
        client = client_for(aisio.AISConfig(endpoint=proxy.endpoint, max_retries=5))
        with pytest.raises(aisio.AISRequestError) as info:
            client.get_bytes(obj)
        assert info.value.status == 400
        assert proxy.requests == 1
    assert clock.slept == []
