"""Looking inside a shard: its first samples as tables and thumbnails, or as an image grid.

:func:`head` streams only the start of a shard (the connection is closed once ``n`` samples are
read) into a :class:`Samples` list of :class:`SampleView`, which Jupyter shows as a table with
thumbnails. :func:`image_grid` draws samples into a matplotlib Figure (pure: no I/O);
:func:`show_samples` does both in one call.
"""

from __future__ import annotations

import io
import json
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aisio.core.decode.decoders import IMAGE_EXTENSIONS, _extension, field_names
from aisio.core.faults.errors import ConfigError, DataError, DecodeError
from aisio.core.faults.policy import ErrorPolicy
from aisio.core.pipeline.fetch import Fetcher
from aisio.core.pipeline.parse import parse_streams
from aisio.core.store.config import AISConfig, resolve_config
from aisio.core.store.sources import ObjectRef, one_object
from aisio.core.store.urls import ETL, to_etl
from aisio.tools.display import escape, html_table, human_bytes, thumbnail_uri

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: Fields whose value is shown as a label, in order of preference.
LABEL_FIELDS = ("cls", "class", "label", "txt", "text", "json")
#: Characters of a text field shown in previews.
TEXT_PREVIEW = 40


def is_image_field(field: str) -> bool:
    """True when the field's extension is an image format (``jpg``, ``seg.png``, ...)."""
    return _extension(field).lower() in IMAGE_EXTENSIONS


def text_preview(data: bytes, limit: int = TEXT_PREVIEW) -> str | None:
    """Returns the start of ``data`` as text when it is UTF-8, else None."""
    try:
        text = data[: limit * 4].decode("utf-8")
    except UnicodeDecodeError:
        return None
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class SampleView:
    """One WebDataset sample as raw fields, shown as key, fields, sizes and thumbnails.

    Attributes:
        key: the sample's ``__key__``.
        url: the shard it came from.
        fields: ``{suffix: bytes}``.
    """

    key: str
    url: str
    fields: dict[str, bytes]

    @classmethod
    def of(cls, sample: dict[str, Any]) -> SampleView:
        """Returns the view of a sample dict as :func:`aisio.core.format.samples.group_samples`
        yields."""
        fields = {k: v for k, v in sample.items() if not k.startswith("__")}
        return cls(str(sample.get("__key__", "")), str(sample.get("__url__", "")), fields)

    def sizes(self) -> dict[str, int]:
        """Returns ``{suffix: size in bytes}``."""
        return {k: len(v) for k, v in self.fields.items()}

    def image_fields(self) -> list[str]:
        """Returns the suffixes holding images, in sample order."""
        return [k for k in self.fields if is_image_field(k)]

    def label_field(self, field: str | None = None) -> str | None:
        """Returns ``field`` if present, else the first of :data:`LABEL_FIELDS` present."""
        if field:
            return field if field in self.fields else None
        return next((f for f in LABEL_FIELDS if f in self.fields), None)

    def label(self, field: str | None = None) -> str | None:
        """Returns the label text (``field``, else the first of :data:`LABEL_FIELDS` present)."""
        name = self.label_field(field)
        return None if name is None else text_preview(self.fields[name])

    def describe(self) -> str:
        """Returns ``key: jpg 1.20 KiB, cls 1 B``."""
        fields = ", ".join(f"{k} {human_bytes(len(v))}" for k, v in self.fields.items())
        return f"{self.key}: {fields}"

    def __repr__(self) -> str:
        return f"<SampleView {self.describe()}>"

    def _preview_html(self, field: str, data: bytes) -> str:
        if is_image_field(field):
            uri = thumbnail_uri(data)
            if uri is not None:
                return f'<img src="{uri}" alt="{escape(field)}"/>'
        text = None if is_image_field(field) else text_preview(data)
        return escape(text) if text is not None else ""

    def _repr_html_(self) -> str:
        rows = [[k, human_bytes(len(v)), self._preview_html(k, v)] for k, v in self.fields.items()]
        return html_table(["field", "size", "preview"], rows, caption=f"{self.key} ({self.url})",
                          raw_columns=(2,), align_right=(1,))


class Samples(list[SampleView]):
    """A list of :class:`SampleView` that Jupyter shows as one table (a row per sample).

    Attributes:
        problem: when the shard could not be read to the ``n``-th sample (truncated, corrupt),
            the error that stopped it; the samples before it are in the list.
    """

    problem: DataError | None = None

    def __repr__(self) -> str:
        text = "\n".join(s.describe() for s in self) or "(no samples)"
        return text + (f"\n! {self.problem}" if self.problem is not None else "")

    def _repr_html_(self) -> str:
        rows = []
        for s in self:
            thumbs = "".join(s._preview_html(f, s.fields[f]) for f in s.image_fields())
            fields = ", ".join(f"{f} ({human_bytes(n)})" for f, n in s.sizes().items())
            rows.append([s.key, fields, s.label() or "", thumbs])
        caption = f"{len(self)} sample(s) from {self[0].url}" if self else "no samples"
        footer = f"stopped: {self.problem}" if self.problem is not None else ""
        return html_table(["key", "fields", "label", "images"], rows, caption=caption,
                          raw_columns=(3,), footer=footer)


def iter_shard(shard: str, *, endpoint: str | None = None, config: AISConfig | None = None,
               etl: ETL | str | None = None) -> Generator[dict[str, Any], None, None]:
    """Yields the raw samples of one shard as it streams; closing the generator stops the GET.

    The same reader and parser as the training pipelines, through the core: no torch import
    (which alone took seconds of ``aisio head``).
    """
    ref = ObjectRef(one_object(shard))
    fetcher = Fetcher(resolve_config(endpoint, config), to_etl(etl))
    yield from parse_streams([(ref.uri(), fetcher.open(ref))], ErrorPolicy())


