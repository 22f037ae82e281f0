"""The ranks of a job agree on the shard list (aisio.runtime.setup.agree_on_shards): rank 0 lists
a bucket or prefix once for every rank; lists that need no listing are checked equal; ranks
given different shards fail together with a ConfigError naming the difference; an error on
rank 0 reaches every rank. The ranks here are threads over a fake group (the real gloo job is
tests/integration/test_shard_agreement.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from aisio import ConfigError, ObjectNotFoundError
from aisio.core.store.sources import ObjectRef, Source, shard_list
from aisio.core.store.urls import AISPath, Bucket
from aisio.runtime.setup import agree_on_shards

BUCKET = Bucket("b")


class ThreadRanks:
    """Rank ``rank`` of ``world`` threads: the two collectives of :class:`aisio.runtime.setup.Ranks`
    over shared slots and a barrier (which breaks, rather than waits for ever, when the ranks
    do not make the same calls)."""

    def __init__(self, rank: int, world: int, shared: dict[str, Any]) -> None:
        self.rank, self.world, self.shared = rank, world, shared
        self.calls: list[str] = []

    def _step(self, key: str, value: Any) -> dict[int, Any]:
        self.calls.append(key)
        barrier: threading.Barrier = self.shared["barrier"]
        self.shared.setdefault(f"{key}{len(self.calls)}", {})[self.rank] = value
        barrier.wait()
        seen = dict(self.shared[f"{key}{len(self.calls)}"])
        barrier.wait()
        return seen

    def broadcast(self, value: Any) -> Any:
        return self._step("broadcast", value)[0]

    def flags(self, flag: bool) -> list[bool]:
        seen = self._step("flags", flag)
        return [seen[rank] for rank in range(self.world)]


def _names(*numbers: int) -> list[ObjectRef]:
    return [ObjectRef(AISPath(BUCKET, f"s-{n}.tar")) for n in numbers]


def _run(sources: list[Any], listings: list[list[ObjectRef]] | None = None
         ) -> tuple[list[Any], list[int], list[list[str]]]:
    """Runs ``agree_on_shards`` on one thread per rank (rank r given ``sources[r]``; a prefix
    "listed" on rank r as ``listings[r]``); returns each rank's result or error, how often each
    rank listed, and each rank's collectives."""
    world = len(sources)
    shared: dict[str, Any] = {"barrier": threading.Barrier(world, timeout=30)}
    ranks = [ThreadRanks(r, world, shared) for r in range(world)]
    results: list[Any] = [None] * world
    listed = [0] * world

    def lister(rank: int) -> Callable[[list[Source]], list[ObjectRef]]:
        def shards(resolved: list[Source]) -> list[ObjectRef]:
            if any(source.kind == "prefix" for source in resolved):
                listed[rank] += 1
                assert listings is not None
                if isinstance(listings[rank], Exception):
                    raise listings[rank]
                return list(listings[rank])
            return shard_list(resolved, None)

        return shards

    def run(rank: int) -> None:
        try:
            results[rank] = agree_on_shards(sources[rank], lister(rank), ranks[rank])
        except Exception as exc:
            results[rank] = exc

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    return results, listed, [r.calls for r in ranks]


def test_rank_zero_lists_a_prefix_once_for_every_rank() -> None:
    # rank 1 would list one object fewer (another moment, another listing): it does not list
    results, listed, calls = _run(["ais://b/train/"] * 2, [_names(0, 1, 2), _names(0, 1)])
    assert results == [_names(0, 1, 2)] * 2
    assert listed == [1, 0]
    assert calls == [["broadcast", "flags"]] * 2


def test_lists_that_need_no_listing_are_expanded_by_each_rank_and_agree() -> None:
    results, listed, calls = _run(["ais://b/s-{0..3}.tar"] * 3)
    assert results == [_names(0, 1, 2, 3)] * 3
    assert listed == [0, 0, 0]
    assert calls == [["broadcast", "flags"]] * 3


def test_ranks_given_other_shards_fail_together_naming_the_difference() -> None:
    results, _, calls = _run(["ais://b/s-{0..3}.tar", "ais://b/s-{0..2}.tar",
                              "ais://b/s-{0..3}.tar"])
    assert all(isinstance(r, ConfigError) for r in results), results
    assert "rank 1's shards are not rank 0's: 1 only on rank 0 (ais://b/s-3.tar);" in str(
        results[1])
    assert "rank 1 was given other shards than rank 0 (4 shard(s))" in str(results[0])
    assert str(results[2]) == str(results[0])
    assert calls == [["broadcast", "flags", "broadcast"]] * 3


def test_the_same_names_in_another_order_are_another_list() -> None:
    results, _, _ = _run([["ais://b/s-0.tar", "ais://b/s-1.tar"],
                          ["ais://b/s-1.tar", "ais://b/s-0.tar"]])
    assert all(isinstance(r, ConfigError) for r in results)
    assert "the same 2 names in another order" in str(results[1])


def test_ranks_given_another_prefix_fail_without_listing_it() -> None:
    results, listed, _ = _run(["ais://b/train/", "ais://b/val/"], [_names(0, 1), _names(7)])
    assert all(isinstance(r, ConfigError) for r in results)
    assert "rank 1 was given ais://b/val/ where rank 0 was given ais://b/train/" in str(
        results[1])
    assert listed == [1, 0]
    results, listed, _ = _run(["ais://b/s-{0..1}.tar", "ais://b/train/"], [[], _names(0, 1)])
    assert all(isinstance(r, ConfigError) for r in results)
    assert "rank 1 was given a bucket or prefix to list" in str(results[1])
    assert listed == [0, 0]


def test_an_error_on_rank_zero_reaches_every_rank() -> None:
    missing = ObjectNotFoundError("there are no objects under ais://b/train/",
                                  url="ais://b/train/")
    results, _, calls = _run(["ais://b/train/"] * 2, [missing, []])
    assert results[0] is missing
    assert isinstance(results[1], ObjectNotFoundError) and str(results[1]) == str(missing)
    assert calls == [["broadcast"]] * 2


def test_a_bad_source_on_another_rank_fails_every_rank() -> None:
    results, _, _ = _run(["ais://b/s-{0..1}.tar", "ftp://b/s.tar"])
    assert isinstance(results[0], ConfigError) and "rank 1 was given" in str(results[0])
    assert not isinstance(results[1], ConfigError) and "ftp://b/s.tar" in str(results[1])


def test_one_process_lists_alone() -> None:
    assert agree_on_shards("ais://b/s-{0..1}.tar", lambda s: shard_list(s, None),
                           None) == _names(0, 1)


def test_one_rank_makes_no_collective() -> None:
    results, _, calls = _run(["ais://b/s-{0..1}.tar"])
    assert results == [_names(0, 1)] and calls == [[]]
