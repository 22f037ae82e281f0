"""``aisio etl``: start an AIStore SDK ETL class, list and stop ETLs, look at one transformed shard.

``init FILE:CLASS --name N`` serves the class as a local process beside a cluster on this machine
(:mod:`aisio.localetl`), or deploys it with the SDK's ``Etl.init_class`` (``hpull``) on a remote
cluster, which needs AIStore on Kubernetes. ``ls`` lists both kinds, ``stop N`` stops one, and
``show N ais://b/shard.tar`` prints the first samples of the original and of the transformed
object side by side.
"""

from __future__ import annotations

import argparse
import io
from typing import Any

from aisio.core.faults.errors import AISIOError
from aisio.core.store.config import AISConfig
from aisio.core.store.etl import all_local_etls, is_loopback, local_etls
from aisio.core.store.translate import error_from_exception
from aisio.core.store.urls import ETL
from aisio.tools.args import endpoint_config, positive
from aisio.tools.display import human_bytes, text_table


def add_etl_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """Adds ``aisio etl ...`` to the ``aisio`` command's subparsers."""

    etl = sub.add_parser("etl", help="run an AIStore SDK ETL class locally or on the cluster; "
                         "list, stop, show", description=__doc__.splitlines()[0])
    actions = etl.add_subparsers(dest="action", required=True, metavar="ACTION")
    init = actions.add_parser(
        "init", parents=[common], help="start FILE:CLASS (an SDK ETLServer subclass) as ETL NAME: "
        "a local process for a cluster on this machine, Etl.init_class on any other")
    init.add_argument("source", metavar="FILE:CLASS",
                      help="e.g. examples/etl_resize.py:ResizeShards")
    init.add_argument("--name", required=True, help="the ETL's name, as reads name it")
    where = init.add_mutually_exclusive_group()
    where.add_argument("--local", dest="where", action="store_const", const="local",
                       help="run it as a local process (the default on 127.0.0.1)")
    where.add_argument("--cluster", dest="where", action="store_const", const="cluster",
                       help="deploy it on the cluster (needs AIStore on Kubernetes; the default "
                       "for a remote endpoint)")
    init.add_argument("--replace", action="store_true", help="stop a local ETL of that name first")
    actions.add_parser("ls", parents=[common], help="list local ETLs and the cluster's ETLs")
    stop = actions.add_parser("stop", parents=[common], help="stop an ETL")
    stop.add_argument("name")
    show = actions.add_parser("show", parents=[common],
                              help="the first samples of a shard, original beside transformed")
    show.add_argument("name", help="the ETL's name")
    show.add_argument("shard", help="ais://bucket/shard.tar")
    show.add_argument("-n", type=positive, default=5, help="samples (default 5)")
    show.add_argument("--args", dest="etl_args", help="etl_args to pass to the transform")
    etl.set_defaults(func=_etl)


def _etl(args: argparse.Namespace) -> int:

    config = endpoint_config(args)
    assert config.endpoint
    return {"init": _init, "ls": _ls, "stop": _stop, "show": _show}[args.action](args, config)


def _init(args: argparse.Namespace, config: AISConfig) -> int:
    from aisio import localetl

    endpoint = config.require_endpoint()
    ETL(args.name)  # a bad name fails before anything starts
    where = args.where or ("local" if is_loopback(endpoint) else "cluster")
    if where == "local":
        entry = localetl.start(args.source, args.name, endpoint, config=config,
                               replace=args.replace)
        print(f"local ETL {entry.name!r} serves {entry.source} at {entry.url} (pid {entry.pid}) "
              f"for {endpoint}; log: {entry.log}")
        return 0
    cls = _load_class(args.source)
    try:
        _sdk_client(config).etl(args.name).init_class(comm_type="hpull")(cls)
    except Exception as exc:
        raise error_from_exception(exc, url=endpoint, what=f"starting ETL {args.name!r} on") \
            from exc
    print(f"ETL {args.name!r} ({args.source}) started on the cluster at {endpoint}")
    return 0


