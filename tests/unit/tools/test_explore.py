"""The pure parts of exploration: units, percentiles, histograms, HTML views, progress, grids."""

from __future__ import annotations

import base64
import io
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from aisio.tools.display import (
    Progress,
    escape,
    html_table,
    human_bytes,
    parse_human_bytes,
    render_progress,
    text_table,
    thumbnail_uri,
)
from aisio.tools.explore import (
    Listing,
    ObjectEntry,
    SizeSpread,
    percentile,
    suffix_of,
    summary_of,
)
from aisio.tools.preview import Samples, SampleView, image_grid, text_preview

NASTY = "<script>alert('x')</script> & \"quoted\" 'single'.tar"


def png(mode: str = "RGB", size: tuple[int, int] = (12, 10)) -> bytes:
    out = io.BytesIO()
    Image.new(mode, size, color=128 if mode == "L" else (10, 200, 30)).save(out, "PNG")
    return out.getvalue()


# ---- human units -----------------------------------------------------------------------------
@pytest.mark.parametrize(("size", "text"), [
    (0, "0 B"), (1, "1 B"), (1023, "1023 B"), (1024, "1.00 KiB"), (1536, "1.50 KiB"),
    (10 * 1024, "10.0 KiB"), (100 * 1024, "100 KiB"), (1024**2 - 1, "1.00 MiB"),
    (5 * 1024**3, "5.00 GiB"), (3 * 1024**6, "3.00 EiB"), (2000 * 1024**6, "2000 EiB"),
    (-2048, "-2.00 KiB"),
])
def test_human_bytes(size: int, text: str) -> None:
    assert human_bytes(size) == text


@given(st.integers(min_value=0, max_value=2**70))
def test_human_bytes_round_trips_within_half_a_percent(size: int) -> None:
    text = human_bytes(size)
    number = text.split()[0]
    assert len(number.replace(".", "")) <= 4  # three significant digits (or 1000..1023 B)
    back = parse_human_bytes(text)
    if size < 1024:
        assert back == size
    else:
        assert math.isclose(back, size, rel_tol=0.005)


@given(st.integers(min_value=0, max_value=2**62), st.integers(min_value=0, max_value=2**62))
def test_human_bytes_is_monotonic(a: int, b: int) -> None:
    lo, hi = sorted((a, b))
    assert parse_human_bytes(human_bytes(lo)) <= parse_human_bytes(human_bytes(hi))


# ---- percentiles and histograms ---------------------------------------------------------------
@given(st.lists(st.integers(min_value=0, max_value=10**12), min_size=1, max_size=60),
       st.floats(min_value=0, max_value=100))
def test_percentile_matches_numpy(values: list[int], q: float) -> None:
    got = percentile(sorted(values), q)
    assert math.isclose(got, float(np.percentile(values, q)), rel_tol=1e-9, abs_tol=1e-6)


def test_percentile_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match=r"0\.\.100"):
        percentile([1], 101)


def test_size_spread() -> None:
    spread = SizeSpread.of([40, 10, 30, 20])
    assert spread is not None
    assert (spread.count, spread.min, spread.max, spread.mean) == (4, 10, 40, 25.0)
    assert spread.median == 25.0
    assert spread.percentiles[10] == pytest.approx(13.0)
    assert "median 25 B" in spread.describe() and spread.describe().startswith("min 10 B")
    assert SizeSpread.of([]) is None


@pytest.mark.parametrize(("name", "suffix"), [
    ("a/b.tar", ".tar"), ("x.tar.gz", ".tar.gz"), ("d.1/README", "(none)"), ("noext", "(none)"),
    (".hidden", "(none)"), ("t/0001.seg.PNG", ".seg.png"), ("dir/", "(none)"),
])
def test_suffix_of(name: str, suffix: str) -> None:
    assert suffix_of(name) == suffix


