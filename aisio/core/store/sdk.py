"""The one module that knows the aistore SDK's types: it turns SDK sources into AIS paths."""

from __future__ import annotations

from typing import Any

from aisio.core.store.urls import AISPath, Bucket


def _namespace(ns: Any) -> str:
    path = ns.get_path() if ns is not None and hasattr(ns, "get_path") else str(ns or "")
    return "" if path in ("", "@#") else path


def sdk_paths(source: Any) -> list[AISPath] | None:
    """Returns the AIS paths an SDK ``Bucket``, ``ObjectGroup`` or ``Object`` stands for.

    Returns None when ``source`` is not an SDK object (or the SDK is not installed). A Bucket
    stands for all its objects (an empty prefix); an ObjectGroup for its names, range or template.
    """
    try:
        from aistore.sdk.bucket import Bucket as SDKBucket
        from aistore.sdk.multiobj.object_group import ObjectGroup
        from aistore.sdk.obj.object import Object
    except ImportError:  # pragma: no cover - aistore is a dependency
        return None
    if isinstance(source, SDKBucket):
        return [AISPath(_bucket(source))]
    if isinstance(source, ObjectGroup):
        bucket = _bucket(source.bck)
        return [AISPath(bucket, name) for name in source.list_names()]
    if isinstance(source, Object):
        params = source.query_params
        bucket = Bucket(source.bucket_name, params.get("provider", "ais"),
                        _namespace(params.get("namespace")))
        return [AISPath(bucket, source.name)]
    return None


def _bucket(bck: Any) -> Bucket:
    return Bucket(bck.name, bck.provider.value, _namespace(bck.namespace))