def _load_class(source: str) -> type:
    import importlib.util
    import sys

    from aisio.localetl import split_source

    file, name = split_source(source)
    sys.path.insert(0, str(file.parent))
    spec = importlib.util.spec_from_file_location(file.stem, file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[file.stem] = module
    spec.loader.exec_module(module)
    cls = getattr(module, name, None)
    if not isinstance(cls, type):
        raise AISIOError(f"{file} defines no class {name}; name the ETL class as FILE:CLASS")
    return cls


def _sdk_client(config: AISConfig) -> Any:
    from aistore.sdk import Client

    return Client(config.require_endpoint(), skip_verify=config.skip_verify,
                  ca_cert=config.ca_cert, token=config.token)


def _cluster_etls(config: AISConfig) -> list[str] | str:
    """Returns the cluster's running ETLs, or why it has none."""
    try:
        return [info.id for info in _sdk_client(config).cluster().list_etls()]
    except Exception as exc:
        if getattr(exc, "status_code", None) == 501:
            return "none: built without ETL support (HTTP 501)"
        return f"unknown: {' '.join(str(error_from_exception(exc, url='', what='')).split())}"


def _ls(args: argparse.Namespace, config: AISConfig) -> int:
    endpoint = config.require_endpoint()
    rows = [[e.name, "local", e.url, str(e.pid), e.source] for e in local_etls(endpoint).values()]
    others = [e for e in all_local_etls() if e.endpoint != endpoint]
    found = _cluster_etls(config)
    if isinstance(found, list):
        rows += [[name, "cluster", endpoint, "", ""] for name in found]
    if rows:
        print(text_table(["NAME", "WHERE", "SERVES AT", "PID", "SOURCE"], rows))
    else:
        print(f"no ETL for {endpoint}")
    if isinstance(found, str):
        print(f"cluster ETLs at {endpoint}: {found}")
    for e in others:
        print(f"(local ETL {e.name!r} of another cluster, {e.endpoint}: pid {e.pid})")
    return 0


def _stop(args: argparse.Namespace, config: AISConfig) -> int:
    from aisio import localetl

    endpoint = config.require_endpoint()
    if localetl.stop(endpoint, args.name):
        print(f"stopped local ETL {args.name!r}")
        return 0
    try:
        _sdk_client(config).etl(args.name).stop()
    except Exception as exc:
        raise error_from_exception(exc, url=endpoint, what=f"stopping ETL {args.name!r} on") \
            from exc
    print(f"stopped ETL {args.name!r} on the cluster")
    return 0


def _describe(fields: dict[str, bytes]) -> str:
    """Returns ``jpg 32x32 RGB 1.2 KiB, cls 1 B``: sizes, and the dimensions and mode (``RGB``,
    ``L``: what a grayscale transform changes) of images."""
    from aisio.tools.preview import is_image_field

    parts = []
    for name, data in fields.items():
        dims = ""
        if is_image_field(name):
            try:
                from PIL import Image

                with Image.open(io.BytesIO(data)) as image:
                    dims = f" {image.width}x{image.height} {image.mode}"
            except Exception:  # an undecodable image is shown by its size alone
                dims = " (not an image)"
        parts.append(f"{name}{dims} {human_bytes(len(data))}")
    return ", ".join(parts)


def _show(args: argparse.Namespace, config: AISConfig) -> int:
    from aisio.tools.preview import head

    etl = ETL(args.name, args.etl_args)
    before = head(args.shard, args.n, config=config)
    after = head(args.shard, args.n, config=config, etl=etl)
    rows = []
    for i in range(max(len(before), len(after))):
        left = before[i] if i < len(before) else None
        right = after[i] if i < len(after) else None
        key = left.key if left is not None else right.key if right is not None else ""
        rows.append([key, _describe(left.fields) if left else "",
                     _describe(right.fields) if right else ""])
    print(text_table(["KEY", "ORIGINAL", f"THROUGH ETL {args.name}"], rows))
    print(f"{len(after)} transformed sample(s) of {args.shard} (original: {len(before)})")
    return 0