def test_summary_counts_bytes_and_shards() -> None:
    entries = [("ais://b/s-0.tar", 300), ("ais://b/s-1.tar", 100), ("ais://b/s-2.tar", 200),
               ("ais://b/index.json", 50), ("ais://b/README", 7)]
    summary = summary_of("ais://b/", entries)
    assert (summary.objects, summary.total_bytes) == (5, 657)
    assert list(summary.suffixes) == [".tar", "(none)", ".json"]  # most common, then by name
    assert summary.suffixes[".tar"] == (3, 600)
    assert summary.shard_kind == "shard"
    assert summary.shards is not None and summary.shards.median == 200
    text = repr(summary)
    assert text.startswith("ais://b/: 5 objects, 657 B") and "shard sizes: min 100 B" in text
    no_shards = summary_of("ais://b/", [("a.jpg", 1), ("b.jpg", 3)])
    assert no_shards.shard_kind == "object" and no_shards.shards is not None
    empty = summary_of("ais://e/", [])
    assert empty.shards is None and "0 objects" in repr(empty) and "<table>" in empty._repr_html_()


# ---- HTML and text views ----------------------------------------------------------------------
def test_escape_covers_quotes() -> None:
    assert escape(NASTY) == ("&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; "
                             "&quot;quoted&quot; &#x27;single&#x27;.tar")


def test_html_table_escapes_cells_but_not_raw_columns() -> None:
    out = html_table(["<h>", "raw"], [[NASTY, "<img src='ok'/>"]], caption="<c>", footer="&f",
                     raw_columns=(1,))
    assert "<script>" not in out and "&lt;script&gt;" in out
    assert "<img src='ok'/>" in out and "&lt;h&gt;" in out and "&lt;c&gt;" in out
    assert "&amp;f" in out


def test_listing_views_escape_names_and_report_totals() -> None:
    entries = [ObjectEntry(f"ais://b/{NASTY}-{i}", 1024 * i, {"version": '"1"'}) for i in range(3)]
    listing = Listing("ais://b/<p>", entries, missing=["ais://b/gone&"], truncated=False)
    assert listing.count == 3 and listing.total_bytes == 3072
    html = listing._repr_html_()
    assert "<script>" not in html and "gone&amp;" not in html  # missing names are only counted
    assert "&lt;script&gt;" in html and "ais://b/&lt;p&gt;" in html and "&quot;1&quot;" in html
    assert "3 objects, 3.00 KiB; 1 name of the template missing" in html
    text = repr(listing)
    assert text.splitlines()[0].split() == ["NAME", "SIZE", "VERSION"]
    assert text.endswith("3 objects, 3.00 KiB; 1 name of the template missing")
    doc = listing.to_json()
    assert doc["count"] == 3 and doc["bytes"] == 3072 and doc["objects"][1]["size"] == 1024
    assert doc["objects"][0]["version"] == '"1"'


def test_listing_html_shows_at_most_fifty_rows() -> None:
    listing = Listing("ais://b", [ObjectEntry(f"o{i}", 1) for i in range(120)], truncated=True)
    html = listing._repr_html_()
    assert html.count("<tr>") == 51 and "70 more not shown" in html and "limit reached" in html


def test_sample_view_html_escapes_and_embeds_thumbnails() -> None:
    sample = {"__key__": "<k&'\">", "__url__": "ais://b/<s>.tar", "png": png(),
              "mask.png": png("L"), "cls": b"3", "txt": b"<b>bold</b> & more",
              "bad.jpg": b"not an image", "bin": bytes(range(256))}
    view = SampleView.of(sample)
    assert view.image_fields() == ["png", "mask.png", "bad.jpg"]
    assert view.label() == "3" and view.label("txt") == "<b>bold</b> & more"
    assert view.sizes()["cls"] == 1
    html = view._repr_html_()
    assert "<b>bold" not in html and "&lt;b&gt;bold&lt;/b&gt; &amp; more" in html
    assert "&lt;k&amp;&#x27;&quot;&gt;" in html and "<k&" not in html
    thumbs = [part.split('"')[0] for part in html.split('src="')[1:]]
    assert len(thumbs) == 2  # the undecodable jpg gets none
    raw = base64.b64decode(thumbs[0].removeprefix("data:image/png;base64,"))
    assert raw.startswith(b"\x89PNG")
    listing_html = Samples([view, view])._repr_html_()
    assert listing_html.count("<tr>") == 3 and "<k&" not in listing_html
    assert "2 sample(s) from ais://b/&lt;s&gt;.tar" in listing_html
    assert repr(Samples()) == "(no samples)" and "cls 1 B" in repr(view)


