"""Tests for aisio.tools.preview: the image grid."""

from __future__ import annotations

import io

import pytest
from PIL import Image

URL = "ais://b/s-0001.tar"

def test_image_grid_fields_accept_a_string() -> None:
    pytest.importorskip("matplotlib")
    from aisio.tools.preview import image_grid

    png = io.BytesIO()
    Image.new("RGB", (4, 4)).save(png, "PNG")
    fig = image_grid([{"__key__": "a", "__url__": URL, "png": png.getvalue(), "cls": b"1"}],
                     image_fields="png")
    assert len([ax for ax in fig.axes if ax.images]) == 1