def head(shard: str, n: int = 5, *, endpoint: str | None = None,
         config: AISConfig | None = None, etl: ETL | str | None = None) -> Samples:
    """Returns the first ``n`` samples of a shard (only that much of it is read).

    When the shard turns out truncated or corrupt after some samples, those are returned, with
    the error in ``.problem``; when not even one sample is readable, the error is raised.

    Example:
        >>> head("ais://bucket/train-0000.tar", 3, endpoint=endpoint)   # doctest: +SKIP
        sample00000: png 178 B, cls 1 B ...
    """
    if n < 1:
        raise ValueError(f"n={n} must be at least 1")
    out = Samples()
    samples = iter_shard(shard, endpoint=endpoint, config=config, etl=etl)
    try:
        for sample in samples:
            out.append(SampleView.of(sample))
            if len(out) >= n:
                break
    except DataError as exc:  # a truncated or corrupt shard: keep what was readable
        if not out:
            raise
        out.problem = exc
    finally:
        samples.close()
    return out


def _pixels(view: SampleView, field: str) -> tuple[Any, str | None]:
    """Returns (array, cmap) for imshow: gray images stay 2-D."""
    import numpy as np
    import PIL.Image

    try:
        with PIL.Image.open(io.BytesIO(view.fields[field])) as image:
            image.load()
            gray = image.mode in ("1", "L", "LA", "I", "I;16", "F")
            array = np.asarray(image.convert("L" if gray else "RGB"))
    except Exception as exc:
        raise DecodeError(f"cannot decode field '{field}' of sample {view.key!r} from "
                          f"{view.url} as an image: {exc}", url=view.url) from exc
    return array, ("gray" if gray else None)


def image_grid(samples: Sequence[SampleView] | Iterable[dict[str, Any]], *,
               image_fields: str | Sequence[str] | None = None, label_field: str | None = None,
               cols: int | None = None, cell: float = 2.0) -> Figure:
    """Returns a matplotlib Figure: one row of cells per sample and image field, titled by label.

    Args:
        samples: :class:`SampleView` objects or raw sample dicts.
        image_fields: the image suffixes to draw (default: every image field of each sample).
        label_field: the field shown under each image (default: ``cls`` or another label).
        cols: images per row (default: up to 8).
        cell: inches per image.

    An image field that does not decode is drawn as a cell saying so ("cannot decode").

    Raises:
        ConfigError: matplotlib is not installed.
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ConfigError("image grids need matplotlib: pip install matplotlib") from exc
    if image_fields is not None:
        image_fields = field_names(image_fields, what="image_fields")
    views = [s if isinstance(s, SampleView) else SampleView.of(s) for s in samples]
    cells = [(v, f) for v in views
             for f in (image_fields if image_fields is not None else v.image_fields())
             if f in v.fields]
    ncols = max(1, min(cols or 8, len(cells)))
    nrows = max(1, -(-len(cells) // ncols))
    fig = Figure(figsize=(cell * ncols, cell * nrows + 0.3 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax in axes.flat:
        ax.set_axis_off()
    for ax, (view, field) in zip(axes.flat, cells, strict=False):
        try:
            array, cmap = _pixels(view, field)
        except DecodeError:  # show the rest, and mark this one
            ax.text(0.5, 0.5, "cannot decode", ha="center", va="center", color="red")
        else:
            ax.imshow(array, cmap=cmap, interpolation="nearest")
        ax.set_title(_cell_title(view, field, label_field, cell), fontsize=8)
    if not cells:
        axes[0][0].text(0.5, 0.5, "no image fields", ha="center", va="center")
    return fig


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _cell_title(view: SampleView, field: str, label_field: str | None, cell: float) -> str:
    """Returns a grid cell's title, each line cut to the cell's width (JSON labels are long)."""
    width = max(8, int(cell * 72 / (8 * 0.62)))  # characters of an 8-point font per cell
    key = view.key if len(view.key) <= width else "…" + view.key[-(width - 1):]
    lines = [key, field]
    name = view.label_field(label_field)
    if name is not None:
        label = f"{name}={view.label(name)}"
        if len(field) + 3 + len(label) <= width:
            lines[1] = f"{field} · {label}"
        else:
            lines.append(label)
    return "\n".join(_fit(line, width) for line in lines)


def show_samples(shard: str, n: int = 16, *, endpoint: str | None = None,
                 config: AISConfig | None = None, image_fields: str | Sequence[str] | None = None,
                 label_field: str | None = None, cols: int | None = None) -> Figure:
    """Returns a matplotlib Figure of the first ``n`` samples' images with their labels.

    Example:
        >>> fig = show_samples("ais://b/train-0000.tar", 8, endpoint=endpoint)  # doctest: +SKIP
        >>> fig.savefig("grid.png")                                              # doctest: +SKIP
    """
    views = head(shard, n, endpoint=endpoint, config=config)
    return image_grid(views, image_fields=image_fields, label_field=label_field, cols=cols)


def to_jsonable(views: Iterable[SampleView]) -> list[dict[str, Any]]:
    """Returns ``[{"key", "url", "fields": {suffix: size}}]`` for ``--json`` output."""
    return [{"key": v.key, "url": v.url, "fields": v.sizes()} for v in views]


def dumps(views: Iterable[SampleView]) -> str:
    """Returns :func:`to_jsonable` as indented JSON."""
    return json.dumps(to_jsonable(views), indent=2)


__all__ = [
    "SampleView",
    "Samples",
    "head",
    "image_grid",
    "is_image_field",
    "iter_shard",
    "show_samples",
    "text_preview",
]
