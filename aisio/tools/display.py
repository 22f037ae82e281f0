"""Presentation helpers: human units, HTML tables for Jupyter, thumbnails, a stderr progress bar.

Everything here is pure (no network, no torch); PIL is imported only by :func:`thumbnail_uri`.
"""

from __future__ import annotations

import base64
import html
import io
import sys
import time
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Any, TextIO

_IEC_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def human_bytes(size: float) -> str:
    """Returns ``size`` bytes in IEC units with three significant digits.

    Example:
        >>> [human_bytes(n) for n in (0, 1023, 1024, 1536, 10 * 1024**2, 1023.99 * 1024)]
        ['0 B', '1023 B', '1.00 KiB', '1.50 KiB', '10.0 MiB', '1.00 MiB']
    """
    if size < 0:
        return "-" + human_bytes(-size)
    if size < 1024:
        return f"{int(size)} B"
    value = float(size)
    for unit in _IEC_UNITS[1:]:
        value /= 1024.0
        text = _three_digits(value)
        if float(text) < 1024 or unit == _IEC_UNITS[-1]:
            return f"{text} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover


def _three_digits(value: float) -> str:
    if round(value, 2) < 10:
        return f"{value:.2f}"
    if round(value, 1) < 100:
        return f"{value:.1f}"
    return f"{value:.0f}"


def parse_human_bytes(text: str) -> float:
    """Returns the number of bytes a :func:`human_bytes` string stands for (approximately).

    Example:
        >>> parse_human_bytes("1.50 KiB")
        1536.0
    """
    number, _, unit = text.strip().partition(" ")
    return float(number) * 1024 ** _IEC_UNITS.index(unit or "B")


def human_count(count: int) -> str:
    """Returns an integer with thousands separators: ``12,345``."""
    return f"{count:,}"


def plural(count: int, noun: str) -> str:
    """Returns ``"1 object"`` / ``"3 objects"``."""
    return f"{human_count(count)} {noun}{'' if count == 1 else 's'}"


def escape(value: Any) -> str:
    """Returns ``str(value)`` escaped for HTML text and attribute values (quotes included)."""
    return html.escape(str(value), quote=True)


def html_table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    caption: str = "",
    footer: str = "",
    raw_columns: Iterable[int] = (),
    align_right: Iterable[int] = (),
) -> str:
    """Returns an HTML table; every cell is escaped unless its column is in ``raw_columns``.

    Args:
        headers: the column titles.
        rows: the cells, row by row.
        caption: a line above the table (escaped).
        footer: a line below the table (escaped).
        raw_columns: indexes of columns whose cells are already HTML (e.g. ``<img>`` tags).
        align_right: indexes of numeric columns.
    """
    raw = set(raw_columns)
    right = set(align_right)

    def cell(tag: str, i: int, value: Any) -> str:
        style = ' style="text-align:right"' if i in right else ' style="text-align:left"'
        content = str(value) if i in raw else escape(value)
        return f"<{tag}{style}>{content}</{tag}>"

    parts = ['<div class="aisio">']
    if caption:
        parts.append(f"<p><b>{escape(caption)}</b></p>")
    parts.append("<table>")
    parts.append("<thead><tr>" + "".join(cell("th", i, h) for i, h in enumerate(headers))
                 + "</tr></thead><tbody>")
    for row in rows:
        parts.append("<tr>" + "".join(cell("td", i, v) for i, v in enumerate(row)) + "</tr>")
    parts.append("</tbody></table>")
    if footer:
        parts.append(f"<p>{escape(footer)}</p>")
    parts.append("</div>")
    return "\n".join(parts)


