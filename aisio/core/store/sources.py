"""The one owner of "what does this source name?": sources in, typed picklable objects out.

A *source* is anything a user may hand aisio: an AIS name (``"ais://bucket/train-0.tar"``), a
brace template (``"ais://bucket/train-{0000..0099}.tar"``), a bucket or prefix
(``"ais://bucket/train/"``), an HTTP object URL (``"http://proxy/v1/objects/b/o?provider=ais"``,
its endpoint and ETL kept), an aistore SDK ``Bucket``, ``ObjectGroup`` or ``Object``, an
:class:`~aisio.core.store.urls.AISPath`, or a list of any of these.

:func:`resolve` classifies each one, without I/O, by one rule:

========================================  ==========================================
source                                    names
========================================  ==========================================
a brace template                          its expansion (``template``)
a bucket, or a name ending in ``/``       every object under it (``prefix``)
an HTTP object URL, SDK Object/Group      exactly those objects (``object``)
SDK Bucket                                every object in it (``prefix``)
any other name, e.g. ``ais://b/x.tar``    one object (``object``); to a *lister*
                                          (``listing=True``: AISFileLister,
                                          AISSourceLister, ``aisio ls``) a name
                                          prefix, as AIStore's own listers read it
========================================  ==========================================

The rule is the same in the library and the ``aisio`` command: readers (the loaders,
AISFileLoader, ``aisio get/cat/stat/head/preview``) read a plain name as one object; listers
(AISFileLister, AISSourceLister, ``aisio ls``) list it as a prefix. When a reader's object does
not exist but other names start with it, the error says so and names the prefix
(``ais://b/train/``) or template (``ais://b/train-{0000..0007}.tar``) that was likely meant; a
missing bucket or template names the close ones that exist (every "did you mean" is made in
:mod:`aisio.core.store.suggest`, and the listings here go through it).

:func:`objects` then turns resolved sources into :class:`ObjectRef` s (templates expanded,
prefixes listed once, here); the front ends pass those on, so a name is parsed once, not in
every stage and every worker.
"""

from __future__ import annotations

import os
import re
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from aisio.core.faults.errors import (
    InvalidURLError,
    ObjectNotFoundError,
)
from aisio.core.store.etl import parse_read_url
from aisio.core.store.sdk import sdk_paths
from aisio.core.store.suggest import explained, nearest_existing
from aisio.core.store.urls import ETL, AISPath, Bucket, expand_template, parse_ais_url

if TYPE_CHECKING:
    from aisio.core.store.suggest import Lister

#: How many missing names an error message lists before it says "and N more".
_SHOW_MISSING = 10

Kind = Literal["object", "prefix", "template"]


@dataclass(frozen=True)
class ObjectRef:
    """One object to read, parsed once: its path, and the endpoint and ETL of its HTTP URL.

    Attributes:
        path: bucket and object name.
        endpoint: the endpoint its HTTP URL named (None: the configured endpoint).
        etl: the ETL its HTTP URL named (None: the reader's own ``etl=``, if any).
        name: how the user spelled it (the ``__url__`` of its samples); ``path.uri()`` if None.
    """

    path: AISPath
    endpoint: str | None = None
    etl: ETL | None = None
    name: str | None = None

    def uri(self) -> str:
        """Returns the name shown for this object: the user's spelling, else its AIS name."""
        return self.name if self.name is not None else self.path.uri()


def pack_refs(refs: Sequence[ObjectRef]) -> tuple[list[Any], list[str], array[int],
                                                  dict[int, str]]:
    """Returns a shard list in a compact form for sending to other processes (rank 0's
    listing to every rank): each ref's bucket, endpoint and ETL once in a table, a table index
    and an object name a ref, and the user's spellings where there are any. Pickling the refs
    themselves costs three objects and their dicts each: seconds at a million shards
    (benchmarks/README.md, Figures behind the code's comments).

    Example:
        >>> refs = [ObjectRef(AISPath(Bucket("b"), f"s-{i}.tar")) for i in range(3)]
        >>> unpack_refs(*pack_refs(refs)) == refs
        True
    """
    kinds: list[tuple[Bucket, str | None, ETL | None]] = []  # few; an ETL's args may be a dict
    index: array[int] = array("l")
    names: list[str] = []
    spelled: dict[int, str] = {}
    last, at_last = None, -1
    for at, ref in enumerate(refs):
        kind = (ref.path.bucket, ref.endpoint, ref.etl)
        if kind != last:
            if kind not in kinds:
                kinds.append(kind)
            last, at_last = kind, kinds.index(kind)
        index.append(at_last)
        names.append(ref.path.obj)
        if ref.name is not None:
            spelled[at] = ref.name
    return list(kinds), names, index, spelled


