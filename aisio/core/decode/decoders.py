"""Decoding of WebDataset sample fields by suffix.

The rules follow ``webdataset``'s ``autodecode``. The *extension* of a field is the last
dot-separated part of its suffix (``seg.png`` -> ``png``); decoders are looked up by it:

* ``jpg jpeg png ppm pgm pbm pnm bmp webp tif tiff gif``: an image, as the ``image`` spec says;
* ``txt text transcript``: ``str`` (UTF-8);
* ``cls cls2 class count index inx id``: ``int``;
* ``json jsn``: the parsed JSON value;
* ``npy``: a numpy array (loaded with ``allow_pickle=False``);
* ``npz``: a dict of numpy arrays (``allow_pickle=False``);
* ``ten tb``: the list of numpy arrays of a tenbin file (webdataset's ``tenbin`` format);
* ``mp msg msgpack``: the unpacked MessagePack value (needs the optional ``msgpack`` package);
* ``pyd pickle pkl``: the unpickled object, only with ``allow_pickle=True``;
* ``pth``: ``torch.load(..., weights_only=False)``, only with ``allow_pickle=True``;
* ``gz``: gunzipped, then decoded by the rest of the suffix (``json.gz`` -> JSON).

Any other field stays ``bytes``.

The image specs (``pil``, ``rgb8``, ``torchrgb8``, ...) are listed in
:mod:`aisio.core.decode.images`, which decodes images.

numpy and torch are imported only when a field needs them.
"""

from __future__ import annotations

import gzip
import io
import json
import operator
import pickle
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from types import MappingProxyType
from typing import Any

from aisio.core.decode.images import IMAGE_EXTENSIONS, IMAGE_SPECS, decode_image
from aisio.core.faults.errors import AISIOError, ConfigError, DecodeError, LoaderUnavailableError

FieldDecoder = Callable[[bytes], Any]
"""A function turning a field's bytes into a value."""


class SampleError(DecodeError):
    """One sample is bad (a field does not decode, or a field is missing): the error policies
    (``on_error="skip"``/``"warn"``) skip that sample alone.

    Attributes:
        key: the sample's ``__key__``.
        field: the field at fault.
        member: the tar member at fault, ``<key>.<field>``.
        offset: always None (samples carry no byte offsets).
    """

    def __init__(self, message: str, *, url: str | None = None, key: str | None = None,
                 field: str | None = None) -> None:
        super().__init__(message, url=url)
        self.key = key
        self.field = field
        self.member = f"{key}.{field}" if key is not None and field is not None else None
        self.offset = None


class FieldDecodeError(SampleError):
    """A field's bytes could not be decoded (a corrupt JPEG, bad JSON, ...)."""


class MissingFieldError(SampleError, KeyError):
    """A sample lacks a field asked for by :func:`to_tuple` (also a ``KeyError``)."""


PICKLE_EXTENSIONS = frozenset(("pyd", "pickle", "pkl", "pth"))
"""Extensions whose decoding runs pickle, refused unless ``allow_pickle=True``."""


def _text(data: bytes) -> str:
    return data.decode("utf-8")


def _integer(data: bytes) -> int:
    return int(data)


def _json(data: bytes) -> Any:
    return json.loads(data)


def _npy(data: bytes) -> Any:
    import numpy as np

    return np.load(io.BytesIO(data), allow_pickle=False)


def _npz(data: bytes) -> dict[str, Any]:
    import numpy as np

    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}


def _tenbin(data: bytes) -> Any:
    from webdataset import tenbin  # a dependency of aisio; imported only for .ten fields

    return tenbin.decode_buffer(data)


def _msgpack(data: bytes) -> Any:
    try:
        import msgpack  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:
        raise LoaderUnavailableError(
            "decoding .mp/.msg/.msgpack fields needs the 'msgpack' package: pip install msgpack"
        ) from exc
    return msgpack.unpackb(data, raw=False)


def _unpickle(data: bytes) -> Any:
    return pickle.loads(data)  # only reached with allow_pickle=True


def _torch_load(data: bytes) -> Any:
    import torch

    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)


