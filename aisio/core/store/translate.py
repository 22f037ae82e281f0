"""The one place where errors from the layers below (HTTP answers, requests/urllib3, the aistore
SDK) become aisio's typed errors. Nothing else in aisio builds an error from a status code."""

from __future__ import annotations

import html
import json
import re
from typing import Any

import requests
import urllib3.exceptions

from aisio.core.faults.errors import (
    AISConnectionError,
    AISIOError,
    AISRequestError,
    AuthError,
    BucketNotFoundError,
    ETLNotFoundError,
    ETLTransformError,
    ETLUnavailableError,
    ObjectNotFoundError,
)

#: Statuses worth retrying: busy, rate-limited, and server errors other than "not implemented".
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})

#: AIStore error codes (``tcode`` of the JSON error body) that mean the cluster is (re)forming:
#: e.g. a restarted proxy answers 400 ``ErrNoNodes`` ("no storage targets in the cluster") until
#: the targets rejoin. Worth waiting for, whatever the status; every other 4xx is final.
FORMING_TCODES = frozenset({"ErrNoNodes", "ErrMembershipChange"})

#: Low-level exceptions that mean the connection failed or broke (worth a retry or a resume).
TRANSIENT_EXCEPTIONS: tuple[type[BaseException], ...] = (
    requests.ConnectionError,
    requests.Timeout,
    requests.exceptions.ChunkedEncodingError,
    urllib3.exceptions.ProtocolError,
    urllib3.exceptions.ReadTimeoutError,
    urllib3.exceptions.IncompleteRead,
    ConnectionError,
    TimeoutError,
)


#: AIStore error codes that mean "no such object" whatever the status: a GET of a name that is
#: a directory on the target's disks (the name is a prefix: ``b/train`` beside ``b/train/x``)
#: answers 500 ``ErrLmetaNotFound`` ("no data available"). Not worth a retry.
MISSING_TCODES = frozenset({"ErrLmetaNotFound"})


def object_missing(body: str | bytes | None) -> bool:
    """True when an error answer's body says the object does not exist (see MISSING_TCODES)."""
    return _server_message(body)[0] in MISSING_TCODES


def object_gone(body: str | bytes | None) -> bool:
    """True when an error answer's body says a target does not have the object (``ErrNotFound``,
    not a missing bucket): after a target left the map, its objects answer so until it returns."""
    return _server_message(body)[0] == "ErrNotFound"


def cluster_forming(body: str | bytes | None) -> bool:
    """True when an error answer's body says the cluster is (re)forming (see FORMING_TCODES)."""
    return _server_message(body)[0] in FORMING_TCODES


_HTML_MESSAGE = re.compile(r"<p>Message: (.*?)\.</p>", re.S)


