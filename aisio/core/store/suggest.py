"""The one owner of "did you mean": what the user likely meant when a name is not there.

Every front end (the loaders, the DataPipes, the ``aisio`` command, the Jupyter views) asks
here, so a typo gets the same suggestion wherever it is made:

- a bucket that does not exist: the cluster's buckets with close names
  (:func:`near_buckets`);
- an object that does not exist but starts other names: the prefix or template that names
  them (:func:`explain_missing`);
- a template whose names do not exist (a range or a zero padding off): the numbered series
  of names that do exist (:func:`nearest_existing`).

:func:`explained` runs a request and raises the suggested error; :func:`suggested` makes it
from an error already caught. Each suggestion costs a listing, and runs only on an error.
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from aisio.core.faults.errors import AISIOError, BucketNotFoundError, ObjectNotFoundError
from aisio.core.store.urls import AISPath, Bucket


class Lister(Protocol):
    """What a listing and a "did you mean" hint ask of a store (any
    :class:`~aisio.core.store.protocol.ObjectStore`, or the client)."""

    def list_pages(self, bucket: Bucket, prefix: str = "", *, props: str = "name",
                   page_size: int | None = None) -> Iterator[list[dict[str, Any]]]:
        """Yields the entries (``{"name": ..., ...}``) of the objects under ``prefix``, in name
        order, a page at a time.

        Raises:
            BucketNotFoundError: the bucket does not exist.
        """
        ...

    def bucket_names(self) -> list[str]:
        """Returns the names of the store's buckets (asked only to explain a missing one)."""
        ...


T = TypeVar("T")
#: Names one listing page asks for when a missing object's name may be a prefix.
_LIST_PAGE = 100
#: Where a template's fixed start ends.
_OPENING_BRACE = re.compile(r"(?<!\\)\{")


def suggested(client: Lister, path: AISPath, error: AISIOError) -> AISIOError:
    """Returns ``error`` (raised about ``path``) with what was likely meant, when the cluster
    knows of something close: a bucket for a missing bucket, a prefix or template for a missing
    object; else ``error`` itself. A template's missing names are explained where it is
    checked (:func:`nearest_existing`)."""
    if isinstance(error, BucketNotFoundError):
        near = near_buckets(client, path.bucket.name)
        if not near:
            return error
        named = " or ".join(Bucket(name, path.bucket.provider).uri() for name in near)
        return BucketNotFoundError(
            f"bucket {path.bucket.uri()} does not exist: did you mean {named}? "
            f"({path.uri()})", url=error.url, status=error.status)
    if isinstance(error, ObjectNotFoundError):
        return explain_missing(client, path, error)
    return error


def explained(client: Lister, path: AISPath, action: Callable[[], T]) -> T:
    """Returns ``action()`` (a request about ``path``); when it raises a missing bucket or
    object, raises :func:`suggested`'s error instead (the original as its cause)."""
    try:
        return action()
    except (BucketNotFoundError, ObjectNotFoundError) as exc:
        better = suggested(client, path, exc)
        if better is exc:
            raise
        raise better from exc


#: Listing pages the "nearest template" hint reads at most (it runs only on an error).
_HINT_PAGES = 10


def nearest_existing(client: Lister, template: AISPath) -> str:
    """Returns what to do about a template whose names are missing: the nearest template of
    names that exist (``did you mean ais://b/shapes-{0000..0004}.tar``), else the prefix where
    objects do exist, else "fix the range or upload them". Lists the template's fixed start,
    else its folder (a few pages at most); a failing listing gives the plain advice."""
    plain = "fix the range or upload them"
    head = _OPENING_BRACE.split(template.obj, maxsplit=1)[0]
    folder = head[: head.rfind("/") + 1]
    for prefix in dict.fromkeys((head, folder)):
        try:
            pages = client.list_pages(template.bucket, prefix, page_size=_LIST_PAGE)
            names = [entry["name"] for page in itertools.islice(pages, _HINT_PAGES)
                     for entry in page]
        except AISIOError:
            return plain
        if not names:
            continue
        series = numbered_series(names)
        if series:
            best, size = max(series, key=lambda s: (
                difflib.SequenceMatcher(None, template.obj, s[0]).ratio(), s[1]))
            return (f"did you mean {template.bucket.uri(best)} ({size} object(s) that exist)? "
                    f"Or {plain}")
        return (f"objects exist under {template.bucket.uri(prefix)} ({len(names)}"
                f"{'+' if len(names) >= _HINT_PAGES * _LIST_PAGE else ''}, e.g. "
                f"{names[0]}): {plain}")
    return plain