def text_table(headers: Sequence[str], rows: Sequence[Sequence[Any]],
               align_right: Iterable[int] = ()) -> str:
    """Returns a plain-text table with columns padded to their widest cell."""
    right = set(align_right)
    cells = [[str(h) for h in headers], *[[str(v) for v in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        padded = [v.rjust(w) if i in right else v.ljust(w)
                  for i, (v, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(padded).rstrip())
    return "\n".join(lines)


def thumbnail_uri(data: bytes, size: int = 96) -> str | None:
    """Returns a ``data:image/png;base64,...`` URI of a thumbnail of an encoded image, or None.

    None means ``data`` is not an image PIL can read (the caller shows its size instead).
    """
    import PIL.Image

    try:
        with PIL.Image.open(io.BytesIO(data)) as image:
            image.load()
            thumb = image.convert("RGBA" if image.mode in ("RGBA", "LA", "P") else "RGB")
    except Exception:  # any undecodable bytes: no thumbnail
        return None
    thumb.thumbnail((size, size))
    out = io.BytesIO()
    thumb.save(out, "PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode("ascii")


def render_progress(done: float, total: float | None, *, label: str, elapsed: float,
                    unit: str = "B", width: int = 24) -> str:
    """Returns one progress line: bar, percentage, amount and rate (bytes or items).

    Example:
        >>> render_progress(512, 1024, label="get", elapsed=1.0, width=10)
        'get [#####.....]  50% 512 B/1.00 KiB 512 B/s'
        >>> render_progress(1200, None, label="ls", elapsed=2.0, unit="objects")
        'ls 1,200 objects (600 objects/s)'
    """
    fmt = human_bytes if unit == "B" else (lambda n: human_count(int(n)))
    rate = done / elapsed if elapsed > 0 else 0.0
    if total is None or total <= 0:
        suffix = f" {unit}" if unit != "B" else ""
        return f"{label} {fmt(done)}{suffix} ({fmt(rate)} {unit}/s)"
    frac = min(1.0, done / total)
    filled = round(frac * width)
    bar = "#" * filled + "." * (width - filled)
    rate_text = f"{fmt(rate)}/s" if unit == "B" else f"{fmt(rate)} {unit}/s"
    return f"{label} [{bar}] {frac:4.0%} {fmt(done)}/{fmt(total)} {rate_text}"


class Progress:
    """A dependency-free progress bar on stderr, drawn only when stderr is a terminal.

    Args:
        label: the word in front of the bar.
        total: the amount expected (None: unknown, show a counter).
        unit: ``"B"`` for bytes, else the name of the items counted.
        stream: where to draw (default ``sys.stderr``).
        enabled: force on/off (default: whether ``stream`` is a TTY).
        interval: seconds between redraws.

    Example:
        >>> with Progress("get", total=10, enabled=False) as bar:
        ...     bar.update(10)
    """

    def __init__(self, label: str, total: float | None = None, *, unit: str = "B",
                 stream: TextIO | None = None, enabled: bool | None = None,
                 interval: float = 0.1) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            enabled = bool(isatty and isatty())
        self.enabled = enabled
        self.interval = interval
        self.done = 0.0
        self._start = time.monotonic()
        self._last = 0.0
        self._width = 0

    def update(self, amount: float) -> None:
        """Adds ``amount`` to the progress and redraws at most every ``interval`` seconds."""
        self.done += amount
        now = time.monotonic()
        if self.enabled and now - self._last >= self.interval:
            self._last = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        line = render_progress(self.done, self.total, label=self.label,
                               elapsed=now - self._start, unit=self.unit)
        pad = max(0, self._width - len(line))
        self._width = len(line)
        self.stream.write("\r" + line + " " * pad)
        self.stream.flush()

    def close(self) -> None:
        """Draws the final state and ends the line (erases nothing that was not drawn)."""
        if self.enabled and self._width:
            self._draw(time.monotonic())
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = [
    "Progress",
    "escape",
    "html_table",
    "human_bytes",
    "human_count",
    "parse_human_bytes",
    "plural",
    "render_progress",
    "text_table",
    "thumbnail_uri",
]


def iso_time(value: str) -> str:
    """Returns an AIStore time as ISO 8601 (``2026-11-25T10:04:00+00:00``): nanoseconds since
    the epoch (HEAD's ``atime``), or the listing's RFC 822 form in UTC (``25 Nov 26 10:04
    UTC``, whose day, month and year read differently around the world); else as it is."""
    if value.isdigit():
        when = datetime.fromtimestamp(int(value) / 1e9, tz=timezone.utc)
    elif value.endswith((" UTC", " GMT")):
        try:
            when = datetime.strptime(value[:-4], "%d %b %y %H:%M").replace(tzinfo=timezone.utc)
        except ValueError:
            return value
    else:
        return value
    return when.isoformat(timespec="seconds")
