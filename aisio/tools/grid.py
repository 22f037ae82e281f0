"""An image grid of samples drawn with Pillow alone, for ``aisio preview``.

matplotlib (:func:`aisio.tools.preview.image_grid`, for notebooks) takes about a second to
import; a command that writes one grid should not pay for it. :func:`render_grid` draws the
same cells (image, key, field and label) into a ``PIL.Image``, marking each image that does not
decode instead of failing; :func:`save_image` writes it in the format its file name says.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aisio.core.faults.errors import ConfigError

if TYPE_CHECKING:
    from PIL.Image import Image

    from aisio.tools.preview import SampleView

_TEXT_LINES = 3
_LINE = 12  # pixels per line of Pillow's default font


@dataclass
class Grid:
    """A rendered grid: the image, how many cells it drew, and the cells that did not decode
    (``"<key>.<field>: reason"``)."""

    image: Image
    cells: int
    unreadable: list[str] = field(default_factory=list)


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def render_grid(views: Sequence[SampleView], *, image_fields: Sequence[str] | None = None,
                label_field: str | None = None, cols: int | None = None, cell: int = 128
                ) -> Grid:
    """Returns a :class:`Grid` of the samples' image fields: one cell per sample and field,
    titled with the key, the field and the label; an image that does not decode is drawn as a
    crossed cell and listed in ``Grid.unreadable``."""
    from PIL import Image, ImageDraw

    cells = [(v, f) for v in views
             for f in (image_fields if image_fields is not None else v.image_fields())
             if f in v.fields]
    ncols = max(1, min(cols or 8, len(cells)))
    nrows = max(1, -(-len(cells) // ncols))
    pad, text_h = 4, _TEXT_LINES * _LINE
    width, height = cell + 2 * pad, cell + text_h + 2 * pad
    canvas = Image.new("RGB", (ncols * width, nrows * height), "white")
    draw = ImageDraw.Draw(canvas)
    chars = max(8, cell // 6)
    unreadable: list[str] = []
    for i, (view, name) in enumerate(cells):
        x, y = (i % ncols) * width + pad, (i // ncols) * height + pad
        try:
            with Image.open(io.BytesIO(view.fields[name])) as raw:
                raw.load()
                picture = raw.convert("RGB")
        except Exception as exc:
            reason = " ".join(str(exc).split()) or type(exc).__name__
            unreadable.append(f"{view.key}.{name}: {reason}")
            draw.rectangle((x, y, x + cell - 1, y + cell - 1), outline="red", width=2)
            draw.line((x, y, x + cell - 1, y + cell - 1), fill="red", width=2)
            draw.line((x, y + cell - 1, x + cell - 1, y), fill="red", width=2)
            draw.text((x + 6, y + cell // 2 - 6), "cannot decode", fill="red")
        else:
            scale = min(cell / picture.width, cell / picture.height)
            size = (max(1, round(picture.width * scale)), max(1, round(picture.height * scale)))
            small = scale >= 1
            picture = picture.resize(size, Image.Resampling.NEAREST if small
                                     else Image.Resampling.LANCZOS)
            canvas.paste(picture, (x + (cell - size[0]) // 2, y + (cell - size[1]) // 2))
        label_name = view.label_field(label_field)
        lines = [view.key if len(view.key) <= chars else "…" + view.key[-(chars - 1):], name]
        if label_name is not None:
            lines.append(f"{label_name}={view.label(label_name)}")
        for j, line in enumerate(lines):
            draw.text((x, y + cell + 2 + j * _LINE), _fit(line, chars), fill="black")
    if not cells:
        draw.text((pad, pad), "no image fields", fill="black")
    return Grid(canvas, len(cells), unreadable)


def image_format(path: str | Path) -> str:
    """Returns the Pillow format a file name asks for (``grid.jpg`` -> ``JPEG``; no extension:
    PNG), or raises ConfigError naming the extensions that work."""
    from PIL import Image

    suffix = Path(path).suffix.lower()
    if not suffix:
        return "PNG"
    known = Image.registered_extensions()
    wanted = known.get(suffix)
    usable = {ext for ext, fmt in known.items() if fmt in Image.SAVE}
    if wanted is None or wanted not in Image.SAVE:
        common = ", ".join(e for e in (".png", ".jpg", ".webp", ".gif", ".bmp", ".tif")
                           if e in usable)
        raise ConfigError(f"cannot write a grid as {suffix!r} ({path}): name the file with "
                          f"one of {common}")
    return wanted


def save_image(image: Image, path: str | Path, **options: Any) -> str:
    """Writes ``image`` to ``path`` in the format its extension names; returns that format."""
    fmt = image_format(path)
    if fmt in ("JPEG", "BMP") and image.mode != "RGB":
        image = image.convert("RGB")
    image.save(path, format=fmt, **options)
    return fmt


__all__ = ["Grid", "image_format", "render_grid", "save_image"]
