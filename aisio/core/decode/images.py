"""Decoding of image fields into PIL images, numpy arrays or torch tensors.

The image specs (as in ``webdataset``; ``l`` images are 2-D, ``H x W``):

* ``pil``/``pilrgb``, ``pill``, ``pilrgba``: a ``PIL.Image`` converted to RGB, L or RGBA;
* ``rgb8``, ``l8``, ``rgba8``: ``uint8`` numpy arrays, ``H x W x C`` (``H x W`` for ``l8``);
* ``rgb``, ``l``, ``rgba``: ``float32`` numpy arrays in ``[0, 1]``, same shapes;
* ``torchrgb8``, ``torchl8``, ``torchrgba8``: ``uint8`` tensors, ``C x H x W`` (``H x W`` for l);
* ``torchrgb`` (alias ``torch``), ``torchl``, ``torchrgba``: ``float32`` tensors in ``[0, 1]``.

Every image is decoded with PIL, except a JPEG decoded to an RGB array or tensor when
the ``simplejpeg`` package is installed (``pip install 'aisio[jpeg]'``):
it calls libjpeg-turbo, as PIL does, with the same settings, so the pixels are the same, without
PIL's image object and its copies between the decoder and the array. A CMYK JPEG (which PIL
converts its own way) and a file simplejpeg refuses (a corrupt one) go to PIL, which decides.
numpy, PIL, simplejpeg and torch are imported only when a field needs them.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple


class _ImageSpec(NamedTuple):
    kind: str  # "pil", "numpy" or "torch"
    floating: bool  # float32 in [0, 1] rather than uint8 (numpy and torch only)
    mode: str  # PIL mode: "RGB", "L" or "RGBA"


IMAGE_SPECS: Mapping[str, _ImageSpec] = MappingProxyType(
    {
        "pil": _ImageSpec("pil", False, "RGB"),
        "pilrgb": _ImageSpec("pil", False, "RGB"),
        "pill": _ImageSpec("pil", False, "L"),
        "pilrgba": _ImageSpec("pil", False, "RGBA"),
        "rgb8": _ImageSpec("numpy", False, "RGB"),
        "l8": _ImageSpec("numpy", False, "L"),
        "rgba8": _ImageSpec("numpy", False, "RGBA"),
        "rgb": _ImageSpec("numpy", True, "RGB"),
        "l": _ImageSpec("numpy", True, "L"),
        "rgba": _ImageSpec("numpy", True, "RGBA"),
        "torchrgb8": _ImageSpec("torch", False, "RGB"),
        "torchl8": _ImageSpec("torch", False, "L"),
        "torchrgba8": _ImageSpec("torch", False, "RGBA"),
        "torchrgb": _ImageSpec("torch", True, "RGB"),
        "torch": _ImageSpec("torch", True, "RGB"),
        "torchl": _ImageSpec("torch", True, "L"),
        "torchrgba": _ImageSpec("torch", True, "RGBA"),
    }
)
"""The image specs :class:`~aisio.core.decode.decoders.Decoder` accepts, by name."""

IMAGE_EXTENSIONS = frozenset(
    ("jpg", "jpeg", "png", "ppm", "pgm", "pbm", "pnm", "bmp", "webp", "tif", "tiff", "gif")
)
"""Extensions decoded as images."""

_JPEG_START = b"\xff\xd8\xff"  # SOI and the first marker: a JPEG whatever its extension says
_UNKNOWN: Any = object()
_simplejpeg: Any = _UNKNOWN  # the simplejpeg module, None when it is not installed


def jpeg_decoder() -> Callable[[bytes], Any] | None:
    """Returns the function decoding a JPEG's bytes to an ``H x W x 3`` uint8 RGB array without
    PIL, with PIL's settings (None where PIL's own conversion applies: CMYK, YCCK), or None when
    simplejpeg is not installed."""
    global _simplejpeg
    if _simplejpeg is _UNKNOWN:
        try:
            import simplejpeg  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            _simplejpeg = None
        else:
            _simplejpeg = simplejpeg
    if _simplejpeg is None:
        return None
    return _decode_jpeg_rgb


_SAME_AS_PIL = frozenset(("YCbCr", "Gray"))
"""JPEG colour spaces libjpeg turns into RGB as PIL does (PIL converts CMYK its own way)."""


def _decode_jpeg_rgb(data: bytes) -> Any:
    if _simplejpeg.decode_jpeg_header(data)[2] not in _SAME_AS_PIL:
        return None
    # Accurate DCT and fancy upsampling, libjpeg's defaults, which PIL keeps; strict: a file
    # libjpeg only warns about raises here, and PIL then decides, as it would without simplejpeg.
    return _simplejpeg.decode_jpeg(data, colorspace="RGB", fastdct=False, fastupsample=False,
                                   strict=True)


def _rgb_array(data: bytes, kind: str, mode: str) -> Any:
    """Returns the JPEG in ``data`` as an RGB array decoded without PIL, or None where PIL
    decodes it (not a JPEG, another mode, no simplejpeg, or a file simplejpeg refuses or would
    convert otherwise than PIL)."""
    if kind == "pil" or mode != "RGB" or not data.startswith(_JPEG_START):
        return None
    decode = jpeg_decoder()
    if decode is None:
        return None
    try:
        return decode(data)
    except Exception:  # a corrupt or unusual file: PIL decodes it or says what is wrong
        return None


def _pil_array(image: Any, mode: str, *, copy: bool) -> Any:
    """Returns an opened PIL image in ``mode`` as an array: writable when ``copy``, else
    perhaps a read-only view (the caller copies it). An image already in ``mode`` needs no
    converted copy."""
    import numpy as np

    if image.mode != mode:
        image = image.convert(mode)
    return np.array(image) if copy else np.asarray(image)


def decode_image(data: bytes, spec: str) -> Any:
    """Returns the image in ``data`` decoded as image spec ``spec`` says (see module doc)."""
    kind, floating, mode = IMAGE_SPECS[spec]
    array = _rgb_array(data, kind, mode)
    if array is None:
        import PIL.Image

        with PIL.Image.open(io.BytesIO(data)) as opened:
            opened.load()
            if kind == "pil":
                return opened.convert(mode)
            array = _pil_array(opened, mode, copy=kind == "numpy" and not floating)
    import numpy as np

    if floating:
        array = array.astype(np.float32) / np.float32(255.0)
    if kind == "numpy":
        return array
    import torch

    if array.ndim == 3:
        array = np.ascontiguousarray(array.transpose(2, 0, 1))
    elif not array.flags.writeable:
        array = array.copy()
    return torch.from_numpy(array)


__all__ = ["IMAGE_EXTENSIONS", "IMAGE_SPECS", "decode_image", "jpeg_decoder"]