def numbered_series(names: Iterable[str]) -> list[tuple[str, int]]:
    """Returns each run of consecutive numbered names (same text around digits of one width) as
    ``(template, how many)``; a name alone in its run is returned as it is.

    Example:
        >>> numbered_series(["s-0000.tar", "s-0001.tar", "s-0003.tar", "x.txt"])
        [('s-{0000..0001}.tar', 2), ('s-0003.tar', 1)]
    """
    groups: dict[tuple[str, int, str], set[int]] = {}
    for name in names:
        match = _NUMBERED.match(name)
        if match:
            head, digits, tail = match.groups()
            groups.setdefault((head, len(digits), tail), set()).add(int(digits))
    series: list[tuple[str, int]] = []
    for (head, width, tail), numbers in groups.items():
        ordered = sorted(numbers)
        start = 0
        for at in range(1, len(ordered) + 1):
            if at == len(ordered) or ordered[at] != ordered[at - 1] + 1:
                first, last = ordered[start], ordered[at - 1]
                series.append((f"{head}{first:0{width}d}{tail}" if first == last else
                               f"{head}{{{first:0{width}d}..{last:0{width}d}}}{tail}",
                               at - start))
                start = at
    return series


#: How many object names a "did you mean the prefix" hint lists.
_SHOW_PREFIXED = 3
_NUMBERED = re.compile(r"^(.*?)(\d+)(\D*)$")


def template_of(names: Sequence[str]) -> str | None:
    """Returns the brace template naming exactly ``names`` when they are one numbered series
    (same text around one run of digits of equal width, no gaps), else None.

    Example:
        >>> template_of(["s-0000.tar", "s-0002.tar", "s-0001.tar"])
        's-{0000..0002}.tar'
        >>> template_of(["s-0.tar", "s-2.tar"]) is None
        True
    """
    parts = [_NUMBERED.match(name) for name in names]
    if len(names) < 2 or not all(parts):
        return None
    heads = {m.group(1) for m in parts if m}
    tails = {m.group(3) for m in parts if m}
    widths = {len(m.group(2)) for m in parts if m}
    numbers = sorted(int(m.group(2)) for m in parts if m)
    if len(heads) != 1 or len(tails) != 1 or len(widths) != 1:
        return None
    if numbers != list(range(numbers[0], numbers[0] + len(numbers))):
        return None
    width = widths.pop()
    return f"{heads.pop()}{{{numbers[0]:0{width}d}..{numbers[-1]:0{width}d}}}{tails.pop()}"


def explain_missing(client: Lister, path: AISPath, error: ObjectNotFoundError
                    ) -> ObjectNotFoundError:
    """Returns ``error`` (a GET or HEAD of ``path`` answered 404), or, when ``path``'s name is
    the start of other objects' names, an error that says so and how to name them: readers take
    a name as one object, listers (``aisio ls``, AISFileLister) as a prefix (the module's rule).
    """
    if not path.obj or path.obj.endswith("/") or path.is_template:
        return error
    try:
        pages = client.list_pages(path.bucket, path.obj, page_size=_LIST_PAGE)
        page = next(pages, [])
        more = next(pages, None) is not None
    except AISIOError:
        return error  # the 404 says enough; a failing listing must not hide it
    names = [entry["name"] for entry in page if entry.get("name") != path.obj]
    if not names:
        return error
    count = f"{len(names)}{'+' if more else ''}"
    shown = ", ".join(path.bucket.uri(n) for n in names[:_SHOW_PREFIXED])
    shown += ", ..." if len(names) > _SHOW_PREFIXED else ""
    under = [n for n in names if n.startswith(path.obj + "/")]
    template = None if more else template_of(names)
    if under:
        fix = f"did you mean the prefix {path.bucket.uri(path.obj + '/')}"
    elif template is not None:
        fix = f"did you mean the template {path.bucket.uri(template)}"
    elif len(names) == 1 and not more:
        fix = f"did you mean {path.bucket.uri(names[0])}"
    else:
        fix = "did you mean one of them, or a list of them"
    fixed = ObjectNotFoundError(
        f"object {path.uri()} does not exist, but {count} object name(s) start with it "
        f"({shown}): {fix}? A reader takes a name as one object, unless it ends in '/' or is a "
        "template; `aisio ls` and AISFileLister list any name as a prefix",
        url=error.url, status=error.status, missing=getattr(error, "missing", (path.uri(),)))
    return fixed


def near_buckets(client: Lister, name: str) -> list[str]:
    """Returns the names of the cluster's buckets close to ``name`` (a typo's likely target),
    closest first; none when the listing fails."""
    try:
        names = client.bucket_names()
    except (AISIOError, ValueError, KeyError, TypeError):
        return []
    return difflib.get_close_matches(name, names, n=2, cutoff=0.6)
