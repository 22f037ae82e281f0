"""Tests for aisio.core.decode.images: JPEGs decoded without PIL (simplejpeg, in both test
environments) give PIL's pixels, and PIL decodes whatever simplejpeg does not."""

from __future__ import annotations

import io
import sys
from typing import Any

import numpy as np
import pytest

from aisio.core.decode import images
from aisio.core.decode.decoders import Decoder, FieldDecodeError
from aisio.core.decode.images import decode_image, jpeg_decoder

PIL_Image = pytest.importorskip("PIL.Image")
torch = pytest.importorskip("torch")


def _photo(height: int = 23, width: int = 37) -> np.ndarray:
    """Smooth gradients plus noise (a photo's mix of low and high frequencies)."""
    rng = np.random.default_rng(1)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 // width, y * 255 // height, (x + y) * 127 // (height + width)], -1)
    return np.clip(base + rng.integers(-40, 40, base.shape), 0, 255).astype(np.uint8)


def jpeg(mode: str = "RGB", **options: Any) -> bytes:
    out = io.BytesIO()
    PIL_Image.fromarray(_photo()).convert(mode).save(out, "JPEG", **options)
    return out.getvalue()


def pil_rgb(data: bytes) -> np.ndarray:
    """The pixels PIL gives: what aisio gave before simplejpeg, and what webdataset gives."""
    with PIL_Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


# Chroma subsampling 4:2:0 (PIL's default), 4:2:2, 4:4:4; progressive; high quality; a
# grayscale JPEG (replicated into R, G and B); a size that is no multiple of the 8 or 16-pixel
# blocks (the fancy upsampling at the edges).
JPEGS = {
    "420": jpeg(),
    "422": jpeg(subsampling=1),
    "444": jpeg(subsampling=0),
    "progressive": jpeg(progressive=True),
    "q98": jpeg(quality=98),
    "gray": jpeg("L"),
}


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forgets whether simplejpeg was found (the test decides what importing it does)."""
    monkeypatch.setattr(images, "_simplejpeg", images._UNKNOWN)


@pytest.mark.parametrize("name", sorted(JPEGS))
def test_simplejpeg_gives_pils_pixels(name: str) -> None:
    decode = jpeg_decoder()
    assert decode is not None, "simplejpeg is in both test environments (the jpeg extra)"
    data = JPEGS[name]
    ours = decode(data)
    assert ours.dtype == np.uint8 and ours.shape == (23, 37, 3)
    assert np.array_equal(ours, pil_rgb(data))


@pytest.mark.parametrize("spec", ["rgb8", "rgb", "torchrgb8", "torchrgb"])
def test_rgb_specs_of_a_jpeg_go_through_simplejpeg(spec: str, monkeypatch: pytest.MonkeyPatch
                                                   ) -> None:
    calls: list[bytes] = []
    real = images._decode_jpeg_rgb

    def spy(data: bytes) -> Any:
        calls.append(data)
        return real(data)

    monkeypatch.setattr(images, "jpeg_decoder", lambda: spy)
    data = JPEGS["420"]
    ours = decode_image(data, spec)
    assert calls == [data]
    expected = pil_rgb(data)
    if spec.startswith("torch"):
        assert ours.is_contiguous() and tuple(ours.shape) == (3, 23, 37)
        ours = ours.permute(1, 2, 0).numpy()
    if spec.endswith("8"):
        assert ours.dtype == np.uint8 and np.array_equal(ours, expected)
    else:
        assert ours.dtype == np.float32 and np.array_equal(ours, expected / np.float32(255.0))


@pytest.mark.parametrize("spec", ["pil", "l8", "torchl8", "rgba8", "torchrgba8"])
def test_other_specs_and_formats_stay_with_pil(spec: str, monkeypatch: pytest.MonkeyPatch
                                               ) -> None:
    calls: list[bytes] = []
    monkeypatch.setattr(images, "jpeg_decoder", lambda: calls.append)
    decode_image(JPEGS["420"], spec)  # L and RGBA: PIL's conversions; pil: PIL's image
    png = io.BytesIO()
    PIL_Image.fromarray(_photo()).save(png, "PNG")
    decode_image(png.getvalue(), "torchrgb8")  # not a JPEG, whatever its field is called
    assert calls == []


def test_a_cmyk_jpeg_is_converted_by_pil() -> None:
    # libjpeg converts CMYK to RGB otherwise than PIL (off by one here and there).
    data = jpeg("CMYK")
    assert np.array_equal(decode_image(data, "rgb8"), pil_rgb(data))


@pytest.mark.usefixtures("fresh")
def test_without_simplejpeg_pil_decodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "simplejpeg", None)  # as if it were not installed
    assert jpeg_decoder() is None
    for data in JPEGS.values():
        assert np.array_equal(decode_image(data, "rgb8"), pil_rgb(data))
        tensor = decode_image(data, "torchrgb8")
        assert tensor.is_contiguous()
        assert np.array_equal(tensor.permute(1, 2, 0).numpy(), pil_rgb(data))


def test_a_corrupt_jpeg_is_still_a_decode_error() -> None:
    data = JPEGS["420"]
    broken = data[: len(data) // 2]  # PIL: "image file is truncated"
    with pytest.raises(FieldDecodeError, match="OSError"):
        Decoder("torchrgb8")({"__key__": "a", "jpg": broken})


def test_pil_arrays_are_writable_and_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(images, "jpeg_decoder", lambda: None)
    png = io.BytesIO()
    PIL_Image.fromarray(_photo()).save(png, "PNG")
    for spec in ("rgb8", "l8"):
        array = decode_image(png.getvalue(), spec)
        array[0, 0] = 0  # a read-only view of PIL's bytes would raise