def test_thumbnail_and_text_preview() -> None:
    uri = thumbnail_uri(png(size=(400, 200)), size=50)
    assert uri is not None
    with Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))) as thumb:
        assert max(thumb.size) == 50
    assert thumbnail_uri(b"garbage") is None
    assert text_preview(b"\xff\xfe") is None
    assert text_preview(b"a  b\n c") == "a b c"
    assert text_preview(b"x" * 100, limit=10) == "x" * 9 + "…"


def test_text_table_aligns_columns() -> None:
    out = text_table(["NAME", "SIZE"], [["a", "1 B"], ["long-name", "10.0 KiB"]], align_right=(1,))
    assert out.splitlines() == ["NAME           SIZE", "a               1 B",
                                "long-name  10.0 KiB"]


# ---- progress ---------------------------------------------------------------------------------
def test_render_progress() -> None:
    assert render_progress(0, 100, label="x", elapsed=0, width=4) == "x [....]   0% 0 B/100 B 0 B/s"
    line = render_progress(3 * 1024**2, 4 * 1024**2, label="get", elapsed=2.0, width=8)
    assert line == "get [######..]  75% 3.00 MiB/4.00 MiB 1.50 MiB/s"
    assert render_progress(5000, None, label="ls", elapsed=2, unit="objects") == (
        "ls 5,000 objects (2,500 objects/s)")
    assert render_progress(10, 5, label="x", elapsed=1, width=2).startswith("x [##] 100%")


def test_progress_draws_only_when_enabled() -> None:
    quiet = io.StringIO()
    with Progress("get", total=10, stream=quiet) as bar:  # StringIO is no TTY: off by default
        bar.update(10)
    assert quiet.getvalue() == ""
    loud = io.StringIO()
    with Progress("get", total=10, stream=loud, enabled=True, interval=0) as bar:
        bar.update(4)
        bar.update(6)
    out = loud.getvalue()
    assert out.startswith("\rget [") and out.endswith("\n") and "100%" in out
    assert bar.done == 10


# ---- image grids --------------------------------------------------------------------------------
def test_image_grid_draws_every_image_with_its_label() -> None:
    samples = [{"__key__": f"k{i}", "__url__": "u", "jpg": png(), "seg.png": png("L"),
                "cls": str(i).encode()} for i in range(3)]
    fig = image_grid(samples, cols=4)
    drawn = [ax for ax in fig.axes if ax.images]
    assert len(drawn) == 6 and len(fig.axes) == 8
    assert drawn[0].get_title() == "k0\njpg · cls=0"
    assert drawn[1].images[0].get_cmap().name == "gray"
    only = image_grid(samples, image_fields=["seg.png"], label_field="cls")
    assert len([ax for ax in only.axes if ax.images]) == 3


def test_image_grid_without_images_and_with_bad_images() -> None:
    fig = image_grid([{"__key__": "k", "txt": b"hi"}])
    assert not any(ax.images for ax in fig.axes) and fig.axes[0].texts
    # A bad image is marked in its cell; the others are drawn (issue #19).
    fig = image_grid([{"__key__": "k", "__url__": "ais://b/s.tar", "jpg": b"nope"},
                      {"__key__": "m", "jpg": png()}])
    marked = [ax for ax in fig.axes if any(t.get_text() == "cannot decode" for t in ax.texts)]
    assert len(marked) == 1 and len([ax for ax in fig.axes if ax.images]) == 1