def unpack_refs(kinds: list[Any], names: list[str], index: array[int],
                spelled: dict[int, str]) -> list[ObjectRef]:
    """Returns the shard list :func:`pack_refs` packed."""
    return [ObjectRef(AISPath(kinds[kind][0], name), kinds[kind][1], kinds[kind][2],
                      spelled.get(at))
            for at, (kind, name) in enumerate(zip(index, names, strict=True))]


@dataclass(frozen=True)
class Source:
    """One resolved source: what kind of thing it names, and where.

    Attributes:
        path: bucket and object name, prefix or template.
        kind: ``"object"``, ``"prefix"`` or ``"template"`` (see the module's rule).
        endpoint: the endpoint of an HTTP URL source (None: the configured one).
        etl: the ETL of an HTTP URL source.
        given: the source as the user wrote it, for messages and sample names.
    """

    path: AISPath
    kind: Kind
    endpoint: str | None = None
    etl: ETL | None = None
    given: str | None = None

    def uri(self) -> str:
        """Returns the source's AIS name (its template or prefix unexpanded)."""
        return self.path.uri()


def as_sources(sources: Any) -> list[Any]:
    """Returns ``sources`` as a list: one source alone, or any iterable of them.

    A string is one source, never a sequence of characters.
    """
    if isinstance(sources, (str, bytes, AISPath, ObjectRef, Source)) or not isinstance(
        sources, Iterable
    ):
        return [sources]
    if hasattr(sources, "list_names") or hasattr(sources, "list_objects_iter"):
        return [sources]  # an SDK ObjectGroup or Bucket is one source, not a collection
    return list(sources)


_BRACE = re.compile(r"(?<!\\)[{}]")


def _check_braces(path: AISPath) -> None:
    """Refuses a name whose braces do not pair up: a template with a typo (``{0..7.tar``)
    would otherwise name no object at all, silently."""
    depth = 0
    for brace in _BRACE.findall(path.obj):
        depth += 1 if brace == "{" else -1
        if depth < 0:
            break
    if depth:
        raise InvalidURLError(
            f"{path.uri()} has an unmatched {'{' if depth > 0 else '}'!r}: write a template "
            "with its braces paired, e.g. 'ais://bucket/shard-{0000..0099}.tar'", url=path.uri())


def _kind_of(path: AISPath, *, listing: bool) -> Kind:
    _check_braces(path)
    if path.is_template:
        return "template"
    if not path.obj or path.obj.endswith("/") or listing:
        return "prefix"
    return "object"


def resolve_one(source: Any, *, listing: bool = False) -> list[Source]:
    """Returns what one source names, by the module's rule (no I/O).

    Raises:
        InvalidURLError: the source is none of the accepted forms, or is malformed.
    """
    if isinstance(source, Source):
        return [source]
    if isinstance(source, ObjectRef):
        return [Source(source.path, "object", source.endpoint, source.etl, source.name)]
    if isinstance(source, AISPath):
        return [Source(source, _kind_of(source, listing=listing))]
    if isinstance(source, str):
        if source.startswith(("http://", "https://")):
            endpoint, path, etl = parse_read_url(source)
            return [Source(path, "object", endpoint, etl, source)]
        path = parse_ais_url(source)
        return [Source(path, _kind_of(path, listing=listing), given=source)]
    paths = sdk_paths(source)
    if paths is None:
        raise InvalidURLError(
            f"source {source!r} is not an AIS name ('ais://bucket/prefix'), an object URL or an "
            "aistore Bucket/ObjectGroup/Object",
            url=repr(source),
        )
    return [Source(p, "object" if p.obj else "prefix") for p in paths]


def resolve(sources: Any, *, listing: bool = False) -> list[Source]:
    """Returns what the sources name, by the module's rule (no I/O).

    Example:
        >>> [(s.kind, s.path.obj) for s in resolve(["ais://b/s-{0..1}.tar", "ais://b/x.tar",
        ...                                         "ais://b/train/"])]
        [('template', 's-{0..1}.tar'), ('object', 'x.tar'), ('prefix', 'train/')]
        >>> resolve("ais://b/train-", listing=True)[0].kind
        'prefix'
    """
    return [each for source in as_sources(sources) for each in resolve_one(source,
                                                                             listing=listing)]


def one_object(name: str) -> AISPath:
    """Returns the path of an AIS name that must name exactly one object (no prefix, template).

    Raises:
        InvalidURLError: ``name`` is malformed, or names a bucket, a prefix or a template.
    """
    source = resolve_one(name)[0]
    if source.kind != "object":
        raise InvalidURLError(
            f"{name} is not one object; name a single object such as 'ais://bucket/shard-0.tar' "
            "(list a prefix or template with AISFileLister or `aisio ls`)",
            url=name,
        )
    return source.path


