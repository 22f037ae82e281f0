"""The ``aisio`` command: explore buckets and shards, run a local AIStore.

``ls``, ``stat``, ``get``, ``cat``, ``head``, ``preview``, ``put``, ``playground`` and ``etl``
(:mod:`aisio.tools.etl_cli`). The
endpoint comes from ``--endpoint``, else ``AIS_ENDPOINT``, else the running default
playground. User mistakes end in one line on stderr
naming the fix and a non-zero exit (2 for a misused command line, 1 for the rest), never a
traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, NoReturn

from aisio.core.faults.errors import AISIOError, skipped_reason
from aisio.core.store.config import AISConfig
from aisio.playground import Playground, build_node, default_playground_dir
from aisio.tools.args import endpoint_config, positive
from aisio.tools.display import Progress, human_bytes, iso_time, text_table

if TYPE_CHECKING:
    from aisio.core.store.client import ObjectReader
    from aisio.tools.preview import Samples

_CHUNK = 1 << 20


class _Fail(Exception):
    """A user-facing failure that is not an AISIOError (one line, exit 1)."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line: the problem and where help is."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"aisio: error: {message} (see `{self.prog} --help`)\n")


# ---- commands ---------------------------------------------------------------------------------
def _ls(args: argparse.Namespace) -> int:
    from aisio.tools.explore import Listing, list_buckets, ls

    config = endpoint_config(args)
    if not args.sources:
        for name in list_buckets(config=config):
            print(name)
        return 0
    listing = Listing(" ".join(args.sources), [])
    advice: list[str] = []
    with Progress("listing", unit="objects") as bar:
        for source in args.sources:  # several when the shell expanded an unquoted template
            left = None if args.limit is None else args.limit - listing.count
            if left is not None and left <= 0:
                listing.truncated = True
                break
            part = ls(source, config=config, long=args.long, limit=left, on_page=bar.update)
            listing.entries += part.entries
            listing.missing += part.missing
            listing.truncated |= part.truncated
            advice += [part.advice] if part.advice else []
    print(json.dumps(listing.to_json(), indent=2) if args.json else repr(listing))
    if listing.missing:
        shown = ", ".join(listing.missing[:10])
        more = f" and {len(listing.missing) - 10} more" if len(listing.missing) > 10 else ""
        raise _Fail(f"{len(listing.missing)} name(s) of the template do not exist: {shown}{more}"
                    f"; {'; '.join(advice) or 'fix the range or upload them'}")
    return 0


def _stat(args: argparse.Namespace) -> int:
    from aisio.tools.explore import stat

    props = stat(args.object, config=endpoint_config(args))
    if args.json:
        doc: dict[str, object] = {**props, "name": args.object}
        if props.get("size", "").isdigit():
            doc["size"] = int(props["size"])
        print(json.dumps(doc, indent=2))
        return 0
    size = props.get("size", "")
    if size.isdigit():
        props["size"] = f"{size} ({human_bytes(int(size))})"
    if "atime" in props:
        props["atime"] = iso_time(props["atime"])
    props.pop("name", None)
    rows = [["name", args.object], *([k, v] for k, v in sorted(props.items()))]
    print(text_table(["PROPERTY", "VALUE"], rows))
    return 0


def _open(args: argparse.Namespace) -> ObjectReader:
    """Returns a stream over the object ``args`` names (errors before any byte is written)."""
    from aisio.core.store.client import client_for
    from aisio.core.store.etl import read_url
    from aisio.core.store.sources import one_object
    from aisio.core.store.suggest import explained
    from aisio.core.store.urls import to_etl

    path = one_object(args.object)
    client = client_for(endpoint_config(args))
    etl = to_etl(args.etl)
    return explained(client, path, lambda: client.open(read_url(client.endpoint, path, etl),
                                                       name=path.uri(), etl=etl))


def _pump(stream: ObjectReader, out: IO[bytes], label: str) -> int:
    """Copies ``stream`` into ``out`` in chunks with a progress bar; returns the bytes copied."""
    copied = 0
    try:
        with Progress(label, total=stream.size) as bar:
            while chunk := stream.read(_CHUNK):
                out.write(chunk)
                copied += len(chunk)
                bar.update(len(chunk))
    finally:
        stream.close()
    out.flush()
    return copied


