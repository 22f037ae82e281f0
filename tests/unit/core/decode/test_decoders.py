"""Tests for aisio.core.decode.decoders: field decoders, the Decoder class and to_tuple."""

from __future__ import annotations

import gzip
import io
import json
import pickle
import sys
from typing import Any

import numpy as np
import pytest

from aisio.core.decode.decoders import (
    Decoder,
    FieldDecodeError,
    FieldPicker,
    MissingFieldError,
    field_names,
    to_tuple,
)
from aisio.core.faults.errors import AISIOError, ConfigError, DecodeError, LoaderUnavailableError
from aisio.core.pipeline.stages import SampleStage
from aisio.datapipes.pipeline import ToTuple

PIL_Image = pytest.importorskip("PIL.Image")
torch = pytest.importorskip("torch")

URL = "ais://bucket/shard-000.tar"
HEIGHT, WIDTH = 3, 4


def _pixels() -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, size=(HEIGHT, WIDTH, 3), dtype=np.uint8)


def encode_image(fmt: str, mode: str = "RGB") -> bytes:
    """Returns a small image (the fixed test pixels) encoded in ``fmt``."""
    out = io.BytesIO()
    PIL_Image.fromarray(_pixels(), "RGB").convert(mode).save(out, format=fmt)
    return out.getvalue()


PNG = encode_image("PNG")
JPEG = encode_image("JPEG")


def sample(**fields: Any) -> dict[str, Any]:
    return {"__key__": "dir/0001", "__url__": URL, **fields}


def upper(data: bytes) -> str:
    """A module-level (picklable) custom decoder."""
    return data.decode().upper()


# ------------------------------------------------------------------------------------- images


def test_pil_spec_gives_rgb_image() -> None:
    image = Decoder("pil")(sample(png=PNG))["png"]
    assert isinstance(image, PIL_Image.Image)
    assert (image.mode, image.size) == ("RGB", (WIDTH, HEIGHT))
    assert np.array_equal(np.asarray(image), _pixels())


@pytest.mark.parametrize(("spec", "mode"), [("pill", "L"), ("pilrgb", "RGB"), ("pilrgba", "RGBA")])
def test_pil_mode_specs(spec: str, mode: str) -> None:
    assert Decoder(spec)(sample(png=PNG))["png"].mode == mode


def test_rgb8_and_rgb() -> None:
    decoded = Decoder("rgb8")(sample(png=PNG))["png"]
    assert decoded.dtype == np.uint8 and decoded.shape == (HEIGHT, WIDTH, 3)
    assert np.array_equal(decoded, _pixels())
    floats = Decoder("rgb")(sample(png=PNG))["png"]
    assert floats.dtype == np.float32 and floats.shape == (HEIGHT, WIDTH, 3)
    assert floats.min() >= 0.0 and floats.max() <= 1.0
    assert np.allclose(floats, _pixels() / 255.0)


def test_l8_and_l() -> None:
    gray = np.asarray(PIL_Image.fromarray(_pixels(), "RGB").convert("L"))
    l8 = Decoder("l8")(sample(png=PNG))["png"]
    assert l8.dtype == np.uint8 and l8.shape == (HEIGHT, WIDTH)
    assert np.array_equal(l8, gray)
    floats = Decoder("l")(sample(png=PNG))["png"]
    assert floats.dtype == np.float32 and np.allclose(floats, gray / 255.0)


def test_torch_specs() -> None:
    rgb = Decoder("torchrgb")(sample(png=PNG))["png"]
    assert isinstance(rgb, torch.Tensor)
    assert rgb.dtype == torch.float32 and tuple(rgb.shape) == (3, HEIGHT, WIDTH)
    assert torch.allclose(rgb, torch.from_numpy(_pixels()).permute(2, 0, 1).float() / 255)
    rgb8 = Decoder("torchrgb8")(sample(png=PNG))["png"]
    assert rgb8.dtype == torch.uint8 and rgb8.is_contiguous()
    assert torch.equal(rgb8, torch.from_numpy(_pixels()).permute(2, 0, 1))
    l8 = Decoder("torchl8")(sample(png=PNG))["png"]
    assert l8.dtype == torch.uint8 and tuple(l8.shape) == (HEIGHT, WIDTH)
    assert Decoder("torchl")(sample(png=PNG))["png"].dtype == torch.float32
    assert torch.equal(Decoder("torch")(sample(png=PNG))["png"], rgb)


