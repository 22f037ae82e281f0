"""The ``aisio`` command: ``aisio playground up | down | status`` (more subcommands to come).

User mistakes end in one line on stderr naming the fix and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from aisio._errors import AISIOError
from aisio._playground import Playground, default_playground_dir


def _playground(args: argparse.Namespace) -> int:
    pg = Playground(args.dir, ntargets=getattr(args, "targets", 1))
    if args.action == "up":
        endpoint = pg.up(timeout=args.timeout)
        print(f"export AIS_ENDPOINT={endpoint}")
    elif args.action == "down":
        pg.down(wipe=args.wipe)
    else:
        status = pg.status()
        print(json.dumps(status, indent=2))
        return 0 if status.get("ready") else 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aisio", description="AIStore for PyTorch.")
    sub = parser.add_subparsers(dest="command", required=True)
    pg = sub.add_parser("playground", help="run a local AIStore (1 proxy, N targets) on 127.0.0.1")
    pg_sub = pg.add_subparsers(dest="action", required=True)
    up = pg_sub.add_parser(
        "up",
        help="build the node if needed, start the cluster, print `export AIS_ENDPOINT=...` "
        '(use: eval "$(aisio playground up)")',
    )
    up.add_argument("--targets", type=int, default=1, help="storage targets (default 1)")
    up.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for readiness")
    down = pg_sub.add_parser("down", help="stop the cluster")
    down.add_argument("--wipe", action="store_true", help="also delete its data and logs")
    pg_sub.add_parser("status", help="print endpoint and node liveness as JSON")
    for p in pg_sub.choices.values():
        p.add_argument("--dir", type=Path, default=default_playground_dir(),
                       help="the playground's directory (default %(default)s)")
    pg.set_defaults(func=_playground)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except AISIOError as exc:
        print(f"aisio: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
