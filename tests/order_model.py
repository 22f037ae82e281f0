"""The deterministic order's reference model, written from its definition (docs/design/order.md)
and sharing no code with aisio: the expected global sequence of ``order="deterministic"``.

* The epoch's shard order: ``0..N-1`` shuffled by ``random.Random(epoch_seed)``, where
  ``epoch_seed = random.Random(f"{seed}:{epoch}").getrandbits(63)`` (the fast order's).
* ``K`` streams: stream ``s`` reads shards ``order[s::K]``, each shard's samples in tar order.
* Each stream's buffer of ``B``: sample ``n`` of the stream is due at ``n + d(n)``; when more
  than ``B`` are held, the first due (ties: the smaller ``n``) leaves; at the stream's end the
  rest leave in that order. ``d(n)``: the stream's key is the first 8 bytes (little endian) of
  ``blake2b(f"{epoch_seed}:{s}")``; block ``n // 1024`` draws 1024 32-bit numbers ``x`` from
  ``random.Random(splitmix64(key ^ block))``, and ``d(n) = x[n % 1024] * B >> 32``.
* Round ``t``: samples ``t*q .. t*q+q-1`` (``q = G / K``) of stream 0, then of stream 1, ...

The draw is pinned here on purpose: the order a seed gives is a promise across versions, so a
change to it must show up as a failing test.
"""

from __future__ import annotations

import hashlib
import heapq
import random
from collections.abc import Sequence
from typing import TypeVar

_MASK = (1 << 64) - 1
T = TypeVar("T")


def splitmix64(value: int) -> int:
    z = (value + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def epoch_seed(seed: int, epoch: int) -> int:
    return random.Random(f"{seed}:{epoch}").getrandbits(63)


def shard_order(count: int, seed: int, epoch: int, shuffle: bool = True) -> list[int]:
    order = list(range(count))
    if shuffle:
        random.Random(epoch_seed(seed, epoch)).shuffle(order)
    return order


def delays(seed: int, epoch: int, stream: int, size: int, count: int) -> list[int]:
    """``d(0) .. d(count - 1)`` of stream ``stream``'s buffer of ``size``."""
    text = f"{epoch_seed(seed, epoch)}:{stream}".encode()
    key = int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")
    return key_delays(key, size, count)


def key_delays(key: int, size: int, count: int) -> list[int]:
    """``d(0) .. d(count - 1)`` of a buffer of ``size`` whose key is ``key``."""
    if not size:
        return [0] * count
    out: list[int] = []
    for block in range(-(-count // 1024)):
        rng = random.Random(splitmix64(key ^ block))
        out += [rng.getrandbits(32) * size >> 32 for _ in range(1024)]
    return out[:count]


def through_buffer(samples: Sequence[T], delay: Sequence[int], size: int) -> list[T]:
    """The samples of one stream in the order they leave its buffer."""
    held: list[tuple[int, int]] = []  # (due, n): the first due leaves, ties by n
    out = []
    for n in range(len(samples)):
        heapq.heappush(held, (n + delay[n], n))
        if len(held) > size:
            out.append(samples[heapq.heappop(held)[1]])
    return out + [samples[n] for _, n in sorted(held)]


def sequence(shards: Sequence[Sequence[str]], *, seed: int, epoch: int, streams: int,
             batch: int, buffer: int, shuffle_shards: bool = True) -> list[tuple[int, str]]:
    """The global sequence as ``(round, key)`` pairs; ``shards[i]``: shard ``i``'s sample keys
    in tar order (``i`` its index in the loader's shard list)."""
    order = shard_order(len(shards), seed, epoch, shuffle_shards)
    q = batch // streams
    outs = []
    for s in range(streams):
        samples = [key for index in order[s::streams] for key in shards[index]]
        outs.append(through_buffer(samples, delays(seed, epoch, s, buffer, len(samples)),
                                   buffer))
    rounds = max(-(-len(out) // q) for out in outs)
    return [(t, key) for t in range(rounds) for out in outs for key in out[t * q:(t + 1) * q]]