@pytest.mark.parametrize(
    "spec", ["pil", "pill", "rgb8", "rgb", "l8", "l", "rgba8", "torchrgb8", "torchrgb", "torchl8"]
)
@pytest.mark.parametrize("image", [PNG, JPEG], ids=["png", "jpeg"])
def test_image_specs_match_webdataset(spec: str, image: bytes) -> None:
    autodecode = pytest.importorskip("webdataset.autodecode")
    theirs = autodecode.imagehandler(spec)("x.jpg", image)
    ours = Decoder(spec)(sample(jpg=image))["jpg"]
    if spec.startswith("pil"):
        assert ours.mode == theirs.mode
        assert np.array_equal(np.asarray(ours), np.asarray(theirs))
    elif spec.startswith("torch"):
        assert ours.dtype == theirs.dtype and torch.equal(ours, theirs)
    else:
        assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "BMP", "GIF", "TIFF", "WEBP", "PPM"])
def test_image_formats_by_last_extension(fmt: str) -> None:
    field = "seg." + {"JPEG": "jpg", "TIFF": "tif"}.get(fmt, fmt.lower())
    decoded = Decoder("rgb8")(sample(**{field: encode_image(fmt)}))[field]
    assert decoded.shape == (HEIGHT, WIDTH, 3)


def test_grayscale_source_to_rgb() -> None:
    decoded = Decoder("rgb8")(sample(png=encode_image("PNG", "L")))["png"]
    assert decoded.shape == (HEIGHT, WIDTH, 3)


def test_image_none_leaves_images_as_bytes() -> None:
    decoded = Decoder(None)(sample(jpg=JPEG, cls=b"3"))
    assert decoded["jpg"] == JPEG and decoded["cls"] == 3


def test_unknown_image_spec() -> None:
    with pytest.raises(ConfigError, match="unknown image spec 'bgr'"):
        Decoder("bgr")


def test_broken_image_names_url_key_and_field() -> None:
    with pytest.raises(DecodeError) as info:
        Decoder("rgb8")(sample(**{"seg.jpg": b"not a jpeg"}))
    message = str(info.value)
    assert URL in message and "'dir/0001'" in message and "'seg.jpg'" in message
    assert info.value.url == URL
    assert info.value.__cause__ is not None


# ----------------------------------------------------------------------------- other suffixes


def test_basic_decoders() -> None:
    array = np.arange(6, dtype=np.int16).reshape(2, 3)
    npy, npz = io.BytesIO(), io.BytesIO()
    np.save(npy, array)
    np.savez(npz, a=array, b=array * 2)
    raw = sample(
        cls=b"7\n",
        cls2=b"8",
        index=b"9",
        inx=b"10",
        id=b"11",
        txt="héllo".encode(),
        text=b"t",
        transcript=b"words",
        json=b'{"a": [1, 2]}',
        jsn=b"[3]",
        npy=npy.getvalue(),
        npz=npz.getvalue(),
        bin=b"\x00\x01",
    )
    decoded = Decoder()(raw)
    assert decoded["cls"] == 7 and decoded["cls2"] == 8 and decoded["index"] == 9
    assert decoded["inx"] == 10 and decoded["id"] == 11
    assert decoded["txt"] == "héllo" and decoded["text"] == "t" and decoded["transcript"] == "words"
    assert decoded["json"] == {"a": [1, 2]} and decoded["jsn"] == [3]
    assert np.array_equal(decoded["npy"], array) and decoded["npy"].dtype == np.int16
    assert set(decoded["npz"]) == {"a", "b"} and np.array_equal(decoded["npz"]["b"], array * 2)
    assert decoded["bin"] == b"\x00\x01"
    assert decoded["__key__"] == "dir/0001" and decoded["__url__"] == URL


def test_returns_new_dict_and_keeps_dunder_and_non_bytes_fields() -> None:
    raw = sample(cls=b"1", already=42, __local__=b"meta bytes")
    decoded = Decoder()(raw)
    assert decoded is not raw and raw["cls"] == b"1"
    assert decoded["already"] == 42 and decoded["__local__"] == b"meta bytes"


