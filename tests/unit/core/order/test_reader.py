"""Tests for aisio.core.order.reader's own parts; its readers over real shards are tested in
tests/unit/core/order/test_streams.py and test_loader.py.

A reader's pack of chunks crosses to the training process with its samples in shared memory
(tests/integration/core/transport/ for the real crossing): here, within one process, what
multiprocessing's pickler sends and what the receiver rebuilds from it.
"""

from __future__ import annotations

import pickle
from typing import Any

from aisio.core.order.reader import Chunk, RoundChunks, _to_another_process
from aisio.core.transport import ring as ring_module


def crossed(pack: RoundChunks, *, shared: bool) -> Any:
    """Returns ``pack`` as the receiving process rebuilds it, and checks that its samples went
    by shared memory or not."""
    rebuild, args = _to_another_process(pack)  # what ForkingPickler sends for a RoundChunks
    assert (rebuild is not RoundChunks) == shared
    if rebuild is RoundChunks:
        return rebuild(*pickle.loads(pickle.dumps(args)))
    bare, counts, shipped = args
    arrive, shipped_args = shipped.__reduce__()  # as unpickling in the receiver does
    try:
        return rebuild(pickle.loads(pickle.dumps(bare)), counts, arrive(*shipped_args))
    finally:
        ring_module._held.clear()


def fields(pack: Any) -> list[tuple[Any, ...]]:
    return [(c.stream, c.round, c.values, c.trace, c.done, c.versions) for c in pack]


def test_a_pack_crosses_with_each_chunk_keeping_its_own_samples_and_trace() -> None:
    def sample(stream: int, k: int) -> dict[str, Any]:
        return {"__key__": f"s{stream}-{k}", "jpg": bytes([stream, k]) * 8192}  # 16 KiB

    pack = RoundChunks([
        Chunk(0, 4, [sample(0, 0), sample(0, 1)], [(0, 0, 10, False), (0, 10, 20, False)],
              False),
        Chunk(1, 4, [], [], True, {3: "v3"}),  # a stream that ended with nothing this round
        Chunk(2, 4, [sample(2, k) for k in range(3)], [(5, k, k + 1, k == 2) for k in range(3)],
              False, {5: "v5"}),
        Chunk(0, 5, [sample(0, 2)], [(0, 20, 30, True)], True),
    ])
    expected = fields(pack)
    back = crossed(pack, shared=True)
    assert type(back) is RoundChunks
    assert fields(back) == expected


def test_a_small_pack_is_pickled_as_it_is() -> None:
    pack = RoundChunks([Chunk(0, 0, [{"__key__": "a", "cls": b"1"}], [(0, 0, 1, False)], True)])
    expected = fields(pack)
    back = crossed(pack, shared=False)
    assert type(back) is RoundChunks and fields(back) == expected
