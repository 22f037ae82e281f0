"""Pure parsing and building of AIStore names and URLs (no I/O, no torch, no SDK).

Three spellings name an AIStore object, and each converts to the others here:

* an AIS name: ``ais://bucket/path/to/object`` (``s3://``, ``gs://``, ``az://``, ``oci://``,
  ``ht://`` for other providers' buckets as AIStore names them, and ``ais://@uuid#ns/bucket/...``
  for namespaced buckets);
* a brace template of names: ``ais://bucket/shard-{000..099}.tar``;
* an HTTP GET URL: ``http://proxy/v1/objects/bucket/object?provider=ais[&etl_name=...]``.

Object names are taken literally: ``?``, ``#``, ``%`` and spaces in an AIS name are part of the
object name, and are percent-quoted only when an HTTP URL is built.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

import braceexpand

from aisio.core.faults.errors import InvalidURLError

#: scheme as written -> AIStore provider name (the ``provider=`` query value).
SCHEMES = {
    "ais": "ais",
    "s3": "aws",
    "aws": "aws",
    "gs": "gcp",
    "gcp": "gcp",
    "az": "azure",
    "azure": "azure",
    "oc": "oci",
    "oci": "oci",
    "ht": "ht",
}
#: provider -> the scheme AIStore itself prints.
_PROVIDER_SCHEME = {"ais": "ais", "aws": "s3", "gcp": "gs", "azure": "az", "oci": "oci", "ht": "ht"}

_BUCKET_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
_TEMPLATE_RE = re.compile(r"(?<!\\)\{[^{}]*(\.\.|,)[^{}]*\}")
_ETL_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9\-]*[a-z0-9])?$")
_EXAMPLE = "write it as 'ais://bucket', 'ais://bucket/prefix' or 'ais://bucket/shard-{000..099}.tar'"


@dataclass(frozen=True)
class Bucket:
    """A bucket as AIStore names it: provider, optional namespace, name."""

    name: str
    provider: str = "ais"
    namespace: str = ""

    def query(self) -> dict[str, str]:
        """Returns the query parameters that select this bucket on the REST API."""
        params = {"provider": self.provider}
        if self.namespace:
            params["namespace"] = self.namespace
        return params

    def uri(self, obj: str = "") -> str:
        """Returns the AIS name ``scheme://[ns/]bucket/obj``."""
        ns = f"{self.namespace}/" if self.namespace else ""
        return f"{_PROVIDER_SCHEME[self.provider]}://{ns}{self.name}/{obj}"


@dataclass(frozen=True)
class AISPath:
    """A parsed AIS name: a bucket and an object name, prefix or template (possibly empty)."""

    bucket: Bucket
    obj: str = ""

    @property
    def is_template(self) -> bool:
        """True when ``obj`` holds a brace template (``{0..9}``, ``{a,b}``)."""
        return is_template(self.obj)

    def uri(self) -> str:
        """Returns the AIS name of this path."""
        return self.bucket.uri(self.obj)


@dataclass(frozen=True)
class ETL:
    """An AIStore ETL (server-side transform) to apply on GET, by name with optional arguments.

    Args:
        name: the ETL's name on the cluster (lower-case letters, digits and '-').
        args: a string, or a mapping sent as compact JSON, passed to the transform.
    """

    name: str
    args: str | Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _ETL_NAME_RE.match(self.name):
            raise InvalidURLError(
                f"ETL name {self.name!r} is not valid: use the name the ETL was started with "
                "(lower-case letters, digits and '-')"
            )

    def query(self) -> dict[str, str]:
        """Returns the ``etl_name`` / ``etl_args`` query parameters."""
        params = {"etl_name": self.name}
        if self.args is not None and self.args != "":
            params["etl_args"] = (
                self.args
                if isinstance(self.args, str)
                else json.dumps(dict(self.args), separators=(",", ":"), sort_keys=True)
            )
        return params


def to_etl(etl: ETL | str | Any | None) -> ETL | None:
    """Returns an :class:`ETL` from a name, an ETL, or the SDK's ``ETLConfig`` (name, args)."""
    if etl is None or isinstance(etl, ETL):
        return etl
    if isinstance(etl, str):
        return ETL(etl)
    name = getattr(etl, "name", None)
    if isinstance(name, str):
        return ETL(name, getattr(etl, "args", None))
    raise InvalidURLError(f"etl={etl!r} is not an ETL name, aisio.ETL or aistore ETLConfig")