def test_npy_with_objects_is_refused() -> None:
    out = io.BytesIO()
    np.save(out, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(DecodeError, match=r"'npy'"):
        Decoder()(sample(npy=out.getvalue()))


def test_gzipped_fields_are_unpacked_then_decoded() -> None:
    decoded = Decoder()(sample(**{"json.gz": gzip.compress(b"[1]"), "bin.gz": gzip.compress(b"x")}))
    assert decoded["json.gz"] == [1] and decoded["bin.gz"] == b"x"


def test_only_restricts_decoding() -> None:
    decoded = Decoder(only=["cls", "seg.txt"])(sample(cls=b"1", txt=b"a", **{"seg.txt": b"b"}))
    assert decoded == sample(cls=1, txt=b"a", **{"seg.txt": "b"})
    assert Decoder(only="txt")(sample(cls=b"1", txt=b"a")) == sample(cls=b"1", txt="a")


# ------------------------------------------------------------------------------------- pickle


def test_pickle_refused_by_default() -> None:
    payload = pickle.dumps({"x": 1})
    for field in ("pyd", "pickle", "pkl", "meta.pyd"):
        with pytest.raises(DecodeError) as info:
            Decoder()(sample(**{field: payload}))
        message = str(info.value)
        assert f"'{field}'" in message and "'dir/0001'" in message and URL in message
        assert "allow_pickle=True" in message
        assert info.value.__cause__ is None


def test_pickle_allowed_with_opt_in() -> None:
    payload = pickle.dumps({"x": 1})
    assert Decoder(allow_pickle=True)(sample(pyd=payload))["pyd"] == {"x": 1}


def test_a_refused_pickle_is_refused_every_time() -> None:
    # The decoder remembers what to do with each field name; a refusal is never remembered as
    # "leave it as bytes".
    decoder = Decoder()
    for _ in range(3):
        with pytest.raises(DecodeError, match="allow_pickle=True"):
            decoder(sample(pyd=pickle.dumps(1), cls=b"1"))


def test_a_field_decodes_the_same_every_time_and_after_pickling() -> None:
    decoder = Decoder(only=["cls", "txt.gz"])
    raws = [sample(cls=str(i).encode(), **{"txt.gz": gzip.compress(b"t%d" % i)}, jpg=b"j")
            for i in range(3)]
    expected = [sample(cls=i, **{"txt.gz": f"t{i}"}, jpg=b"j") for i in range(3)]
    assert [decoder(raw) for raw in raws] == expected
    copy = pickle.loads(pickle.dumps(decoder))
    assert [copy(raw) for raw in raws] == expected
    # a field that is not bytes in one sample is copied, and decoded in the next where it is
    assert decoder(sample(cls=5)) == sample(cls=5)
    assert decoder(sample(cls=b"6")) == sample(cls=6)


def test_pth_follows_the_pickle_rule() -> None:
    out = io.BytesIO()
    torch.save({"w": torch.arange(3)}, out)
    with pytest.raises(DecodeError, match="allow_pickle=True"):
        Decoder()(sample(pth=out.getvalue()))
    loaded = Decoder(allow_pickle=True)(sample(pth=out.getvalue()))["pth"]
    assert torch.equal(loaded["w"], torch.arange(3))


# ------------------------------------------------------------------------------------- custom


def test_custom_decoders_win_and_match_full_suffix_or_extension() -> None:
    decoder = Decoder(custom={"JPG": upper, "seg.txt": bytes.hex, "pyd": bytes.hex})
    decoded = decoder(sample(jpg=b"abc", **{"seg.txt": b"\x01", "b.txt": b"t"}, pyd=b"\x02"))
    assert decoded["jpg"] == "ABC"  # extension match, case-insensitive, beats the image decoder
    assert decoded["seg.txt"] == "01"  # full-suffix match beats the built-in txt decoder
    assert decoded["b.txt"] == "t"
    assert decoded["pyd"] == "02"  # a custom decoder needs no allow_pickle


def test_custom_decoder_failure_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match=r"'x\.txt'"):
        Decoder(custom={"txt": upper})(sample(**{"x.txt": b"\xff"}))


def test_decoder_pickles() -> None:
    decoder = Decoder("rgb8", custom={"txt": upper}, allow_pickle=True, only=["txt", "png"])
    copy = pickle.loads(pickle.dumps(decoder))
    raw = sample(txt=b"abc", png=PNG, cls=b"1")
    ours, theirs = decoder(raw), copy(raw)
    assert ours["txt"] == theirs["txt"] == "ABC" and theirs["cls"] == b"1"
    assert np.array_equal(ours["png"], theirs["png"])
    assert repr(copy) == repr(decoder)


# ----------------------------------------------------------------------------------- to_tuple


def test_to_tuple_alternatives_first_present_wins() -> None:
    raw = sample(png=b"p", jpg=b"j", cls=1)
    assert to_tuple(raw, "jpg;png", "cls") == (b"j", 1)
    assert to_tuple(raw, "webp;png;jpg", "__key__") == (b"p", "dir/0001")
    assert to_tuple(raw, "jpg;png cls") == (b"j", 1)


def test_to_tuple_missing_field() -> None:
    raw = sample(png=b"p", cls=1)
    with pytest.raises(MissingFieldError) as info:
        to_tuple(raw, "png", "txt;json")
    err = info.value
    assert isinstance(err, DecodeError) and isinstance(err, KeyError)
    assert isinstance(err, AISIOError)
    message = str(err)
    assert "'txt;json'" in message and "'dir/0001'" in message and "['cls', 'png']" in message
    assert err.url == URL
    with pytest.raises(KeyError):
        to_tuple(raw, "txt")


