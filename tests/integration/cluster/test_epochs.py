"""An epoch read while the cluster changes under it (issue #38): 2 proxies and 3 targets of a
playground of this module's; the event happens between two batches, in the training loop's
thread, while the loader's workers go on reading; each test leaves the cluster whole again.

Each: every sample exactly once, and in ``order="deterministic"`` the batches of a run on the
cluster before the event. ``make test`` runs one loader and order per event (the ``PROFILE``);
``make test-long`` every loader in both orders.
"""

from __future__ import annotations

import json
import threading
import uuid
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

import aisio
from aisio.core.store.client import Client, client_for
from aisio.core.store.urls import Bucket
from aisio.playground import Playground
from tests.conftest import LOADERS, write_shards

pytestmark = [pytest.mark.integration, pytest.mark.cluster,
              # said by every request that meets an event (a test's clean-up too: a bucket
              # destroyed through the other proxy); the tests that promise it record it
              pytest.mark.filterwarnings("ignore::aisio.ClusterWaitWarning")]

#: Seconds any wait on the cluster may take: a test that would hang fails instead.
WAIT = 120.0
#: The batch after which the event happens (10 of ~100 batches: most shards are still unread).
AT = 10

EVENTS = ("join", "maintenance", "decommission", "ec-kill", "primary-kill")
#: make test's bounded profile: one loader and order per event (each loader family once).
#: make test's bounded profile: none of this matrix (each event costs the cluster 10-60 s on 2
#: cores); make test runs the kill of a target for good, test_a_target_killed_for_good, below,
#: and the proxy failover's rule in tests/unit/core/store/test_cluster.py.
PROFILE: set[tuple[str, str, str]] = set()
CASES = [pytest.param(event, name, order, id=f"{event}-{name}-{order}",
                      marks=() if (event, name, order) in PROFILE else pytest.mark.long)
         for event in EVENTS for name in ("dataloader", "stateful", "nodes", "dataloader2")
         for order in ("fast", "deterministic")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Playground]:
    playground = Playground(tmp_path_factory.mktemp("pg-cluster"), ntargets=3, nproxies=2)
    playground.up()
    try:
        yield playground
    finally:
        playground.down(wipe=True, quiet=True)


@pytest.fixture
def pg(cluster: Playground) -> Playground:
    """The module's cluster, made whole before each test (not after: the last test's events
    are left to the cluster's end, which costs nothing)."""
    whole(cluster)
    return cluster


def whole(pg: Playground) -> None:
    """Brings the cluster back to every node alive, none in maintenance, 3 targets or more."""
    alive = {n.name for n in pg.running_nodes()}
    for node in list(pg.nodes):
        if node.name not in alive:
            pg.restart(node.name, timeout=WAIT)
    smap = pg.smap()
    for node in pg.nodes:
        entry = {**smap["pmap"], **smap["tmap"]}.get(node.sid or "")
        if entry and int(entry.get("flags", 0)) & _MAINTENANCE:
            pg.wait_rebalance(timeout=WAIT)
            pg.stop_maintenance(node.name)
    while sum(n.role == "target" for n in pg.nodes) < 3:
        pg.wait_rebalance(timeout=WAIT)  # a node joining while one runs exits (a decommission's)
        pg.add_target(timeout=WAIT)
    pg.wait_ready(timeout=WAIT)
    pg.wait_rebalance(timeout=WAIT)


_MAINTENANCE = 1 << 2  # the map's flag of a node in maintenance (AIStore's SnodeMaint)


def a_target(pg: Playground) -> str:
    return next(n.name for n in pg.nodes if n.role == "target")


