"""Resolving sources (AIS names, prefixes, templates, HTTP URLs, SDK objects) into objects."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from aisio.core.client import Client
from aisio.core.errors import InvalidURLError, ObjectNotFoundError
from aisio.core.sdk import sdk_paths
from aisio.core.urls import AISPath, expand_template, parse_ais_url, parse_object_url

#: How many missing names an error message lists before it says "and N more".
_SHOW_MISSING = 10


def as_sources(sources: Any) -> list[Any]:
    """Returns ``sources`` as a list: one source alone, or any iterable of them."""
    if isinstance(sources, (str, bytes)) or not isinstance(sources, Iterable):
        return [sources]
    if hasattr(sources, "list_names") or hasattr(sources, "list_objects_iter"):
        return [sources]  # an SDK ObjectGroup or Bucket is one source, not a collection
    return list(sources)


def to_paths(source: Any) -> list[AISPath]:
    """Returns the AIS paths a source names (templates still unexpanded)."""
    if isinstance(source, AISPath):
        return [source]
    if isinstance(source, str):
        if source.startswith(("http://", "https://")):
            return [parse_object_url(source)[1]]
        return [parse_ais_url(source)]
    paths = sdk_paths(source)
    if paths is None:
        raise InvalidURLError(
            f"source {source!r} is not an AIS name ('ais://bucket/prefix'), an object URL or an "
            "aistore Bucket/ObjectGroup/Object",
            url=repr(source),
        )
    return paths


def one_object(name: str) -> AISPath:
    """Returns the path of an AIS name that must name exactly one object (no prefix, template).

    Raises:
        InvalidURLError: ``name`` is malformed, or names a bucket, a prefix or a template.
    """
    path = parse_ais_url(name)
    if not path.obj or path.obj.endswith("/") or path.is_template:
        raise InvalidURLError(
            f"{name} is not one object; name a single object such as 'ais://bucket/shard-0.tar' "
            "(list a prefix or template with AISFileLister or `aisio ls`)",
            url=name,
        )
    return path


def expand(path: AISPath) -> Iterator[AISPath]:
    """Yields the paths of a template's expansion (the path itself when it is no template)."""
    if not path.is_template:
        yield path
        return
    for name in expand_template(path.obj, url=path.uri()):
        yield AISPath(path.bucket, name)


def list_prefix(
    client: Client, path: AISPath, *, props: str = "name", page_size: int | None = None
) -> Iterator[tuple[AISPath, dict[str, Any]]]:
    """Yields every object under the path's prefix with its listed properties."""
    for entry in client.list_objects(path.bucket, path.obj, props=props, page_size=page_size):
        yield AISPath(path.bucket, entry["name"]), entry


def missing_objects(client: Client, paths: Sequence[AISPath]) -> list[AISPath]:
    """Returns which of ``paths`` (all in one bucket) do not exist, with one listing."""
    if not paths:
        return []
    prefix = os.path.commonprefix([p.obj for p in paths])  # noqa: RUF071 - string prefix wanted
    present = {entry["name"] for entry in client.list_objects(paths[0].bucket, prefix)}
    return [p for p in paths if p.obj not in present]


def check_template(client: Client, template: AISPath) -> list[AISPath]:
    """Returns the template's expansion, or raises ObjectNotFoundError naming every missing one."""
    paths = list(expand(template))
    missing = missing_objects(client, paths)
    if missing:
        shown = ", ".join(p.obj for p in missing[:_SHOW_MISSING])
        more = f" and {len(missing) - _SHOW_MISSING} more" if len(missing) > _SHOW_MISSING else ""
        raise ObjectNotFoundError(
            f"template {template.uri()} names {len(missing)} object(s) that do not exist: "
            f"{shown}{more}; fix the range or upload them",
            url=template.uri(),
            missing=tuple(p.uri() for p in missing),
        )
    return paths


def prefixes_for(source: Any, prefix_map: Mapping[Any, str | Sequence[str]] | None) -> list[str]:
    """Returns the prefixes ``prefix_map`` gives a source (``[""]`` when it gives none)."""
    if not prefix_map:
        return [""]
    try:
        found = prefix_map.get(source)
    except TypeError:  # unhashable source
        found = None
    if found is None:
        return [""]
    return [found] if isinstance(found, str) else list(found)
