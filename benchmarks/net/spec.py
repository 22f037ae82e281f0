"""What ``--network`` asks for: a round trip added and a bandwidth, parsed and checked.

``none`` (or ``loopback``) is the machine's loopback, unshaped. Otherwise comma-separated
``key=value`` pairs: ``rtt=2ms`` (a whole number of milliseconds: toxiproxy's latency is in
whole ms) and ``rate=10gbit`` (``kbit``, ``mbit``, ``gbit``, as ``tc`` spells them), e.g.
``rtt=2ms,rate=10gbit``. Either may be left out (no delay; no bandwidth limit). ``sweep`` is
:data:`SWEEP`, the networks of issue #40's table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RATE = re.compile(r"([0-9]+(?:\.[0-9]+)?)(kbit|mbit|gbit|bit)")
_RATE_UNITS = {"bit": 1, "kbit": 1_000, "mbit": 1_000_000, "gbit": 1_000_000_000}
_TIME = re.compile(r"([0-9]+(?:\.[0-9]+)?)(us|ms|s)")
_TIME_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


SWEEP = ("none", "rtt=1ms,rate=10gbit", "rtt=5ms,rate=10gbit", "rtt=5ms,rate=1gbit")
"""``--network sweep``: loopback, 1 and 5 ms at 10 Gbit/s, and 5 ms at 1 Gbit/s (where the suite
adds aisio with a ShardCache)."""


class NetworkSpecError(ValueError):
    """A ``--network`` value that cannot be shaped; the message says what to write."""


@dataclass(frozen=True)
class Network:
    """A shaped path: ``rtt_ms`` added to every round trip, at most ``rate_bit`` bits/s."""

    rtt_ms: int = 0
    rate_bit: int | None = None

    @property
    def label(self) -> str:
        """The spec as ``--network`` spells it (``rtt=2ms,rate=10gbit``)."""
        parts = [f"rtt={self.rtt_ms}ms"]
        if self.rate_bit is not None:
            parts.append(f"rate={format_rate(self.rate_bit)}")
        return ",".join(parts)

    def latencies_ms(self) -> tuple[int, int]:
        """Returns the delay of each direction, ``(to the cluster, back)``: the round trip
        split in whole milliseconds, the larger half on the way back."""
        up = self.rtt_ms // 2
        return up, self.rtt_ms - up

    def toxics(self) -> list[dict[str, object]]:
        """Returns the toxiproxy toxics that add this network's delay (none for rtt=0)."""
        out: list[dict[str, object]] = []
        for stream, ms in zip(("upstream", "downstream"), self.latencies_ms(), strict=True):
            if ms:
                out.append({"name": f"latency_{stream}", "type": "latency", "stream": stream,
                            "toxicity": 1.0, "attributes": {"latency": ms, "jitter": 0}})
        return out

    def tbf(self, dev: str) -> list[str] | None:
        """Returns the ``tc`` command that limits ``dev``'s egress to the rate (None: no
        limit). The bucket holds 4 ms at the rate (at least 64 KiB), so a timer tick never
        starves it; packets wait at most 50 ms in the queue before they are dropped."""
        if self.rate_bit is None:
            return None
        burst = max(self.rate_bit // 8 * 4 // 1000, 64 * 1024)
        return ["tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate",
                f"{self.rate_bit}bit", "burst", str(burst), "latency", "50ms"]


def format_rate(bits: int) -> str:
    """Returns ``bits`` per second as ``tc`` would spell it (``10gbit``, ``1500kbit``)."""
    for unit in ("gbit", "mbit", "kbit"):
        if bits % _RATE_UNITS[unit] == 0:
            return f"{bits // _RATE_UNITS[unit]}{unit}"
    return f"{bits}bit"


def _rate(text: str) -> int:
    match = _RATE.fullmatch(text.strip().lower())
    if match is None:
        raise NetworkSpecError(f"rate={text!r} is not a rate: write e.g. rate=10gbit, "
                               "rate=500mbit (bits per second)")
    bits = float(match[1]) * _RATE_UNITS[match[2]]
    if bits < 8_000 or bits != int(bits):
        raise NetworkSpecError(f"rate={text!r}: give at least 8kbit, a whole number of bits/s")
    return int(bits)


def _rtt_ms(text: str) -> int:
    match = _TIME.fullmatch(text.strip().lower())
    if match is None:
        raise NetworkSpecError(f"rtt={text!r} is not a duration: write e.g. rtt=2ms")
    ms = float(match[1]) * _TIME_UNITS[match[2]] * 1000
    if abs(ms - round(ms)) > 1e-9:
        raise NetworkSpecError(f"rtt={text!r}: give a whole number of milliseconds (toxiproxy "
                               "delays in whole ms)")
    return round(ms)


def parse_network(text: str) -> Network | None:
    """Returns the :class:`Network` that ``text`` names, or None for ``none``/``loopback``.

    Raises:
        NetworkSpecError: a key other than rtt and rate, a repeated key, or a bad value.
    """
    text = text.strip()
    if text.lower() in ("none", "loopback", ""):
        return None
    seen: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in ("rtt", "rate"):
            raise NetworkSpecError(f"--network {text!r}: expected rtt=<ms>ms and/or "
                                   f"rate=<n>gbit|mbit|kbit, comma-separated (got {part!r}), "
                                   "or none")
        if key in seen:
            raise NetworkSpecError(f"--network {text!r}: {key} given twice")
        seen[key] = value
    return Network(rtt_ms=_rtt_ms(seen["rtt"]) if "rtt" in seen else 0,
                   rate_bit=_rate(seen["rate"]) if "rate" in seen else None)


def parse_networks(texts: list[str]) -> list[Network | None]:
    """Returns the networks ``texts`` name in order (``sweep`` expanded), each once."""
    out: list[Network | None] = []
    for text in texts:
        for one in SWEEP if text.strip().lower() == "sweep" else (text,):
            network = parse_network(one)
            if network not in out:
                out.append(network)
    return out