def _get(args: argparse.Namespace) -> int:
    name = args.object.rstrip("/").rsplit("/", 1)[-1]
    stream = _open(args)
    if args.dest == "-":
        _pump(stream, sys.stdout.buffer, "get")
        return 0
    dest = Path(args.dest) if args.dest else Path(name)
    if dest.is_dir():
        dest = dest / name
    part = dest.with_name(dest.name + ".part")
    try:
        with open(part, "wb") as fh:
            copied = _pump(stream, fh, "get")
        os.replace(part, dest)
    except OSError as exc:
        stream.close()
        raise _Fail(f"cannot write {dest}: {exc.strerror or exc}; choose another destination"
                    ) from exc
    finally:
        part.unlink(missing_ok=True)
    print(f"{args.object} -> {dest} ({human_bytes(copied)})")
    return 0


def _cat(args: argparse.Namespace) -> int:
    _pump(_open(args), sys.stdout.buffer, "cat")
    return 0


def _head(args: argparse.Namespace) -> int:
    from aisio.tools.preview import dumps, head

    views = head(args.shard, args.n, config=endpoint_config(args), etl=args.etl)
    if args.json:
        print(dumps(views))
    else:
        rows = [[v.key, ", ".join(f"{k} {human_bytes(n)}" for k, n in v.sizes().items()),
                 v.label() or ""] for v in views]
        print(text_table(["KEY", "FIELDS", "LABEL"], rows))
        print(f"{len(views)} sample(s) from the start of {args.shard}")
    return _unreadable_rest(views, args.shard)


def _unreadable_rest(views: Samples, shard: str) -> int:
    """Says on stderr where a shard stopped being readable (exit 1), after what was shown."""
    if views.problem is None:
        return 0
    print(f"aisio: error: only {len(views)} sample(s) of {shard} could be read: "
          f"{_said(views.problem)}", file=sys.stderr)
    return 1


def _said(error: BaseException | str) -> str:
    """Returns an error's message as the command says it: on one line, whatever the server
    put in its answer (an HTML page, say), and with the library's advice turned into what a
    user of the command can do (no ``on_error='skip'``: the command has no such option)."""
    text = " ".join(skipped_reason(error).split())
    text = text.replace("re-upload the shard", "re-upload the shard (`aisio put FILE SHARD`)")
    return text.replace("or drop etl=", "or drop --etl")


def _preview(args: argparse.Namespace) -> int:
    from aisio.tools.grid import image_format, render_grid, save_image
    from aisio.tools.preview import head

    image_format(args.output)  # refuse an extension no image format has before any read
    views = head(args.shard, args.n, config=endpoint_config(args), etl=args.etl)
    fields = args.field or None
    if not any(v.image_fields() for v in views) and fields is None:
        found = sorted({f for v in views for f in v.fields})
        raise _Fail(f"the first {len(views)} sample(s) of {args.shard} have no image field "
                    f"(fields: {', '.join(found) or 'none'}); name one with --field")
    grid = render_grid(views, image_fields=fields, label_field=args.label, cols=args.cols,
                       cell=2 * args.dpi)
    try:
        fmt = save_image(grid.image, args.output)
    except OSError as exc:
        raise _Fail(f"cannot write {args.output}: {exc.strerror or exc}") from exc
    print(f"wrote {args.output} ({fmt}): {grid.cells} image(s) of {len(views)} sample(s) of "
          f"{args.shard}")
    for bad in grid.unreadable:
        print(f"aisio: marked in the grid, does not decode: {bad}", file=sys.stderr)
    return _unreadable_rest(views, args.shard)


def _playground(args: argparse.Namespace) -> int:
    pg = Playground(args.dir, ntargets=getattr(args, "targets", None),
                    nproxies=getattr(args, "proxies", None),
                    mountpaths=getattr(args, "mountpaths", 1))
    if args.action == "up":
        endpoint = pg.up(timeout=args.timeout)
        print(f"export AIS_ENDPOINT={endpoint}")
    elif args.action == "down":
        pg.down(wipe=args.wipe)
    elif args.action == "build":
        print(build_node())
    elif args.action == "bucket":
        _redundancy(pg, args)
    else:
        status = pg.status()
        print(json.dumps(status, indent=2))
        return 0 if status.get("ready") else 1
    return 0