def happen(pg: Playground, event: str) -> Callable[[], None]:
    """Makes ``event`` happen now; returns what to do half way through the rest of the epoch
    (a node in maintenance comes back)."""
    victim = a_target(pg)
    if event == "join":
        pg.add_target(timeout=WAIT)  # a rebalance starts and runs under the reads
    elif event == "maintenance":
        pg.start_maintenance(victim)  # a rebalance moves its objects away under the reads

        def back() -> None:
            pg.wait_rebalance(timeout=WAIT)  # the cluster refuses to stop one while it runs
            pg.stop_maintenance(victim)  # and another brings them back

        return back
    elif event == "decommission":
        pg.decommission(victim, timeout=WAIT)
    elif event == "ec-kill":
        pg.kill(victim)  # for good: the map drops it, the objects are restored from slices
    elif event == "primary-kill":
        pg.kill(pg.primary().name)  # the other proxy is elected
    return lambda: None


def shards(pg: Playground, tmp_path: Path, *, ec: bool) -> tuple[Client, Bucket, str, list[str]]:
    client = client_for(aisio.AISConfig(endpoint=pg.primary().url, max_retries=10))
    tmp_path.mkdir(parents=True, exist_ok=True)
    bucket = Bucket(f"cluster-{uuid.uuid4().hex[:8]}")
    client.create_bucket(bucket)
    if ec:
        pg.make_redundant(bucket.name, ec=(1, 1))
    template, keys = write_shards(client, bucket, tmp_path, shards=24, per_shard=30,
                                  payload=1024)
    if ec:
        pg.wait_ec(bucket.name, timeout=WAIT)
    return client, bucket, template, keys


def options(pg: Playground, order: str) -> dict[str, Any]:
    # Only the primary's address: the others are learned from the cluster's map.
    config = aisio.AISConfig(endpoint=pg.primary().url, cluster_wait=WAIT)
    return {"config": config, "tuple_fields": ("__key__",), "batch_size": 8, "num_workers": 2,
            "seed": 3, "shuffle_buffer": 16, "order": order}


def batches(loader: Any, *, at: int | None = None, then: Callable[[], Callable[[], None]]
            | None = None) -> list[list[str]]:
    """Returns every batch's keys; after batch ``at``, ``then()`` happens, and what it returns
    happens half way through the rest."""
    got: list[list[str]] = []
    later: Callable[[], None] | None = None
    try:
        for step, (keys,) in enumerate(loader):
            got.append(list(keys))
            if step == at and then is not None:
                later = then()
            if later is not None and step == 2 * at + 20:
                later()
    finally:
        loader.shutdown()
    return got


@pytest.mark.parametrize(("event", "name", "order"), CASES)
def test_an_epoch_rides_through_the_cluster_changing(pg: Playground, tmp_path: Path,
                                                     event: str, name: str,
                                                     order: str) -> None:
    if name not in LOADERS:
        pytest.skip(f"{name} is not in this environment")
    make = LOADERS[name]
    client, bucket, template, keys = shards(pg, tmp_path, ec=event == "ec-kill")
    try:
        before = batches(make(template, **options(pg, order))) if order != "fast" else None
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always", aisio.ClusterWaitWarning)
            got = batches(make(template, **options(pg, order)), at=AT,
                          then=lambda: happen(pg, event))
    finally:
        client.destroy_bucket(bucket)
    assert Counter(key for batch in got for key in batch) == Counter(keys)
    if before is not None:
        assert got == before
    assert all("cluster_wait" in str(w.message) for w in said)


@pytest.mark.long
@pytest.mark.parametrize("name", ["dataloader", "stateful"])
def test_a_checkpoint_taken_before_the_event_resumes_on_the_changed_cluster(
        pg: Playground, tmp_path: Path, name: str) -> None:
    """Saved, then a target decommissioned (its objects moved), then resumed on other workers:
    the shards in progress are read on at their byte from their new targets."""
    client, bucket, template, keys = shards(pg, tmp_path, ec=False)
    loader = LOADERS[name](template, **options(pg, "fast"))
    got: list[str] = []
    try:
        for step, (batch,) in enumerate(loader):
            got.extend(batch)
            if step == AT:
                state = json.loads(json.dumps(loader.state_dict()))
                break
        loader.shutdown()
        pg.decommission(a_target(pg), timeout=WAIT)
        resumed = LOADERS[name](template, **{**options(pg, "fast"), "num_workers": 1})
        resumed.load_state_dict(state)
        got.extend(key for batch in batches(resumed) for key in batch)
    finally:
        client.destroy_bucket(bucket)
    assert Counter(got) == Counter(keys)


