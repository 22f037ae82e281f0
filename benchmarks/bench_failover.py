"""How long a 3-target playground takes to notice a SIGKILLed target (until the primary's
cluster map drops it) and to elect a new primary when the primary proxy is SIGKILLed, with the
playground's keepalive settings or, with ``--aistore-defaults``, AIStore's own (what a real
cluster runs and what the playground ran before). Printed, one line per round::

    .venv/bin/python -m benchmarks.bench_failover --rounds 2
    .venv/bin/python -m benchmarks.bench_failover --rounds 2 --aistore-defaults

Each round starts a playground of 2 proxies and 3 targets in a temporary directory and stops
and wipes it; every wait is bounded by ``--timeout``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

import aisio.playground._base as base
from aisio.playground import Playground


def _aistore_keepalive(*args: Any, **kwargs: Any) -> dict[str, Any]:
    config = ORIGINAL(*args, **kwargs)
    config["keepalivetracker"] = {}  # zeros: AIStore's defaults (10 s, 3 retries, factor 4)
    return config


ORIGINAL = base.cluster_config


def _until(check: Any, timeout: float) -> float | None:
    """Returns the seconds until ``check()`` held, None if it did not within ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if check():
            return time.monotonic() - start
        time.sleep(0.1)
    return None


def one_round(timeout: float) -> tuple[float | None, float | None]:
    with tempfile.TemporaryDirectory(prefix="aisio-failover-") as tmp:
        pg = Playground(tmp, ntargets=3, nproxies=2, log=lambda _: None)
        pg.up()
        try:
            victim = pg.kill("target2")
            dropped = _until(lambda: victim.sid not in pg.smap()["tmap"], timeout)
            old = pg.primary()
            pg.kill(old.name)

            def elected() -> bool:
                try:
                    return pg.primary().name != old.name
                except Exception:  # no proxy answers for a moment
                    return False

            return dropped, _until(elected, timeout)
        finally:
            pg.down(wipe=True, quiet=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=90.0)
    parser.add_argument("--aistore-defaults", action="store_true",
                        help="AIStore's keepalive settings instead of the playground's")
    args = parser.parse_args()
    if args.aistore_defaults:
        base.cluster_config = _aistore_keepalive
    settings = "AIStore's defaults" if args.aistore_defaults else "the playground's"
    for i in range(args.rounds):
        dropped, elected = one_round(args.timeout)
        fmt = lambda s: "not within the timeout" if s is None else f"{s:.1f} s"  # noqa: E731
        print(f"round {i + 1} ({settings} keepalive): SIGKILLed target out of the map after "
              f"{fmt(dropped)}; new primary after {fmt(elected)}", flush=True)


if __name__ == "__main__":
    main()