BASIC_DECODERS: Mapping[str, FieldDecoder] = MappingProxyType(
    {
        "txt": _text,
        "text": _text,
        "transcript": _text,
        "cls": _integer,
        "cls2": _integer,
        "class": _integer,
        "count": _integer,
        "index": _integer,
        "inx": _integer,
        "id": _integer,
        "json": _json,
        "jsn": _json,
        "npy": _npy,
        "npz": _npz,
        "ten": _tenbin,
        "tb": _tenbin,
        "mp": _msgpack,
        "msg": _msgpack,
        "msgpack": _msgpack,
        "pyd": _unpickle,
        "pickle": _unpickle,
        "pkl": _unpickle,
        "pth": _torch_load,
    }
)
"""The built-in non-image decoders, by extension."""


def _extension(suffix: str) -> str:
    return suffix.rpartition(".")[2]


_UNPLANNED = object()
_SLOW = object()


def _sample_name(sample: Mapping[str, Any]) -> str:
    return f"sample {sample.get('__key__')!r} from shard {sample.get('__url__', '<unknown>')}"


class Decoder:
    """Decodes the fields of WebDataset samples by suffix; picklable.

    Args:
        image: the image spec (see the module doc), or None to leave images as bytes.
        custom: decoders by suffix, full (``seg.png``) or extension (``png``), case-insensitive;
            they win over the built-in ones. They must be picklable (module-level functions,
            not lambdas) for the decoder to reach DataLoader2 workers.
        allow_pickle: decode ``pyd``/``pickle``/``pkl``/``pth`` fields, which runs pickle. Only
            for shards you trust.
        only: decode only these suffixes (full or extension); the other fields stay bytes.

    Raises:
        ConfigError: ``image`` is not a known spec.
    """

    def __init__(
        self,
        image: str | None = "pil",
        *,
        custom: Mapping[str, FieldDecoder] | None = None,
        allow_pickle: bool = False,
        only: Iterable[str] | None = None,
    ) -> None:
        if image is not None and image not in IMAGE_SPECS:
            raise ConfigError(
                f"unknown image spec {image!r}; use one of {', '.join(IMAGE_SPECS)} or None"
            )
        self.image = image
        self.custom = {suffix.lower(): fn for suffix, fn in (custom or {}).items()}
        self.allow_pickle = allow_pickle
        if isinstance(only, str):
            only = only.split()
        self.only = None if only is None else frozenset(suffix.lower() for suffix in only)
        self._plans: dict[str, Any] = {}

    def __repr__(self) -> str:
        return (
            f"Decoder(image={self.image!r}, custom={sorted(self.custom)!r}, "
            f"allow_pickle={self.allow_pickle!r}, only={self.only and sorted(self.only)!r})"
        )

    def __call__(self, sample: Mapping[str, Any]) -> dict[str, Any]:
        """Returns a new sample with every bytes field decoded.

        Fields starting with ``__``, fields that are not bytes, fields left out by ``only`` and
        fields with no decoder are copied unchanged.

        Raises:
            DecodeError: a field could not be decoded, or it is a pickle and ``allow_pickle``
                is off. The message names the shard, the sample key and the field.
        """
        out: dict[str, Any] = {}
        plans = self._plans
        for field, value in sample.items():
            plan = plans.get(field, _UNPLANNED)
            out[field] = (value if plan is None or not isinstance(value, bytes)
                          else self._apply(plan, sample, field, value))
        return out

    def picked(self, sample: Mapping[str, Any], fields: tuple[str, ...],
               values: tuple[Any, ...]) -> tuple[Any, ...]:
        """Returns ``values``, the fields ``fields`` of ``sample``, each decoded as
        :meth:`__call__` decodes it: ``to_tuple(decoder(sample), *fields)`` without decoding
        (or copying) the fields it leaves out.

        Raises:
            DecodeError: see :meth:`__call__`.
        """
        plans = self._plans
        out = []
        for field, value in zip(fields, values, strict=True):
            plan = plans.get(field, _UNPLANNED)
            out.append(value if plan is None or not isinstance(value, bytes)
                       else self._apply(plan, sample, field, value))
        return tuple(out)

    def _apply(self, plan: Any, sample: Mapping[str, Any], field: str, data: bytes) -> Any:
        """Returns a bytes field decoded by its plan (planning it first when ``plan`` is
        ``_UNPLANNED``)."""
        if plan is _UNPLANNED:
            plan = self._plan(sample, field)
            if plan is None:
                return data
        if plan is _SLOW:
            return self.decode_field(sample, field, data)
        return self._run(plan, sample, field, data)

    def plan(self, field: str) -> Any:
        """Returns what :meth:`__call__` does with a bytes field named ``field``: None (keeps
        the bytes), the function it applies, or another marker (gzip: :meth:`decode_field`).

        Raises:
            DecodeError: the field is a pickle and ``allow_pickle`` is off.
        """
        found = self._plans.get(field, _UNPLANNED)
        return self._plan({}, field) if found is _UNPLANNED else found

    def _plan(self, sample: Mapping[str, Any], field: str) -> Any:
        """Returns what ``__call__`` does with a bytes field named ``field``, and remembers it:
        None (copy it), a decoder to run, or ``_SLOW`` (gzip: :meth:`decode_field`). A field
        refused as a pickle raises every time; it is never remembered."""
        plan: Any = None
        if not field.startswith("__") and self._wanted(field):
            plan = self._find(sample, field, field.lower())
            if plan is None and _extension(field).lower() == "gz":
                plan = _SLOW
        if len(self._plans) >= 1024:  # suffixes are few; a stream of unique ones stays bounded
            self._plans.clear()
        self._plans[field] = plan
        return plan

    def __getstate__(self) -> dict[str, Any]:
        return {name: value for name, value in self.__dict__.items() if name != "_plans"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._plans = {}

    def _wanted(self, field: str) -> bool:
        only = self.only
        return only is None or field.lower() in only or _extension(field).lower() in only

    def decode_field(self, sample: Mapping[str, Any], field: str, data: bytes) -> Any:
        """Returns field ``field`` of ``sample`` (whose bytes are ``data``) decoded.

        Raises:
            DecodeError: see :meth:`__call__`.
        """
        suffix = field.lower()
        while True:
            decoder = self._find(sample, field, suffix)
            if decoder is not None:
                return self._run(decoder, sample, field, data)
            if _extension(suffix) != "gz":
                return data
            data = self._run(gzip.decompress, sample, field, data)
            suffix = suffix[: -len(".gz")]

    def _find(self, sample: Mapping[str, Any], field: str, suffix: str) -> FieldDecoder | None:
        """Returns the decoder for ``suffix`` (None if there is none), enforcing the pickle rule."""
        extension = _extension(suffix)
        custom = self.custom.get(suffix)
        if custom is None:
            custom = self.custom.get(extension)
        if custom is not None:
            return custom
        if extension in PICKLE_EXTENSIONS and not self.allow_pickle:
            raise DecodeError(
                f"refusing to decode field '{field}' of {_sample_name(sample)}: '{extension}' "
                "files are pickles, which can run arbitrary code; pass "
                "Decoder(allow_pickle=True) if you trust the shard",
                url=sample.get("__url__"),
            )
        if extension in IMAGE_EXTENSIONS:
            return None if self.image is None else partial(decode_image, spec=self.image)
        return BASIC_DECODERS.get(extension)

    @staticmethod
    def _run(decoder: FieldDecoder, sample: Mapping[str, Any], field: str, data: bytes) -> Any:
        try:
            return decoder(data)
        except AISIOError:
            raise  # e.g. a missing optional package: not this sample's fault
        except Exception as exc:
            raise FieldDecodeError(
                f"cannot decode field '{field}' of {_sample_name(sample)}: "
                f"{type(exc).__name__}: {exc}; check the file or pass a custom decoder for "
                f"'{field}'",
                url=sample.get("__url__"),
                key=sample.get("__key__"),
                field=field,
            ) from exc


def field_names(fields: Any, *, what: str = "fields") -> tuple[str, ...]:
    """Returns a tuple of names from a sequence of names or from one string of names.

    A string is split on whitespace (``"jpg;png cls"`` -> ``("jpg;png", "cls")``, as in
    webdataset's ``to_tuple``); it is never iterated as characters.

    Raises:
        TypeError: ``fields`` is not a string or an iterable of strings (``what`` names it).
        ValueError: no name was given.
    """
    if isinstance(fields, str):
        names: tuple[Any, ...] = tuple(fields.split())
    elif isinstance(fields, (bytes, bytearray)) or not isinstance(fields, Iterable):
        raise TypeError(f"{what} must be a string or a list of strings, got {fields!r}")
    else:
        names = tuple(fields)
    bad = [name for name in names if not isinstance(name, str)]
    if bad:
        raise TypeError(f"{what} must be strings, got {bad[0]!r} in {fields!r}")
    if not names:
        raise ValueError(f"{what} is empty: name at least one field, e.g. 'jpg;png cls'")
    return names


def tuple_fields(fields: tuple[Any, ...]) -> tuple[str, ...]:
    """Returns the field names of ``to_tuple(sample, *fields)``: one string with spaces or one
    list is split or unpacked; otherwise each argument is one field."""
    if len(fields) == 1:
        return field_names(fields[0])
    return field_names(fields)


def to_tuple(sample: Mapping[str, Any], *fields: str, missing_ok: bool = False) -> tuple[Any, ...]:
    """Returns the values of ``fields`` in ``sample``, as a tuple in the same order.

    Each field may list alternatives separated by ``;`` (``"jpg;png"``): the first present wins.
    A single argument is split on spaces (``"jpg;png cls"``, as in webdataset) or, when it is a
    list, unpacked (``["jpg;png", "cls"]``).
    ``__key__`` and ``__url__`` are fields like the others: the sample's key and its shard.

    Args:
        sample: a (decoded or raw) sample.
        *fields: the fields to pick.
        missing_ok: give None for a missing field instead of raising.

    Raises:
        MissingFieldError: a field (none of its alternatives) is in the sample; it is both a
            DecodeError and a KeyError.
    """
    if len(fields) != 1 or not isinstance(fields[0], str) or " " in fields[0]:
        fields = tuple_fields(fields)
    return tuple(_pick(sample, field, missing_ok) for field in fields)


class FieldPicker:
    """:func:`to_tuple` with its field names parsed once: ``FieldPicker(fields)(sample)`` is
    ``to_tuple(sample, *fields)``, at a fraction of the cost per sample; picklable.

    Example:
        >>> FieldPicker(("jpg;png", "cls"))({"png": b"...", "cls": 3})
        (b'...', 3)
    """

    def __init__(self, fields: Any, *, missing_ok: bool = False) -> None:
        self.fields = field_names(fields, what="tuple_fields")
        self.missing_ok = missing_ok
        # Without alternatives or missing_ok, one itemgetter picks them all (a KeyError falls
        # back to _pick, which names the missing field).
        plain = not missing_ok and not any(";" in field for field in self.fields)
        self._get = operator.itemgetter(*self.fields) if plain else None
        self._one = len(self.fields) == 1
        self.plain = self._get is not None
        """Whether each field is one name (no alternatives, no ``missing_ok``): then the
        values picked are those of ``fields``, in order."""

    def __call__(self, sample: Mapping[str, Any]) -> tuple[Any, ...]:
        if self._get is not None:
            try:
                value = self._get(sample)
            except KeyError:
                pass
            else:
                return (value,) if self._one else value
        return tuple(_pick(sample, field, self.missing_ok) for field in self.fields)

    def __repr__(self) -> str:
        return f"FieldPicker({self.fields!r})"


def _pick(sample: Mapping[str, Any], field: str, missing_ok: bool) -> Any:
    for alternative in field.split(";"):
        if alternative in sample:
            return sample[alternative]
    if missing_ok:
        return None
    present = sorted(name for name in sample if not name.startswith("__"))
    raise MissingFieldError(
        f"{_sample_name(sample)} has no field {field!r}; its fields are {present}: name one "
        "of those in tuple_fields (alternatives joined with ';', e.g. 'jpg;png'), or skip such "
        "samples with on_error='skip' (to_tuple() itself takes missing_ok=True)",
        url=sample.get("__url__"),
        key=sample.get("__key__"),
        field=field,
    )


__all__ = [
    "BASIC_DECODERS",
    "IMAGE_EXTENSIONS",
    "IMAGE_SPECS",
    "PICKLE_EXTENSIONS",
    "Decoder",
    "FieldDecodeError",
    "FieldDecoder",
    "FieldPicker",
    "MissingFieldError",
    "SampleError",
    "decode_image",
    "field_names",
    "to_tuple",
    "tuple_fields",
]