def test_a_target_killed_for_good(pg: Playground, tmp_path: Path) -> None:
    """One target SIGKILLed for good while two epochs are under way. The erasure-coded
    bucket's completes, every sample once: aisio waits while the map still sends it to the
    dead target, then reads the objects restored from their slices. The bucket without
    redundancy has lost what the target held: its epoch waits ``cluster_wait`` for it (it may
    come back), then raises the typed error naming an object it held; never a skip, a
    duplicate or a hang."""
    client, coded, template, keys = shards(pg, tmp_path / "ec", ec=True)
    _, plain, plain_template, plain_keys = shards(pg, tmp_path / "plain", ec=False)
    victim = a_target(pg)
    held = {name for name in (f"shard-{i:04d}.tar" for i in range(24))
            if _target_of(pg, plain, name) == pg.node(victim).url}
    short = aisio.AISConfig(endpoint=pg.primary().url, cluster_wait=10)
    safe = LOADERS["dataloader"](template, **options(pg, "fast"))
    lost = LOADERS["dataloader"](plain_template, **{**options(pg, "fast"), "config": short})
    got: list[str] = []
    lost_got: list[str] = []
    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always", aisio.ClusterWaitWarning)
            safe_batches, lost_batches = iter(safe), iter(lost)
            for _ in range(AT):  # both epochs under way, their templates checked
                got.extend(next(safe_batches)[0])
                lost_got.extend(next(lost_batches)[0])
            pg.kill(victim)
            got.extend(key for (batch,) in safe_batches for key in batch)
            with pytest.raises((aisio.ObjectNotFoundError, aisio.AISConnectionError)) as info:
                for (batch,) in lost_batches:
                    lost_got.extend(batch)
    finally:
        safe.shutdown()
        lost.shutdown()
        client.destroy_bucket(coded)
        client.destroy_bucket(plain)
    assert Counter(got) == Counter(keys)
    assert "waited" in str(info.value) and "cluster_wait" in str(info.value)
    assert any(name in str(info.value) for name in held), (held, str(info.value))
    assert any(issubclass(w.category, aisio.ClusterWaitWarning) for w in said)
    assert max(Counter(lost_got).values()) == 1  # what it gave before the end, once
    assert set(lost_got) <= set(plain_keys)


@pytest.mark.long
def test_a_target_that_comes_back_within_the_deadline_loses_nothing(
        pg: Playground, tmp_path: Path) -> None:
    client, bucket, template, keys = shards(pg, tmp_path, ec=False)
    victim = a_target(pg)
    back = threading.Thread(target=lambda: pg.restart(victim, timeout=WAIT))

    def kill_and_return() -> Callable[[], None]:
        pg.kill(victim)
        back.start()  # restarting takes the node seconds: the loader meets it down, then back
        return lambda: None

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", aisio.ClusterWaitWarning)
            got = batches(LOADERS["dataloader"](template, **options(pg, "fast")), at=AT,
                          then=kill_and_return)
    finally:
        if back.is_alive() or back.ident is not None:
            back.join(WAIT)
        client.destroy_bucket(bucket)
    assert Counter(key for batch in got for key in batch) == Counter(keys)


def _target_of(pg: Playground, bucket: Bucket, name: str) -> str:
    """Returns the public URL of the target the proxy sends a GET of ``name`` to."""
    answer = requests.get(f"{pg.primary().url}/v1/objects/{bucket.name}/{name}?provider=ais",
                          allow_redirects=False, timeout=10)
    return answer.headers["Location"].split("/v1/")[0]
