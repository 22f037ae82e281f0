"""A playground of any shape and the cluster's events (issue #38): 2 proxies and 3 targets in a
directory of the module's; every node joins, a proxy is added; an erasure-coded bucket survives
a killed target; a target is added, goes into maintenance and back, is decommissioned; a new
primary is elected when the primary dies; the whole comes back after down and up. The tests
run in this order on one cluster, each leaving it whole."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from aisio import AISConfig
from aisio.core.store.client import Client, client_for
from aisio.core.store.urls import AISPath, Bucket
from aisio.playground import Playground

pytestmark = pytest.mark.long  # a 5-node cluster for a few minutes: make test-long

WAIT = 90.0  # every wait on the cluster is bounded by this


@pytest.fixture(scope="module")
def pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Playground]:
    playground = Playground(tmp_path_factory.mktemp("pg-events"), ntargets=3, nproxies=2)
    playground.up()
    try:
        yield playground
    finally:
        playground.down(wipe=True, quiet=True)


def client(pg: Playground) -> Client:
    return client_for(AISConfig(endpoint=pg.primary().url, max_retries=10, backoff=0.2))


def until(check: Callable[[], bool], what: str, timeout: float = WAIT) -> float:
    """Returns the seconds until ``check()`` held; fails the test after ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if check():
            return time.monotonic() - start
        time.sleep(0.2)
    pytest.fail(f"not within {timeout} s: {what}")


def in_map(pg: Playground, name: str) -> bool:
    smap = pg.smap()
    return pg.node(name).sid in {**smap["pmap"], **smap["tmap"]}


def flags(pg: Playground, name: str) -> int:
    smap = pg.smap()
    return int({**smap["pmap"], **smap["tmap"]}[pg.node(name).sid]["flags"])


def read_all(pg: Playground, bucket: Bucket, objects: dict[str, bytes]) -> dict[str, bytes]:
    c = client(pg)
    return {name: c.get_bytes(AISPath(bucket, name)) for name in objects}


@pytest.fixture(scope="module")
def objects(pg: Playground) -> dict[str, bytes]:
    """A bucket ``events`` of 12 objects, a third above EC's objsize_limit (sliced)."""
    data = {f"o{i:02d}": bytes([i]) * (300_000 if i % 3 == 0 else 1000) for i in range(12)}
    c = client(pg)
    c.create_bucket(Bucket("events"))
    for name, body in data.items():
        c.put_object(AISPath(Bucket("events"), name), body)
    return data


def test_every_node_joins(pg: Playground) -> None:
    smap = pg.smap()
    assert [n.name for n in pg.nodes] == ["proxy0", "proxy1", "target0", "target1", "target2"]
    assert len(smap["pmap"]) == 2 and len(smap["tmap"]) == 3
    assert {n.sid for n in pg.nodes} == set(smap["pmap"]) | set(smap["tmap"])
    assert pg.primary().name == "proxy0" and smap["proxy_si"]["daemon_id"] == pg.node("proxy0").sid
    assert pg.endpoints == [pg.node("proxy0").url, pg.node("proxy1").url] and (
        pg.endpoint == pg.node("proxy0").url)
    status = pg.status()
    assert [(n["name"], n["role"], n["primary"], n["alive"]) for n in status["nodes"]] == [
        ("proxy0", "proxy", True, True), ("proxy1", "proxy", False, True),
        ("target0", "target", False, True), ("target1", "target", False, True),
        ("target2", "target", False, True)]


def test_a_proxy_is_added(pg: Playground) -> None:
    node = pg.add_proxy(timeout=WAIT)
    assert node.name == "proxy2" and node.sid in pg.smap()["pmap"]
    assert pg.endpoints == [pg.node(f"proxy{i}").url for i in range(3)]
    assert pg.primary().name == "proxy0"  # a proxy that joins is not primary


def test_an_erasure_coded_bucket_survives_a_killed_target(pg: Playground,
                                                          objects: dict[str, bytes]) -> None:
    pg.make_redundant("ais://events", ec=(1, 1))
    # EC encodes in the background after each PUT: existing objects are encoded by the
    # bucket's ec-encode job; until every object is protected, killing a target may lose one.
    pg.wait_ec("ais://events", timeout=WAIT)
    assert pg.unprotected("events") == []
    victim = pg.kill("target1")
    took = until(lambda: not in_map(pg, "target1"), "the map to drop the killed target1")
    print(f"\nSIGKILLed {victim.name} left the cluster map after {took:.1f} s")
    assert read_all(pg, Bucket("events"), objects) == objects
    pg.restart("target1", timeout=WAIT)
    assert in_map(pg, "target1")
    pg.wait_rebalance(WAIT)


def test_a_target_is_added(pg: Playground, objects: dict[str, bytes]) -> None:
    node = pg.add_target(timeout=WAIT)
    assert node.name == "target3" and node.sid and in_map(pg, "target3")
    pg.wait_rebalance(WAIT)
    assert read_all(pg, Bucket("events"), objects) == objects


def test_maintenance_on_and_off(pg: Playground, objects: dict[str, bytes]) -> None:
    pg.start_maintenance("target3")
    assert flags(pg, "target3") & 4  # in maintenance, still in the map
    pg.wait_rebalance(WAIT)
    assert read_all(pg, Bucket("events"), objects) == objects
    pg.stop_maintenance("target3")
    until(lambda: not flags(pg, "target3") & 4, "target3 to leave maintenance")
    pg.wait_rebalance(WAIT)
    assert read_all(pg, Bucket("events"), objects) == objects


def test_decommission(pg: Playground, objects: dict[str, bytes]) -> None:
    sid = pg.node("target3").sid
    pg.decommission("target3", timeout=WAIT)
    assert "target3" not in [n.name for n in pg.nodes]
    assert sid not in pg.smap()["tmap"]
    pg.wait_rebalance(WAIT)
    assert read_all(pg, Bucket("events"), objects) == objects


def test_a_new_primary_is_elected_when_the_primary_dies(pg: Playground,
                                                        objects: dict[str, bytes]) -> None:
    old = pg.primary()
    pg.kill(old.name)
    took = until(lambda: pg.primary().name != old.name, "a new primary")
    print(f"\na new primary ({pg.primary().name}) {took:.1f} s after {old.name} was SIGKILLed")
    pg.wait_ready(WAIT)
    new = pg.primary()
    assert new.role == "proxy" and new.name != old.name
    assert pg.endpoints[0] == new.url
    assert read_all(pg, Bucket("events"), objects) == objects  # through the new primary
    pg.restart(old.name, timeout=WAIT)  # it comes back as a non-primary proxy
    assert in_map(pg, old.name) and pg.primary().name == new.name


def test_the_shape_and_events_come_back_after_down_and_up(pg: Playground,
                                                          objects: dict[str, bytes]) -> None:
    """The whole cluster stopped and started again: same nodes (target3 decommissioned, so
    gone), same ids, the primary of the last map, every object."""
    sids = {n.name: n.sid for n in pg.nodes}
    primary = pg.primary().name
    pg.down()
    again = Playground(pg.root)
    again.up(timeout=WAIT)
    try:
        assert {n.name: n.sid for n in again.nodes} == sids
        assert again.primary().name == primary
        assert read_all(again, Bucket("events"), objects) == objects
    finally:
        again.down(quiet=True)  # the module's fixture wipes it