@pytest.mark.parametrize("fields", [("jpg;png", "cls"), ("cls",), ("__key__", "cls", "png"),
                                    ("png", "txt;json"), ("txt",), "png cls"])
def test_field_picker_is_to_tuple(fields: Any) -> None:
    picker = pickle.loads(pickle.dumps(FieldPicker(fields)))
    for raw in (sample(png=b"p", jpg=b"j", cls=1), sample(png=b"p", cls=2, json=b"{}")):
        args = (fields,) if isinstance(fields, str) else fields
        try:
            expected = to_tuple(raw, *args)
        except MissingFieldError as exc:
            with pytest.raises(MissingFieldError) as info:
                picker(raw)
            assert str(info.value) == str(exc)
        else:
            assert picker(raw) == expected
    assert FieldPicker(fields, missing_ok=True)({}) == (None,) * len(picker.fields)


def test_to_tuple_missing_ok() -> None:
    assert to_tuple(sample(png=b"p"), "png", "cls", missing_ok=True) == (b"p", None)


def test_decode_then_to_tuple() -> None:
    raw = sample(**{"image.jpg": JPEG}, cls=b"4", json=json.dumps({"a": 1}).encode())
    image, label, meta = to_tuple(Decoder("torchrgb8")(raw), "image.jpg;jpg", "cls", "json")
    assert tuple(image.shape) == (3, HEIGHT, WIDTH) and label == 4 and meta == {"a": 1}


def test_errors_survive_pickling() -> None:
    with pytest.raises(MissingFieldError) as missing:
        to_tuple(sample(png=b"p"), "cls")
    with pytest.raises(DecodeError) as refused:
        Decoder()(sample(pyd=b"x"))
    for err in (missing.value, refused.value):
        copy = pickle.loads(pickle.dumps(err))
        assert type(copy) is type(err) and str(copy) == str(err) and copy.url == URL


# ---------------------------------------------------- webdataset's mp/ten, names as one string


def test_tenbin_fields_decode_to_arrays() -> None:
    from webdataset import tenbin

    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1, 2], dtype=np.int64)]
    data = bytes(tenbin.encode_buffer(arrays))
    out = Decoder(None)({"__key__": "a", "ten": data, "x.tb": data})
    for got in (out["ten"], out["x.tb"]):
        assert [a.tolist() for a in got] == [a.tolist() for a in arrays]
    with pytest.raises(FieldDecodeError, match="'ten'"):
        Decoder(None)({"__key__": "a", "ten": b"not tenbin" * 8})


MSGPACK = b"\x82\xa1a\x01\xa1b\x93\x01\x02\xa3xyz"  # {"a": 1, "b": [1, 2, "xyz"]}


@pytest.mark.parametrize("suffix", ["mp", "msg", "msgpack"])
def test_msgpack_fields(suffix: str) -> None:
    # msgpack is in both test environments (optional for users): the real decoding runs here.
    sample = {"__key__": "a", suffix: MSGPACK}
    assert Decoder(None)(sample)[suffix] == {"a": 1, "b": [1, 2, "xyz"]}


def test_msgpack_fields_without_msgpack(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "msgpack", None)  # as if it were not installed
    sample = {"__key__": "a", "mp": MSGPACK}
    with pytest.raises(LoaderUnavailableError, match="pip install msgpack"):
        Decoder(None)(sample)
    # Not the sample's fault: never skipped silently.
    with pytest.raises(LoaderUnavailableError):
        SampleStage(Decoder(None), on_error="skip")(sample)


def test_tuple_fields_as_one_string_like_webdataset() -> None:
    sample = {"__key__": "a", "png": 1, "json": 2}
    assert to_tuple(sample, "jpg;png json") == (1, 2)
    assert to_tuple(sample, ["jpg;png", "json"]) == (1, 2)
    assert to_tuple(sample, "json") == (2,)
    assert ToTuple("jpg;png json")(sample) == (1, 2)
    assert ToTuple(["jpg;png", "json"])(sample) == (1, 2)  # type: ignore[arg-type]
    assert SampleStage(None, "jpg;png json")(sample) == (1, 2)


def test_names_are_never_iterated_as_characters() -> None:
    assert field_names("jpg cls") == ("jpg", "cls")
    for bad in (b"jpg", 7, ["jpg", 3]):
        with pytest.raises(TypeError, match="tuple_fields"):
            field_names(bad, what="tuple_fields")
    with pytest.raises(ValueError, match="empty"):
        field_names("  ")


def test_unknown_decoder_spec_is_still_a_config_error() -> None:
    with pytest.raises(ConfigError):
        Decoder("nope")
