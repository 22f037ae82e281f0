"""The client while the cluster changes under it (aisio.core.store.client, .cluster), against a
scripted transport and a fake clock: which failures are waited for, for how long, which proxy
is asked, and what is said.

The same against real nodes killed, restarted and put into maintenance:
tests/integration/cluster/.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import pytest
import requests

import aisio
from aisio.core.store.cluster import ClusterView, proxies_of
from aisio.core.store.urls import AISPath, Bucket, object_url
from tests.conftest import FakeClock
from tests.unit.core.store.scripted import (
    PROXY,
    TARGET,
    answer,
    redirect,
    scripted_client,
    serve,
)

OTHER = "http://proxy-b.test:8080"
OBJECT = AISPath(Bucket("b"), "train/shard-0001.tar")
AT_TARGET = object_url(TARGET, OBJECT)
DATA = bytes(range(256)) * 40
REFUSED = requests.ConnectionError("[Errno 111] Connection refused (scripted)")
GONE = answer(404, b'{"tcode":"ErrNotFound","message":"t[x]: ais://b/o does not exist"}')


def smap(*proxies: str, version: int = 7, primary: int = 0) -> bytes:
    pmap = {f"p{i}": {"public_net": {"direct_url": url}} for i, url in enumerate(proxies)}
    return json.dumps({"version": str(version), "pmap": pmap,
                       "proxy_si": {"daemon_id": f"p{primary}"}}).encode()


def answered(client: Any) -> Any:
    """Returns ``client`` as one whose cluster has answered before (a running job)."""
    client.cluster.answered = True
    return client


def hosts(transport: Any) -> list[str]:
    return [s.url.split("/v1/")[0] for s in transport.seen]


# ------------------------------------------------------------------------- a target goes away


def test_a_target_that_does_not_answer_is_waited_for_past_max_retries(clock: FakeClock) -> None:
    client, transport = scripted_client(*[redirect(AT_TARGET), REFUSED] * 6,
                                        redirect(AT_TARGET), serve(DATA), max_retries=0)
    said_as = (r"reading ais://b/train/shard-0001.tar: http://target.test:9090, where the proxy "
               r"sent the request, does not answer.*up to 120 s \(AISConfig.cluster_wait, "
               r"AISIO_CLUSTER_WAIT\)")
    with pytest.warns(aisio.ClusterWaitWarning, match=said_as) as said:
        assert client.get_bytes(OBJECT) == DATA
    assert len(said) == 1  # once for the whole wait
    # every try starts at the proxy again: the dead target's address is never asked twice running
    assert hosts(transport) == [PROXY, TARGET] * 7
    assert len(clock.slept) == 6


def test_at_the_deadline_the_error_names_the_object_and_how_long_it_waited(
        clock: FakeClock) -> None:
    client, _ = scripted_client(*[redirect(AT_TARGET), REFUSED] * 500, cluster_wait=30,
                                        backoff=0.2, backoff_max=4)
    with pytest.warns(aisio.ClusterWaitWarning), pytest.raises(
            aisio.AISConnectionError, match=r"reading ais://b/train/shard-0001.tar.*waited 30 s "
            r"for the cluster: .*target.test:9090.*AISConfig.cluster_wait or AISIO_CLUSTER_WAIT"):
        client.get_bytes(OBJECT)
    assert sum(clock.slept) == pytest.approx(30.0)  # never waits past the deadline
    assert max(clock.slept) <= 4  # backoff_max still paces the tries


def test_cluster_wait_zero_gives_up_at_the_first_failure_of_the_cluster(
        clock: FakeClock) -> None:
    client, transport = scripted_client(redirect(AT_TARGET), REFUSED, cluster_wait=0,
                                        max_retries=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(aisio.AISConnectionError):
            client.get_bytes(OBJECT)
    assert len(transport.seen) == 2 and clock.slept == []


def test_a_read_timeout_or_a_tls_failure_is_the_requests_own(clock: FakeClock) -> None:
    for failure in (requests.ReadTimeout("read timed out (scripted)"),
                    requests.exceptions.SSLError("certificate required (scripted)")):
        client, transport = scripted_client(redirect(AT_TARGET), failure, max_retries=0)
        answered(client)
        with pytest.raises(aisio.AISConnectionError):
            client.get_bytes(OBJECT)  # no wait, no warning (warnings are errors in the tests)
        assert len(transport.seen) == 2


# --------------------------------------------------------------------------------- the proxy


def test_an_endpoint_that_never_answered_fails_after_max_retries(clock: FakeClock) -> None:
    client, transport = scripted_client(REFUSED, REFUSED, max_retries=1)
    with pytest.raises(aisio.AISConnectionError, match="retries ran out") as info:
        client.get_bytes(OBJECT)
    assert "waited" not in str(info.value)  # a typo'd endpoint is not a cluster event
    assert len(transport.seen) == 2


def test_a_proxy_that_answered_before_is_waited_for_while_it_restarts(clock: FakeClock) -> None:
    client, _ = scripted_client(*[REFUSED] * 8, redirect(AT_TARGET), serve(DATA),
                                        max_retries=1)
    answered(client)
    with pytest.warns(aisio.ClusterWaitWarning, match="proxy at http://proxy.test:8080 does "
                      "not answer: it is restarting, or gone"):
        assert client.get_bytes(OBJECT) == DATA


def test_another_configured_proxy_is_asked_when_the_first_is_gone(clock: FakeClock) -> None:
    client, transport = scripted_client(REFUSED, redirect(AT_TARGET), serve(DATA),
                                        redirect(AT_TARGET), serve(DATA),
                                        endpoints=(PROXY, OTHER), max_retries=0)
    answered(client)
    with pytest.warns(aisio.ClusterWaitWarning, match="asking http://proxy-b.test:8080"):
        assert client.get_bytes(OBJECT) == DATA
    # a URL built for the first proxy (a stream's reopen) goes to the one that answers now
    assert client.get_bytes(OBJECT) == DATA
    assert hosts(transport) == [PROXY, OTHER, TARGET, OTHER, TARGET]
    assert client.endpoint == OTHER


def test_the_proxies_are_learned_from_the_map_at_the_first_listing(clock: FakeClock) -> None:
    listing = answer(200, json.dumps({"entries": [{"name": "o"}]}).encode())
    client, transport = scripted_client(answer(200, smap(PROXY, OTHER)), listing,
                                        REFUSED, redirect(AT_TARGET), serve(DATA),
                                        max_retries=0)
    client.cluster.learned = False  # as a new process's client
    assert [e["name"] for e in client.list_objects(Bucket("b"))] == ["o"]
    assert transport.seen[0].url == PROXY + "/v1/daemon?what=smap"
    assert client.cluster.proxies == [PROXY, OTHER] and client.cluster.baseline == "7"
    with pytest.warns(aisio.ClusterWaitWarning, match="asking http://proxy-b.test:8080"):
        assert client.get_bytes(OBJECT) == DATA


def test_a_new_primary_is_learned_from_a_target_when_every_proxy_known_is_gone(
        clock: FakeClock) -> None:
    # the job had only seen PROXY (its map never learned); PROXY dies; the target it was
    # redirected to before names the cluster's proxies now
    client, transport = scripted_client(redirect(AT_TARGET), serve(DATA), REFUSED,
                                        answer(200, smap(OTHER, PROXY)),
                                        redirect(AT_TARGET), serve(DATA), max_retries=0)
    assert client.get_bytes(OBJECT) == DATA
    with pytest.warns(aisio.ClusterWaitWarning, match="asking http://proxy-b.test:8080"):
        assert client.get_bytes(OBJECT) == DATA
    assert transport.seen[3].url == TARGET + "/v1/daemon?what=smap"


def test_learned_proxies_are_not_used_behind_an_endpoint_that_is_not_one_of_them() -> None:
    view = ClusterView(("http://balancer.test:80",))
    view.learn(json.loads(smap(PROXY, OTHER)))
    assert view.proxies == ["http://balancer.test:80"]  # maybe unreachable from here
    assert view.baseline == "7"


def test_the_primary_comes_first_among_the_proxies_a_map_lists() -> None:
    assert proxies_of(json.loads(smap(PROXY, OTHER, primary=1))) == [OTHER, PROXY]
    assert proxies_of({"version": "1"}) == []


# ------------------------------------------------------------------------ a 404 while changing


def test_an_object_that_answers_404_after_its_stream_broke_is_waited_for(
        clock: FakeClock) -> None:
    # the break is the stream's own failure (1 of max_retries); its reopen waits for the cluster
    client, transport = scripted_client(serve(DATA, cut_at=3000), GONE, GONE,
                                        serve(DATA), max_retries=1)
    reader = client.open(object_url(PROXY, OBJECT), name=OBJECT.uri())
    with pytest.warns(aisio.ClusterWaitWarning, match="target left the cluster map"):
        assert b"".join(iter(lambda: reader.read(4096), b"")) == DATA
    assert transport.ranges()[-1] == "bytes=3000-"


@pytest.mark.parametrize("version, waited", [(7, False), (8, True)])
def test_a_404_is_waited_for_only_when_the_map_changed_since_the_job_began(
        clock: FakeClock, version: int, waited: bool) -> None:
    client, transport = scripted_client(GONE, answer(200, smap(PROXY, version=version)),
                                        GONE, GONE, serve(DATA), max_retries=3)
    client.cluster.baseline = "7"
    if waited:
        with pytest.warns(aisio.ClusterWaitWarning):
            assert client.get_bytes(OBJECT) == DATA
    else:
        with pytest.raises(aisio.ObjectNotFoundError):
            client.get_bytes(OBJECT)
        assert len(transport.seen) == 2  # the object, the map: no retry


def test_a_404_of_a_missing_bucket_is_never_waited_for(clock: FakeClock) -> None:
    missing = answer(404, b'{"tcode":"ErrBckNotFound","message":"bucket ais://b does not exist"}')
    client, transport = scripted_client(missing, max_retries=3)
    client.cluster.event()  # even right after the cluster changed
    with pytest.raises(aisio.BucketNotFoundError):
        client.get_bytes(OBJECT)
    assert len(transport.seen) == 1