def parse_ais_url(url: str) -> AISPath:
    """Returns the bucket and object part of an AIS name, or raises :class:`InvalidURLError`.

    Example:
        >>> parse_ais_url("s3://@uuid#ns/bkt/a/b.tar")
        AISPath(bucket=Bucket(name='bkt', provider='aws', namespace='@uuid#ns'), obj='a/b.tar')
    """
    if not isinstance(url, str):
        raise InvalidURLError(f"source {url!r} is not a string; {_EXAMPLE}", url=repr(url))
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise InvalidURLError(f"source {url!r} has no 'provider://' prefix; {_EXAMPLE}", url=url)
    provider = SCHEMES.get(scheme.lower())
    if provider is None:
        known = ", ".join(f"{s}://" for s in SCHEMES)
        raise InvalidURLError(
            f"source {url!r} names unknown provider {scheme!r}; use one of {known}", url=url
        )
    namespace = ""
    if rest.startswith(("@", "#")):
        namespace, sep, rest = rest.partition("/")
        if not sep or len(namespace) < 2:
            raise InvalidURLError(
                f"source {url!r} has a namespace but no bucket; "
                "write it as 'ais://@uuid#namespace/bucket/object'",
                url=url,
            )
    name, _, obj = rest.partition("/")
    if not name:
        raise InvalidURLError(f"source {url!r} has no bucket name; {_EXAMPLE}", url=url)
    if not _BUCKET_RE.match(name):
        raise InvalidURLError(
            f"source {url!r} has invalid bucket name {name!r}: "
            "use letters, digits, '-', '_' and '.' (not leading)",
            url=url,
        )
    return AISPath(Bucket(name, provider, namespace), obj)


def is_template(text: str) -> bool:
    """True when ``text`` holds a brace expression such as ``{000..099}`` or ``{a,b}``."""
    return bool(_TEMPLATE_RE.search(text))


def expand_template(text: str, *, url: str | None = None) -> Iterator[str]:
    """Yields the expansion of a brace template, lazily and in order.

    Example:
        >>> list(expand_template("s-{0..4..2}.tar"))
        ['s-0.tar', 's-2.tar', 's-4.tar']
    """
    if text.count("{") != text.count("}"):
        raise InvalidURLError(
            f"template {url or text!r} has unbalanced braces; write e.g. 'shard-{{000..099}}.tar'",
            url=url or text,
        )
    return iter(braceexpand.braceexpand(text))


def count_template(text: str) -> int:
    """Returns how many names a brace template expands to, without building them all at once."""
    return sum(1 for _ in expand_template(text))


def object_url(endpoint: str, path: AISPath, etl: ETL | None = None) -> str:
    """Returns the HTTP GET URL of an object, with the ETL (if any) in the query string.

    Example:
        >>> object_url("http://h:1", parse_ais_url("ais://b/a b?.tar"), ETL("x", {"k": 1}))
        'http://h:1/v1/objects/b/a%20b%3F.tar?provider=ais&etl_name=x&etl_args=%7B%22k%22%3A1%7D'
    """
    params = path.bucket.query()
    if etl is not None:
        params.update(etl.query())
    return (
        f"{endpoint}/v1/objects/{quote(path.bucket.name, safe='')}/"
        f"{quote_object_name(path.obj)}?{urlencode(params, quote_via=quote)}"
    )


def quote_object_name(name: str) -> str:
    """Returns the name percent-quoted for a URL path, keeping '/' and hiding dot segments.

    HTTP clients remove ``.`` and ``..`` path segments (RFC 3986), which would silently turn
    ``a/../b`` into another object, ``b``; those segments are sent as ``%2E`` instead.
    """
    return "/".join(
        seg.replace(".", "%2E") if seg in (".", "..") else seg
        for seg in quote(name, safe="/").split("/")
    )


def bucket_url(endpoint: str, bucket: Bucket) -> str:
    """Returns the REST URL of a bucket (list, create, destroy)."""
    return f"{endpoint}/v1/buckets/{quote(bucket.name, safe='')}?{urlencode(bucket.query())}"


def parse_object_url(url: str) -> tuple[str, AISPath, ETL | None]:
    """Returns ``(endpoint, path, etl)`` from an HTTP GET URL that :func:`object_url` built."""
    parts = urlsplit(url)
    marker = "/v1/objects/"
    head, sep, tail = parts.path.partition(marker)
    bucket_q, slash, obj_q = tail.partition("/")
    if parts.scheme not in ("http", "https") or not sep or not bucket_q or not slash or not obj_q:
        raise InvalidURLError(
            f"URL {url!r} is not an AIStore object URL "
            "(expected http(s)://host:port/v1/objects/<bucket>/<object>)",
            url=url,
        )
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    provider = query.get("provider", "ais")
    if provider not in _PROVIDER_SCHEME:
        raise InvalidURLError(f"URL {url!r} names unknown provider {provider!r}", url=url)
    bucket = Bucket(unquote(bucket_q), provider, query.get("namespace", ""))
    etl = ETL(query["etl_name"], query.get("etl_args")) if query.get("etl_name") else None
    endpoint = f"{parts.scheme}://{parts.netloc}{head}"
    return endpoint, AISPath(bucket, unquote(obj_q)), etl
