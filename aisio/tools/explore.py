"""Looking at a bucket: listings and summaries with plain-text and Jupyter (HTML) views.

:func:`ls` lists a bucket, a prefix or a brace template into a :class:`Listing`;
:func:`summarize` condenses one into a :class:`BucketSummary` (object count, bytes, suffix
histogram, shard size spread). The maths (:func:`percentile`, :func:`suffix_of`,
:func:`summary_of`) is pure and works on plain lists.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aisio.core.store.client import Client, client_for
from aisio.core.store.config import AISConfig, resolve_config
from aisio.core.store.sources import expand, one_object, resolve_one
from aisio.core.store.suggest import explained, nearest_existing
from aisio.core.store.urls import SCHEMES, Bucket
from aisio.tools.display import html_table, human_bytes, human_count, iso_time, plural, text_table

#: Extensions counted as shards in :class:`BucketSummary` (the rest are plain objects).
SHARD_EXTENSIONS = (".tar", ".tgz", ".tar.gz", ".tar.lz4", ".zip")
#: Percentiles a :class:`SizeSpread` reports.
PERCENTILES = (10, 25, 50, 75, 90, 99)
#: Rows an HTML listing shows before it says "and N more".
HTML_ROWS = 50


@dataclass(frozen=True)
class ObjectEntry:
    """One listed object: its AIS name, size in bytes and, for long listings, more properties."""

    name: str
    size: int
    props: dict[str, str] = field(default_factory=dict)


@dataclass
class Listing:
    """Returns (as the result of :func:`ls`) the objects a bucket, prefix or template names.

    Attributes:
        source: what was listed (``ais://bucket/prefix`` or a template).
        entries: the objects, in listing order.
        missing: names of a template that do not exist.
        truncated: True when ``limit`` stopped the listing early.
        advice: when names are missing, what to do: the template of names that exist
            (``did you mean ais://b/s-{0000..0006}.tar ...``), as the loaders say it.
    """

    source: str
    entries: list[ObjectEntry]
    missing: list[str] = field(default_factory=list)
    truncated: bool = False
    advice: str = ""

    @property
    def count(self) -> int:
        """The number of objects listed."""
        return len(self.entries)

    @property
    def total_bytes(self) -> int:
        """The sum of their sizes."""
        return sum(e.size for e in self.entries)

    def footer(self) -> str:
        """Returns the totals line: ``12 objects, 3.40 MiB`` (and what is missing or left out)."""
        text = f"{plural(self.count, 'object')}, {human_bytes(self.total_bytes)}"
        if self.truncated:
            text += " (limit reached; more exist)"
        if self.missing:
            text += f"; {plural(len(self.missing), 'name')} of the template missing"
        return text

    def to_json(self) -> dict[str, Any]:
        """Returns the listing as a JSON-ready dict."""
        return {"source": self.source, "count": self.count, "bytes": self.total_bytes,
                "truncated": self.truncated, "missing": self.missing,
                "objects": [{"name": e.name, "size": e.size, **e.props} for e in self.entries]}

    def _columns(self) -> list[str]:
        return sorted({k for e in self.entries for k in e.props})

    def __repr__(self) -> str:
        extra = self._columns()
        rows = [[e.name, human_bytes(e.size), *(e.props.get(k, "") for k in extra)]
                for e in self.entries]
        table = text_table(["NAME", "SIZE", *(k.upper() for k in extra)], rows, align_right=(1,))
        return f"{table}\n{self.footer()}"

    def _repr_html_(self) -> str:
        extra = self._columns()
        rows = [[e.name, human_bytes(e.size), *(e.props.get(k, "") for k in extra)]
                for e in self.entries[:HTML_ROWS]]
        more = self.count - HTML_ROWS
        footer = self.footer() + (f" ({human_count(more)} more not shown)" if more > 0 else "")
        return html_table(["name", "size", *extra], rows, caption=self.source, footer=footer,
                          align_right=(1,))


def _client(endpoint: str | None, config: AISConfig | None) -> Client:
    return client_for(resolve_config(endpoint, config))


def ls(
    source: str,
    *,
    endpoint: str | None = None,
    config: AISConfig | None = None,
    long: bool = False,
    limit: int | None = None,
    on_page: Callable[[int], None] | None = None,
) -> Listing:
    """Returns the :class:`Listing` of a bucket, prefix or brace template, with sizes.

    Args:
        source: ``ais://bucket``, ``ais://bucket/prefix`` or ``ais://bucket/shard-{0..9}.tar``.
        endpoint: the AIStore endpoint (else ``config``, else ``AIS_ENDPOINT``).
        config: an :class:`AISConfig`.
        long: also list version, checksum and access time.
        limit: stop after this many objects.
        on_page: called with the number of entries of each page as it arrives (progress).

    Raises:
        BucketNotFoundError: the bucket does not exist (naming the close ones that do).
        InvalidURLError: ``source`` is not an AIS name.

    Example:
        >>> ls("ais://bucket/train-{0000..0009}.tar", endpoint=endpoint)   # doctest: +SKIP
    """
    path = resolve_one(source, listing=True)[0].path  # the one rule for names (core.sources)
    client = _client(endpoint, config)
    props = "name,size" + (",version,checksum,atime" if long else "")
    wanted: dict[str, int] | None = None
    prefix = path.obj
    if path.is_template:
        names = [p.obj for p in expand(path)]
        wanted = {name: i for i, name in enumerate(names)}
        prefix = os.path.commonprefix(names)  # noqa: RUF071 - a string prefix is wanted
    found: dict[str, ObjectEntry] = {}
    entries: list[ObjectEntry] = []
    truncated = False
    pages = client.list_pages(path.bucket, prefix, props=props)
    while (page := explained(client, path, lambda: next(pages, None))) is not None:
        if on_page is not None:
            on_page(len(page))
        for raw in page:
            if wanted is not None and raw["name"] not in wanted:
                continue
            entry = _entry(path.bucket, raw)
            if wanted is not None:
                found[raw["name"]] = entry
            else:
                entries.append(entry)
            if limit is not None and len(entries) + len(found) >= limit:
                truncated = True
                break
        if truncated:
            break
    missing: list[str] = []
    advice = ""
    if wanted is not None:
        entries = [found[n] for n in wanted if n in found]
        if not truncated:
            missing = [path.bucket.uri(n) for n in wanted if n not in found]
        if missing:
            advice = nearest_existing(client, path)
    return Listing(source, entries, missing, truncated, advice)


def _entry(bucket: Bucket, raw: dict[str, Any]) -> ObjectEntry:
    props = {k: str(v) for k, v in raw.items()
             if k in ("version", "checksum", "atime") and v not in (None, "")}
    if "atime" in props:
        props["atime"] = iso_time(props["atime"])
    return ObjectEntry(bucket.uri(raw["name"]), int(raw.get("size") or 0), props)


def list_buckets(*, endpoint: str | None = None, config: AISConfig | None = None) -> list[str]:
    """Returns the AIS names of the cluster's buckets (``ais://name/``), sorted."""
    client = _client(endpoint, config)
    resp = client.request("GET", f"{client.endpoint}/v1/buckets/", name=client.endpoint,
                          what="listing buckets")
    return sorted(Bucket(b["name"], b.get("provider") or "ais").uri()
                  for b in resp.json() or [] if (b.get("provider") or "ais") in SCHEMES.values())


def stat(source: str, *, endpoint: str | None = None,
         config: AISConfig | None = None) -> dict[str, str]:
    """Returns an object's properties (size, version, checksum, atime, ...) as strings.

    Raises:
        InvalidURLError: ``source`` names a bucket, a prefix ending in '/' or a template.
        ObjectNotFoundError: no such object (saying so when other names start with it).
    """
    path = one_object(source)
    client = _client(endpoint, config)
    return explained(client, path, lambda: client.head_object(path))


# ---- summaries -------------------------------------------------------------------------------
def suffix_of(name: str) -> str:
    """Returns the extension a histogram counts a name under: the suffix after the first dot.

    Example:
        >>> [suffix_of(n) for n in ("a/b.tar", "x.tar.gz", "a.b/c", "README", "d/0001.seg.PNG")]
        ['.tar', '.tar.gz', '(none)', '(none)', '.seg.png']
    """
    base = name.rsplit("/", 1)[-1]
    dot = base.find(".", 1)
    return base[dot:].lower() if dot > 0 else "(none)"


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Returns the ``q``-th percentile of sorted values, interpolating linearly (numpy's default).

    Example:
        >>> percentile([1, 2, 3, 4], 50)
        2.5
    """
    if not sorted_values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q={q} must be within 0..100")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return float(sorted_values[lo]) + (float(sorted_values[hi]) - float(sorted_values[lo])) * frac


@dataclass(frozen=True)
class SizeSpread:
    """The spread of object sizes: count, min, mean, percentiles and max (bytes)."""

    count: int
    min: int
    max: int
    mean: float
    percentiles: dict[int, float]

    @classmethod
    def of(cls, sizes: Iterable[int]) -> SizeSpread | None:
        """Returns the spread of ``sizes``, or None when there are none."""
        values = sorted(sizes)
        if not values:
            return None
        return cls(len(values), values[0], values[-1], sum(values) / len(values),
                   {q: percentile(values, q) for q in PERCENTILES})

    @property
    def median(self) -> float:
        """The 50th percentile."""
        return self.percentiles[50]

    def describe(self) -> str:
        """Returns ``min 1.00 KiB | p10 ... | median ... | max ...``."""
        parts = [f"min {human_bytes(self.min)}"]
        parts += [f"{'median' if q == 50 else f'p{q}'} {human_bytes(v)}"
                  for q, v in self.percentiles.items()]
        return " | ".join([*parts, f"max {human_bytes(self.max)}"])


@dataclass(frozen=True)
class BucketSummary:
    """Returns (as the result of :func:`summarize`) the shape of a bucket or prefix.

    Attributes:
        source: what was summarized.
        objects: the number of objects.
        total_bytes: their total size.
        suffixes: ``{suffix: (count, bytes)}``, most common first.
        shards: the size spread of the shards (``.tar``, ...), or of all objects if no shards.
        shard_kind: ``"shard"`` or ``"object"``: what ``shards`` measured.
    """

    source: str
    objects: int
    total_bytes: int
    suffixes: dict[str, tuple[int, int]]
    shards: SizeSpread | None
    shard_kind: str = "shard"

    def __repr__(self) -> str:
        lines = [f"{self.source}: {plural(self.objects, 'object')}, "
                 f"{human_bytes(self.total_bytes)}"]
        for suffix, (count, size) in self.suffixes.items():
            lines.append(f"  {suffix:<12} {human_count(count):>10}  {human_bytes(size):>10}")
        if self.shards is not None:
            lines.append(f"{self.shard_kind} sizes: {self.shards.describe()}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        rows = [[s, human_count(c), human_bytes(b)] for s, (c, b) in self.suffixes.items()]
        footer = "" if self.shards is None else f"{self.shard_kind} sizes: {self.shards.describe()}"
        caption = (f"{self.source}: {plural(self.objects, 'object')}, "
                   f"{human_bytes(self.total_bytes)}")
        return html_table(["suffix", "objects", "bytes"], rows, caption=caption, footer=footer,
                          align_right=(1, 2))


def summary_of(source: str, entries: Iterable[tuple[str, int]]) -> BucketSummary:
    """Returns the :class:`BucketSummary` of ``(name, size)`` pairs (pure; no I/O)."""
    counts: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    shard_sizes: list[int] = []
    all_sizes: list[int] = []
    for name, size in entries:
        suffix = suffix_of(name)
        counts[suffix] += 1
        sizes[suffix] += size
        all_sizes.append(size)
        if name.lower().endswith(SHARD_EXTENSIONS):
            shard_sizes.append(size)
    suffixes = {s: (c, sizes[s]) for s, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))}
    kind = "shard" if shard_sizes else "object"
    return BucketSummary(source, len(all_sizes), sum(all_sizes), suffixes,
                         SizeSpread.of(shard_sizes or all_sizes), kind)


def summarize(source: str | Listing, *, endpoint: str | None = None,
              config: AISConfig | None = None) -> BucketSummary:
    """Returns the :class:`BucketSummary` of a bucket, prefix, template or :class:`Listing`.

    Example:
        >>> summarize("ais://bucket/train/", endpoint=endpoint)   # doctest: +SKIP
        ais://bucket/train/: 100 objects, 24.1 MiB ...
    """
    listing = source if isinstance(source, Listing) else ls(source, endpoint=endpoint,
                                                             config=config)
    return summary_of(listing.source, ((e.name, e.size) for e in listing.entries))


__all__ = [
    "BucketSummary",
    "Listing",
    "ObjectEntry",
    "SizeSpread",
    "list_buckets",
    "ls",
    "percentile",
    "stat",
    "suffix_of",
    "summarize",
    "summary_of",
]