def _server_message(body: str | bytes | None) -> tuple[str, str]:
    """Returns (tcode, message) from an error body: AIStore's JSON, an ETL server's JSON
    ``detail`` (FastAPI) or HTML error page (http.server), else ("", raw text)."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    body = (body or "").strip()
    try:
        info: Any = json.loads(body)
    except ValueError:
        page = _HTML_MESSAGE.search(body)
        if page:
            return "", html.unescape(page.group(1))[:500]
        return "", body[:300]
    if isinstance(info, dict):
        message = info.get("message", info.get("detail", info.get("error", "")))
        return str(info.get("tcode", "")), str(message)[:500]
    return "", body[:300]


def error_from_status(
    status: int,
    body: str | bytes | None,
    *,
    url: str,
    what: str,
    etl: str | None = None,
    local_etl: str | None = None,
) -> AISIOError:
    """Returns the typed error for an HTTP error answer.

    Args:
        status: the HTTP status.
        body: the answer's body (or the ``Hdr-Error`` header of a HEAD).
        url: the AIS name or URL the request was about (named in the message).
        what: a short phrase for the operation, e.g. "reading", "listing".
        etl: the ETL the request named, if any.
        local_etl: the log file of the local ETL server that answered, if one did.
    """
    tcode, server = _server_message(body)
    said = f" (server: {server})" if server else ""
    if etl is not None and local_etl is not None and status == 500:
        return ETLTransformError(
            f"ETL {etl!r} failed to transform {url}: {server or 'HTTP 500'}; fix the transform "
            f"(server log: {local_etl}) or skip such shards with on_error='skip'",
            url=url, status=status, etl=etl, reason=server)
    if etl is not None and status == 501:
        return ETLUnavailableError(
            f"ETL {etl!r} cannot be applied to {url}: this AIStore is built without ETL support "
            "(HTTP 501: a node built without `-tags etl`), and no local ETL by that name runs "
            f"beside it; start one with `aisio etl init FILE:CLASS --name {etl}` (a cluster on "
            "this machine), deploy it on an AIStore on Kubernetes, or drop etl=",
            url=url,
            status=status,
        )
    if status == 404 or tcode in MISSING_TCODES:
        bucket = _bucket_name(url)
        if tcode in ("ErrBckNotFound", "ErrRemoteBckNotFound"):
            return BucketNotFoundError(
                f"bucket {bucket} does not exist ({what} {url}){said}; create it or check the "
                "name and provider",
                url=url,
                status=status,
            )
        if "lookup bucket" in server or "backend is missing" in server:
            return BucketNotFoundError(
                f"bucket {bucket} cannot be reached ({what} {url}): it is a bucket of another "
                f"provider, which this cluster does not reach{said}; configure that backend on "
                "the cluster, or name an AIStore bucket as ais://bucket/...",
                url=url,
                status=status,
            )
        if etl is not None and tcode != "ErrNotFound" and etl in server:
            return ETLNotFoundError(
                f"ETL {etl!r} is not running on the cluster, so {url} cannot be read through it"
                f"{said}; AIStore runs ETLs only on Kubernetes: there start it with `aisio etl "
                f"init FILE:CLASS --name {etl}`; a cluster on this machine runs it as a local "
                "process (the same command); or check the name",
                url=url,
                status=status,
            )
        return ObjectNotFoundError(
            f"object {url} does not exist{said}; check the name, or list the bucket to see "
            "what is there",
            url=url,
            status=status,
            missing=(url,),
        )
    if status in (401, 403):
        return AuthError(
            f"{what} {url} was refused (HTTP {status}){said}: the cluster requires "
            "authentication; pass AISConfig(token=...) or set AIS_AUTHN_TOKEN",
            url=url,
            status=status,
        )
    if tcode in FORMING_TCODES:
        hint = ("the cluster did not finish (re)forming in time; check "
                "`aisio playground status [--dir DIR]`")
    elif status in RETRY_STATUSES:
        hint = "retries ran out; the cluster is busy or failing"
    else:
        hint = "the request was rejected"
    return AISRequestError(
        f"{what} {url} failed with HTTP {status}{said}: {hint}", url=url, status=status
    )


def _bucket_name(url: str) -> str:
    """Returns the bucket of an AIS name as AIStore prints it (``s3://b``), else ``url``."""
    from aisio.core.store.urls import parse_ais_url

    try:
        return parse_ais_url(url).bucket.uri().rstrip("/")
    except AISIOError:
        return f"of {url}"


def error_from_exception(exc: BaseException, *, url: str, what: str,
                         offset: int | None = None) -> AISIOError:
    """Returns the typed error for an exception raised below aisio (requests, urllib3, SDK);
    ``offset``: the byte of an object stream where it broke."""
    if isinstance(exc, AISIOError):
        return exc
    if isinstance(exc, requests.exceptions.SSLError):
        return AISConnectionError(
            f"TLS verification failed while {what} {url} ({exc}); pass "
            "AISConfig(ca_cert='ca.pem') or set AIS_CLIENT_CA (skip_verify=True only for tests)",
            url=url,
        )
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):  # aistore SDK errors (AISError and subclasses) carry the status
        return error_from_status(status, str(getattr(exc, "message", exc)), url=url, what=what)
    if isinstance(exc, TRANSIENT_EXCEPTIONS):
        where = "" if offset is None else f" at byte {offset}"
        return AISConnectionError(
            f"connection failed while {what} {url}{where} ({type(exc).__name__}: {exc}) and "
            "retries ran out; check that the cluster is up (`aisio playground status "
            "[--dir DIR]`) and AIS_ENDPOINT", url=url, offset=offset,
        )
    return AISRequestError(f"{what} {url} failed: {type(exc).__name__}: {exc}", url=url)
