"""A cluster that changes: nodes join, go into maintenance and leave; rebalances run; a bucket
is made redundant (erasure coding, mirroring) and its objects' slices are waited for."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from aisio.core.faults.errors import PlaygroundError
from aisio.playground._base import READY_TIMEOUT, PlaygroundBase, _is_alive
from aisio.playground._build import build_node
from aisio.playground._config import Node, smap_nodes

REBALANCE_TIMEOUT = 120.0


class Playground(PlaygroundBase):
    """A local AIStore cluster on 127.0.0.1: ``nproxies`` proxies, ``ntargets`` targets.

    Its directory keeps the buckets and objects, the node ids and ports between :meth:`down`
    and :meth:`up` (``down(wipe=True)`` deletes them). The cluster's events are methods:
    :meth:`kill`, :meth:`restart`, :meth:`add_target`, :meth:`add_proxy`,
    :meth:`start_maintenance`, :meth:`stop_maintenance`, :meth:`decommission`,
    :meth:`wait_rebalance`, :meth:`make_redundant`, :meth:`wait_ec`.

    Args:
        root: the directory the playground owns (configs, data, logs, ``state.json``).
        ntargets: how many storage targets to start (default: as many as the directory's
            playground had, else 1).
        nproxies: how many proxies (gateways) to start; the first is the primary, and another
            is elected when the primary dies (default: as many as it had, else 1).
        tls: ``(cert.pem, key.pem)`` to serve HTTPS instead of HTTP.
        auth_secret: require AuthN tokens (HS256 JWTs signed with this secret) from clients.
        client_ca: with ``tls``, require client certificates (mutual TLS) verified by this CA
            (PEM). The nodes present ``tls``'s certificate to each other and to the
            playground's own checks, so it is trusted as a client too.
        binary: an aisnode binary to use instead of building one.
        mountpaths: mountpaths (directories) per target; ``mirror`` copies need as many.

    Example:
        >>> with Playground(tmp_dir, ntargets=3, nproxies=2) as pg:      # doctest: +SKIP
        ...     pg.kill(pg.primary().name)
        ...     pg.wait_ready(60)
        ...     print(pg.primary().name, pg.endpoints)
        proxy1 ['http://127.0.0.1:40125', 'http://127.0.0.1:40123']
    """

    def __enter__(self) -> Playground:
        self.up()
        return self

    # ---- nodes join and leave ----------------------------------------------------------------
    def add_target(self, timeout: float = READY_TIMEOUT) -> Node:
        """Starts a new target that joins the running cluster; returns it once it is in the
        cluster map (a rebalance then moves objects to it: :meth:`wait_rebalance`)."""
        with self._expect_rebalance():
            return self._add("target", self.binary or build_node(log=self.log), timeout)

    def restart(self, name: str, wait: bool = True, timeout: float = READY_TIMEOUT) -> Node:
        if not wait or self.node(name).role != "target":
            return super().restart(name, wait, timeout)
        with self._expect_rebalance():  # a target that rejoins gets its objects back
            return super().restart(name, wait, timeout)

    restart.__doc__ = PlaygroundBase.restart.__doc__

    @contextlib.contextmanager
    def _expect_rebalance(self, within: float = 10.0) -> Iterator[None]:
        """Notes the rebalance that the block's change of targets starts (so that
        :meth:`wait_rebalance` waits for it even before the primary registers it): the
        latest one, once it differs from the one before the block (waiting ``within`` s)."""
        before = (self._rebalance_status() or {}).get("uuid")
        yield
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            latest = (self._rebalance_status() or {}).get("uuid")
            if latest and latest != before:
                self._rebalances.append(str(latest))
                return
            time.sleep(0.2)

    def add_proxy(self, timeout: float = READY_TIMEOUT) -> Node:
        """Starts a new proxy that joins the running cluster; returns it once it is in the
        cluster map."""
        return self._add("proxy", self.binary or build_node(log=self.log), timeout)

    def _cluster_action(self, action: str, node: Node, **value: Any) -> str:
        """Sends ``PUT /v1/cluster {"action": action, "value": {"sid": ...}}`` to the primary;
        returns its answer (the id of the rebalance it started, if any)."""
        if not node.sid:
            self.smap()
        if not node.sid:
            raise PlaygroundError(f"{node.name} is not in the cluster map of the playground in "
                                  f"{self.root}")
        primary = self.primary()
        answer = self._call(primary.url + "/v1/cluster", "PUT",
                            {"action": action, "value": {"sid": node.sid, **value}}, timeout=30)
        if not answer.ok:
            raise PlaygroundError(f"{action} of {node.name} ({node.sid}) failed: HTTP "
                                  f"{answer.status} {answer.body.decode(errors='replace')[:300]}")
        xid = answer.body.decode().strip().strip('"')
        if xid:
            self._rebalances.append(xid)
        return xid

    def start_maintenance(self, name: str) -> str:
        """Puts a node into maintenance (the cluster moves a target's objects away and keeps
        it in the map, flagged); returns the id of the rebalance it started ("" if none)."""
        return self._cluster_action("start-maintenance", self.node(name))

    def stop_maintenance(self, name: str) -> str:
        """Takes a node out of maintenance (a rebalance brings a target's share back);
        returns the rebalance's id ("" if none)."""
        return self._cluster_action("stop-maintenance", self.node(name))

    def decommission(self, name: str, timeout: float = REBALANCE_TIMEOUT) -> None:
        """Removes a node from the cluster for good: its objects move to the others, it leaves
        the map and its process ends; the playground forgets it (its directory stays)."""
        node = self.node(name)
        self._cluster_action("decommission-node", node)
        proc = self._procs.pop(node.pid, None)  # it ends by itself: not a crash

        def gone() -> bool:
            try:
                in_map = node.sid in smap_nodes(self.smap())
            except PlaygroundError:
                in_map = True
            ended = proc.poll() is not None if proc else not _is_alive(node.pid)
            return not in_map and ended

        self._wait(gone, timeout, f"{name} to leave the cluster")
        self.nodes.remove(node)
        self._save_state()

    # ---- rebalance ---------------------------------------------------------------------------
    def _xaction_running(self, kind: str) -> bool:
        answer = self._call(self._primary_url() + "/v1/cluster?what=running_all", "GET",
                            {"kind": kind}, timeout=10)
        return not answer.ok or bool(answer.json())

    def _rebalance_status(self, xid: str = "") -> dict[str, Any] | None:
        """Returns the status of rebalance ``xid`` (default: the latest) as the primary's
        notification listeners know it (``uuid``, ``end_time``, ``aborted``), None if none."""
        query = {"kind": "rebalance", **({"id": xid} if xid else {})}
        try:
            url = self._primary_url()
        except PlaygroundError:  # no proxy runs: nobody knows of a rebalance
            return None
        answer = self._call(url + "/v1/cluster?what=status", "GET", query, timeout=10)
        status = answer.json() if answer.ok and answer.body.strip() else None
        return status if isinstance(status, dict) else None

    def _finished(self, xid: str = "") -> bool:
        """Whether rebalance ``xid`` (default: the latest, if any) has ended."""
        status = self._rebalance_status(xid)
        return status is None or bool(status.get("end_time") or status.get("aborted"))

    def wait_rebalance(self, timeout: float = REBALANCE_TIMEOUT) -> None:
        """Returns when the latest rebalance has ended and no rebalance or resilver runs on a
        target; raises :class:`PlaygroundError` after ``timeout`` seconds.

        A rebalance is registered with the primary before the targets run it, and objects
        that moved answer 404 in between: the targets' "nothing runs" alone is not the end."""
        quiet = 0

        def done() -> bool:
            nonlocal quiet
            self._rebalances[:] = [x for x in self._rebalances if not self._finished(x)]
            idle = not self._rebalances and self._finished() and not any(
                self._xaction_running(kind) for kind in ("rebalance", "resilver"))
            quiet = quiet + 1 if idle else 0
            return quiet >= 2  # twice in a row: not the gap before one starts

        self._wait(done, timeout, "the rebalance to end")

    # ---- redundancy --------------------------------------------------------------------------
    def make_redundant(self, bucket: str, ec: tuple[int, int] | None = None,
                       mirror: int | None = None) -> None:
        """Sets a bucket's redundancy: erasure coding with ``ec=(data, parity)`` slices (needs
        data + parity + 1 targets; encodes in the background after each PUT: see
        :meth:`wait_ec`) and/or ``mirror`` copies on each target's own mountpaths (needs as
        many ``mountpaths``). ``bucket`` is a name or ``ais://name``."""
        name = bucket.removeprefix("ais://").strip("/")
        value: dict[str, Any] = {}
        if ec is not None:
            data, parity = ec
            targets = [n for n in self._targets() if _is_alive(n.pid)]
            if data < 1 or parity < 1 or len(targets) < data + parity + 1:
                raise PlaygroundError(
                    f"erasure coding {data}:{parity} needs data, parity >= 1 and "
                    f"{data + parity + 1} targets; the playground in {self.root} runs "
                    f"{len(targets)} (add_target(), or `up --targets N`)")
            value["ec"] = {"enabled": True, "data_slices": data, "parity_slices": parity}
        if mirror is not None:
            if mirror < 2 or mirror > self.mountpaths:
                raise PlaygroundError(
                    f"mirror={mirror} copies need 2 <= copies <= the targets' mountpaths "
                    f"({self.mountpaths}): a new playground with more (`aisio playground up "
                    "--mountpaths N`, Playground(mountpaths=N))")
            value["mirror"] = {"enabled": True, "copies": mirror}
        if not value:
            raise PlaygroundError("make_redundant needs ec=(data, parity) or mirror=copies")
        answer = self._call(f"{self._primary_url()}/v1/buckets/{quote(name)}?provider=ais",
                            "PATCH", {"action": "set-bprops", "value": value}, timeout=30)
        if not answer.ok:
            raise PlaygroundError(f"setting the redundancy of ais://{name} failed: HTTP "
                                  f"{answer.status} {answer.body.decode(errors='replace')[:300]}")

    def bucket_props(self, bucket: str) -> dict[str, Any]:
        """Returns a bucket's properties (``HEAD /v1/buckets/<b>``, ``Ais-Bucket-Props``)."""
        name = bucket.removeprefix("ais://").strip("/")
        answer = self._call(f"{self._primary_url()}/v1/buckets/{quote(name)}?provider=ais",
                            "HEAD", timeout=10)
        props = {k.lower(): v for k, v in (answer.headers or {}).items()}.get("ais-bucket-props")
        if not answer.ok or not props:
            raise PlaygroundError(f"ais://{name} has no properties (HTTP {answer.status}): "
                                  "does the bucket exist?")
        return dict(json.loads(props))

    def _objects(self, name: str) -> dict[str, int]:
        """Returns every object of bucket ``name`` with its size."""
        found: dict[str, int] = {}
        value: dict[str, Any] = {"props": "name,size"}
        for _ in range(10_000):  # pages: bounded
            answer = self._call(f"{self._primary_url()}/v1/buckets/{quote(name)}?provider=ais",
                                "GET", {"action": "list", "value": value}, timeout=30)
            page = answer.json() if answer.ok else None
            if not isinstance(page, dict):
                raise PlaygroundError(f"listing ais://{name} failed: HTTP {answer.status}")
            for entry in page.get("entries") or []:
                found[entry["name"]] = int(entry.get("size") or 0)
            if not page.get("continuation_token"):
                break
            value = {**value, "uuid": page.get("uuid", ""),
                     "continuation_token": page["continuation_token"]}
        return found

    def unprotected(self, bucket: str) -> list[str]:
        """Returns the objects of an erasure-coded bucket whose copies or slices are not all
        written yet, from the targets' mountpaths: an object needs its EC metadata beside a
        replica or slice on parity + 1 targets (size below ``objsize_limit``: whole copies),
        else on data + parity + 1 (the object and its slices)."""
        name = bucket.removeprefix("ais://").strip("/")
        ec = self.bucket_props(name).get("ec") or {}
        if not ec.get("enabled"):
            raise PlaygroundError(f"ais://{name} is not erasure coded: make_redundant(ec=...)")
        data, parity, limit = ec["data_slices"], ec["parity_slices"], ec["objsize_limit"]
        targets = [list((self.root / n.name / "mpaths").glob("**/@ais"))
                   for n in self._targets()]
        missing = []
        for obj, size in self._objects(name).items():
            copy = limit == -1 or size < limit
            need = parity + 1 if copy else data + parity + 1
            held = sum(1 for roots in targets if _holds(roots, name, obj))
            if held < need:
                missing.append(obj)
        return missing

    def wait_ec(self, bucket: str, timeout: float = REBALANCE_TIMEOUT) -> None:
        """Returns when every object of an erasure-coded bucket has all its copies or slices
        written (:meth:`unprotected` is empty): then ``parity`` targets may die."""
        self._wait(lambda: not self.unprotected(bucket), timeout,
                   f"every object of {bucket} to be erasure coded")


def _holds(roots: list[Path], bucket: str, obj: str) -> bool:
    """Returns whether a target's mountpaths (their ``@ais`` directories) hold EC metadata
    and a replica or slice of ``obj``: ``@ais/<bucket>/%mt/<obj>`` and ``%ob`` or ``%ec``."""
    for root in roots:
        base = root / bucket
        if (base / "%mt" / obj).is_file() and (
                (base / "%ob" / obj).is_file() or (base / "%ec" / obj).is_file()):
            return True
    return False