def expand(path: AISPath) -> Iterator[AISPath]:
    """Yields the paths of a template's expansion (the path itself when it is no template)."""
    if not path.is_template:
        yield path
        return
    for name in expand_template(path.obj, url=path.uri()):
        yield AISPath(path.bucket, name)


def count(sources: Sequence[Source]) -> int:
    """Returns how many objects resolved sources name, or -1 when a prefix would need a listing."""
    total = 0
    for source in sources:
        if source.kind == "prefix":
            return -1
        total += sum(1 for _ in expand(source.path)) if source.kind == "template" else 1
    return total


def list_prefix(
    client: Lister, path: AISPath, *, props: str = "name", page_size: int | None = None
) -> Iterator[tuple[AISPath, dict[str, Any]]]:
    """Yields every object under the path's prefix with its listed properties."""
    pages = client.list_pages(path.bucket, path.obj, props=props, page_size=page_size)
    while (page := explained(client, path, lambda: next(pages, None))) is not None:
        for entry in page:
            yield AISPath(path.bucket, entry["name"]), entry


def missing_objects(client: Lister, paths: Sequence[AISPath]) -> list[AISPath]:
    """Returns which of ``paths`` (all in one bucket) do not exist, with one listing."""
    if not paths:
        return []
    prefix = os.path.commonprefix([p.obj for p in paths])  # noqa: RUF071 - string prefix wanted
    present = {entry["name"] for page in client.list_pages(paths[0].bucket, prefix)
               for entry in page}
    return [p for p in paths if p.obj not in present]


def check_template(client: Lister, template: AISPath) -> list[AISPath]:
    """Returns the template's expansion, checked against the bucket with one listing.

    Raises:
        ObjectNotFoundError: names of the expansion do not exist: every one of them in
            ``.missing``, and in the message the nearest template (or prefix) that does.
    """
    paths = list(expand(template))
    missing = explained(client, template, lambda: missing_objects(client, paths))
    if missing:
        shown = ", ".join(p.obj for p in missing[:_SHOW_MISSING])
        more = f" and {len(missing) - _SHOW_MISSING} more" if len(missing) > _SHOW_MISSING else ""
        raise ObjectNotFoundError(
            f"template {template.uri()} names {len(missing)} of {len(paths)} object(s) that "
            f"do not exist: {shown}{more}; {nearest_existing(client, template)}",
            url=template.uri(),
            missing=tuple(p.uri() for p in missing),
        )
    return paths


def templates_of(sources: Sequence[Source]) -> tuple[Source, ...]:
    """Returns the templates among resolved sources (what :func:`check_templates` checks)."""
    return tuple(source for source in sources if source.kind == "template")


def check_templates(client: Lister, templates: Iterable[Source]) -> None:
    """Checks that every name of each template exists (one listing per template), before a
    loader's first batch rather than when its epoch reaches the first missing shard.

    Raises:
        ObjectNotFoundError: see :func:`check_template`.
    """
    for source in templates:
        check_template(client, source.path)


def objects(source: Source, client: Lister | None = None, *, check: bool = False,
            page_size: int | None = None) -> Iterator[ObjectRef]:
    """Yields the objects one resolved source names: the object, a template's expansion
    (checked against the bucket with ``check``), or a prefix's listing (needs ``client``)."""
    if source.kind == "object":
        yield ObjectRef(source.path, source.endpoint, source.etl, source.given)
    elif source.kind == "template":
        if check:
            if client is None:
                raise ValueError("checking a template needs a client")
            paths: Iterable[AISPath] = check_template(client, source.path)
        else:
            paths = expand(source.path)
        for path in paths:
            yield ObjectRef(path)
    else:
        if client is None:
            raise ValueError("listing a prefix needs a client")
        for path, _ in list_prefix(client, source.path, page_size=page_size):
            yield ObjectRef(path)


def shard_list(sources: Any, client: Lister | None) -> list[ObjectRef]:
    """Returns every object that shard sources name: templates expanded and prefixes listed once,
    here (in the training process), rather than in every worker and every epoch.

    Raises:
        ObjectNotFoundError: a bucket or prefix holds no objects.
    """
    refs: list[ObjectRef] = []
    for source in resolve(sources):
        found = list(objects(source, client))
        if not found and source.kind == "prefix":
            raise ObjectNotFoundError(
                f"there are no objects under {source.uri()}; upload shards there or fix the "
                "bucket/prefix", url=source.uri())
        refs.extend(found)
    return refs


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
