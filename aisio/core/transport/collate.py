"""Collating a batch, and saying which samples did not fit when it fails.

torch's ``default_collate`` stacks the images of a batch; when they differ in size it fails
deep inside ``torch.stack`` ("stack expects each tensor to be equal size") naming neither a
shard nor a sample. :class:`BatchCollate` wraps any collate function: on success it costs
nothing; on failure it looks at the batch and, when fields differ in shape, raises
:class:`MixedShapesError` naming the field, each shape and the samples that have it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from aisio.core.faults.errors import DecodeError

#: Samples named per shape in the message.
_SHOW = 3


class MixedShapesError(DecodeError):
    """The samples of a batch hold arrays (images) of different shapes, so they cannot be
    stacked into one tensor.

    Attributes:
        field: the position (tuple index or dict key) of the field whose shapes differ.
        shapes: ``{shape: [sample names]}`` for each shape in the batch.
    """

    field: Any = None
    shapes: dict[tuple[int, ...], list[str]] | None = None


def _shape(value: Any) -> tuple[int, ...] | None:
    shape = getattr(value, "shape", None)
    if shape is not None:
        return tuple(int(n) for n in shape)
    size = getattr(value, "size", None)  # a PIL image: (width, height)
    if isinstance(size, tuple) and hasattr(value, "mode"):
        return (int(size[1]), int(size[0]))
    return None


def _fields(value: Any) -> list[tuple[Any, Any]]:
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray)):
        return list(enumerate(value))
    if isinstance(value, dict):
        return [(k, v) for k, v in value.items() if not str(k).startswith("__")]
    return [(None, value)]


def _show(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) or "scalar"


def mixed_shapes(values: Sequence[Any], names: Sequence[str] | None = None
                 ) -> MixedShapesError | None:
    """Returns the error describing the first field whose shapes differ across ``values``
    (samples: tuples, dicts or single values), or None when every field agrees.

    Example:
        >>> import numpy as np
        >>> err = mixed_shapes([(np.zeros((2, 2)), 1), (np.zeros((3, 2)), 0)], ["a", "b"])
        >>> err.field, sorted(err.shapes)
        (0, [(2, 2), (3, 2)])
    """
    names = list(names) if names is not None else [f"item {i} of the batch"
                                                   for i in range(len(values))]
    by_field: dict[Any, dict[tuple[int, ...], list[str]]] = {}
    for value, name in zip(values, names, strict=False):
        for key, item in _fields(value):
            shape = _shape(item)
            if shape is not None:
                by_field.setdefault(key, {}).setdefault(shape, []).append(name)
    for key, shapes in by_field.items():
        if len(shapes) < 2:
            continue
        parts = []
        for shape, who in sorted(shapes.items(), key=lambda kv: -len(kv[1])):
            more = f", and {len(who) - _SHOW} more" if len(who) > _SHOW else ""
            parts.append(f"{_show(shape)} in {len(who)} ({', '.join(who[:_SHOW])}{more})")
        what = "the samples" if key is None else f"field {key!r} of the samples"
        err = MixedShapesError(
            f"cannot stack a batch: {what} differ in shape: {'; '.join(parts)}; resize them to "
            "one size (a custom decoder, Decoder(custom={...})), batch them with collate=False "
            "(lists), or use batch_size=None")
        err.field = key
        err.shapes = {shape: list(who) for shape, who in shapes.items()}
        return err
    return None


class BatchCollate:
    """Calls ``collate`` on a batch; when it fails and the batch's fields differ in shape,
    raises :class:`MixedShapesError` naming them instead (picklable when ``collate`` is).

    Args:
        collate: the collate function (e.g. torch's ``default_collate``).
        names: called with the batch's length, returns a name for each of its samples
            (``"sample #4 of ais://b/s-1.tar"``); by default their places in the batch.
    """

    def __init__(self, collate: Callable[[Any], Any],
                 names: Callable[[int], Sequence[str]] | None = None) -> None:
        self.collate = collate
        self.names = names

    def __call__(self, values: Any) -> Any:
        try:
            return self.collate(values)
        except (RuntimeError, ValueError, TypeError) as exc:
            names = self.names(len(values)) if self.names is not None else None
            error = mixed_shapes(list(values), names)
            if error is None:
                raise
            raise error from exc


def sample_name(shards: Sequence[Any], position: tuple[int, int, int, bool]) -> str:
    """Returns ``"sample #4 of ais://b/s-1.tar"`` for a sample's position in an epoch."""
    index, ordinal = position[0], position[1]
    shard: Any = shards[index] if 0 <= index < len(shards) else index
    name = shard.uri() if hasattr(shard, "uri") else str(shard)
    return f"sample #{ordinal} of {name}"


__all__ = ["BatchCollate", "MixedShapesError", "mixed_shapes", "sample_name"]