def _redundancy(pg: Playground, args: argparse.Namespace) -> None:
    """``aisio playground bucket ais://b --ec D:P --mirror N [--wait]``."""
    ec = None
    if args.ec:
        try:
            data, parity = (int(x) for x in args.ec.split(":"))
        except ValueError:
            raise _Fail(f"--ec {args.ec!r} is not DATA:PARITY, e.g. --ec 1:1") from None
        ec = (data, parity)
    if not pg.running_nodes():
        raise _Fail(f"no playground runs in {pg.root}: `aisio playground up --dir {pg.root}`")
    pg.make_redundant(args.bucket, ec=ec, mirror=args.mirror)
    if ec and args.wait:
        pg.wait_ec(args.bucket, timeout=args.timeout)
    print(f"{args.bucket}: " + ", ".join(
        ([f"erasure coded {ec[0]}:{ec[1]}"] if ec else [])
        + ([f"{args.mirror} copies on each target"] if args.mirror else [])))


# ---- diagnosis ------------------------------------------------------------------------------
def _endpoint_of(argv: Sequence[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg == "--endpoint" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--endpoint="):
            return arg.split("=", 1)[1]
    return AISConfig.from_env().endpoint


def _endpoint_problem(argv: Sequence[str], exc: AISIOError) -> str | None:
    """Returns a sentence naming what is wrong with the endpoint itself, when ``exc`` comes
    from talking to something that is not an AIStore proxy (None: the endpoint is fine)."""
    from urllib.parse import urlsplit

    import requests

    if exc.status is None and "TLS" not in str(exc) and "SSL" not in str(exc):
        return None
    try:
        endpoint = _endpoint_of(argv)
    except AISIOError:  # a malformed endpoint: the original error says so
        return None
    if not endpoint:
        return None
    parts = urlsplit(endpoint)
    where = f"--endpoint {endpoint}" if "--endpoint" in " ".join(argv) else (
        f"AIS_ENDPOINT={endpoint}")
    if parts.scheme == "https" and exc.status is None:
        try:
            requests.get(f"http://{parts.netloc}/v1/health", timeout=3, allow_redirects=False)
        except requests.RequestException:
            return None
        return (f"the server at {parts.netloc} speaks plain HTTP, not HTTPS; use "
                f"http://{parts.netloc} ({where})")
    try:
        with warnings.catch_warnings():  # verify=False: only asking whether it is an AIStore
            warnings.simplefilter("ignore")
            answer = requests.get(f"{endpoint.rstrip('/')}/v1/health", timeout=3,
                                  allow_redirects=False, verify=False)
    except requests.RequestException:
        return None
    if answer.ok:
        return _target_problem(endpoint, where)  # an AIStore node: a proxy, or a target?
    kind = answer.headers.get("Content-Type", "").split(";")[0] or "no content type"
    return (f"{endpoint} is not an AIStore endpoint: GET /v1/health answered HTTP "
            f"{answer.status_code} ({kind}); check {where} (`aisio playground status "
            "[--dir DIR]` shows a local cluster's endpoint)")


def _target_problem(endpoint: str, where: str) -> str | None:
    """Returns a sentence when ``endpoint`` is an AIStore target rather than a proxy (targets
    serve reads, but refuse listings with "invalid UUID"), naming the cluster's proxy."""
    import requests

    base = endpoint.rstrip("/")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            node = requests.get(f"{base}/v1/daemon", params={"what": "snode"}, timeout=3,
                                verify=False).json()
            if node.get("daemon_type") != "target":
                return None
            smap = requests.get(f"{base}/v1/daemon", params={"what": "smap"}, timeout=3,
                                verify=False).json()
    except (requests.RequestException, ValueError, AttributeError):
        return None
    proxy = ((smap or {}).get("proxy_si") or {}).get("public_net", {}).get("direct_url")
    use = f"use the proxy, {proxy}" if proxy else "use a proxy's URL"
    return (f"{endpoint} is an AIStore storage target, not a proxy (the gateway aisio talks "
            f"to): {use} ({where})")


# ---- parser -----------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="aisio", description="AIStore for PyTorch: explore buckets and shards.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = _Parser(add_help=False)
    common.add_argument("--endpoint", metavar="URL",
                        help="AIStore proxy URL (default: $AIS_ENDPOINT)")

    def add(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=help, parents=[common])

    p = add("ls", "list buckets, or the objects of a bucket, prefix or brace template")
    p.add_argument("sources", nargs="*", metavar="SOURCE",
                   help="ais://bucket[/prefix] or 'ais://b/s-{0..9}.tar' (quote templates); "
                   "none: list the buckets")
    p.add_argument("-l", "--long", action="store_true", help="add version, checksum, atime")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--limit", type=positive, help="stop after N objects")
    p.set_defaults(func=_ls)

    p = add("stat", "show an object's properties")
    p.add_argument("object", help="ais://bucket/object")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_stat)

    for name, what in (("get", "download an object to a file"),
                       ("cat", "write an object to stdout")):
        p = add(name, what)
        p.add_argument("object", help="ais://bucket/object")
        if name == "get":
            p.add_argument("dest", nargs="?", help="file or directory (default: the object's "
                           "name here; '-': stdout)")
        p.add_argument("--etl", help="read the object through this ETL")
        p.set_defaults(func=_get if name == "get" else _cat)

    p = add("head", "show the first samples of a shard: keys, fields and sizes")
    p.add_argument("shard", help="ais://bucket/shard.tar")
    p.add_argument("-n", type=positive, default=5, help="samples (default 5)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--etl", help="read the shard through this ETL")
    p.set_defaults(func=_head)

    p = add("preview", "render the images of a shard's first samples to an image grid")
    p.add_argument("shard", help="ais://bucket/shard.tar")
    p.add_argument("-o", "--output", default="preview.png",
                   help="image file; its extension picks the format: .png, .jpg, .webp, ... "
                   "(default %(default)s)")
    p.add_argument("-n", type=positive, default=16, help="samples (default 16)")
    p.add_argument("--field", action="append", help="image field(s) to draw (default: all)")
    p.add_argument("--label", help="label field (default: cls, class, label or txt)")
    p.add_argument("--cols", type=positive, help="images per row (default up to 8)")
    p.add_argument("--dpi", type=positive, default=100,
                   help="resolution: cells of 2 x DPI pixels (default 100)")
    p.add_argument("--etl", help="read the shard through this ETL")
    p.set_defaults(func=_preview)

    from aisio.tools.put import add_command as add_put  # its own module: `aisio put`

    add_put(add)

    pg = sub.add_parser("playground", help="run a local AIStore (proxies and targets) on "
                        "127.0.0.1; it keeps its data between down and up")
    pg_sub = pg.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = pg_sub.add_parser(
        "up",
        help="build the node if needed, start the cluster (again: same ports and data), print "
        '`export AIS_ENDPOINT=...` (use: eval "$(aisio playground up)")',
    )
    up.add_argument("--targets", type=positive,
                    help="storage targets (default: as many as it had, else 1)")
    up.add_argument("--proxies", type=positive,
                    help="proxies; another is elected primary when the primary dies "
                    "(default: as many as it had, else 1)")
    up.add_argument("--mountpaths", type=positive, default=1,
                    help="mountpaths per new target (mirroring needs one per copy; default 1)")
    up.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for readiness")
    down = pg_sub.add_parser("down", help="stop the cluster; its buckets and objects stay for "
                             "the next `up` unless --wipe")
    down.add_argument("--wipe", action="store_true",
                      help="also delete its data and logs (otherwise kept for the next `up`)")
    pg_sub.add_parser("status", help="print the endpoints and every node (role, primary, alive, "
                                     "in the cluster map) as JSON")
    pg_sub.add_parser("build", help="build the AIStore node with `go install` if not cached; "
                                    "print its path")
    bucket = pg_sub.add_parser("bucket", help="make a bucket of the playground redundant: "
                               "erasure coding (needs DATA+PARITY+1 targets) or mirroring")
    bucket.add_argument("bucket", help="ais://bucket (it must exist)")
    bucket.add_argument("--ec", metavar="DATA:PARITY", help="erasure code, e.g. 1:1")
    bucket.add_argument("--mirror", type=positive, metavar="N",
                        help="N copies on each target's own mountpaths")
    bucket.add_argument("--wait", action="store_true",
                        help="with --ec: return once every object's slices are written")
    bucket.add_argument("--timeout", type=float, default=120.0, help="seconds --wait waits")
    for p in pg_sub.choices.values():
        p.add_argument("--dir", type=Path, default=default_playground_dir(),
                       help="the playground's directory (default %(default)s)")
    pg.set_defaults(func=_playground)

    from aisio.tools.etl_cli import add_etl_commands

    add_etl_commands(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the ``aisio`` command; returns the exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(args_list)
        return int(args.func(args))
    except (AISIOError, _Fail) as exc:
        diagnosis = _endpoint_problem(args_list, exc) if isinstance(exc, AISIOError) else None
        print(f"aisio: error: {_said(diagnosis or exc)}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (`aisio cat ... | head`): not an error; silence the final flush.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # a local file or directory the user named: one line, no traceback
        print(f"aisio: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("aisio: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
