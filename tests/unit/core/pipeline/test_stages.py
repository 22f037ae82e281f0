"""Per-sample error policy, webdataset's mp/ten decoders, and names given as one string."""

from __future__ import annotations

import io
import pickle
import sys

import numpy as np
import pytest
from PIL import Image

from aisio import ConfigError, Decoder, ErrorReport, to_tuple
from aisio.core.faults.errors import DecodeError, LoaderUnavailableError
from aisio.core.faults.policy import SKIPPED, is_kept
from aisio.core.format.decode import FieldDecodeError, MissingFieldError, field_names
from aisio.core.pipeline.stages import SampleStage
from aisio.datapipes.pipeline import ResampledShards, ToTuple

URL = "ais://b/s-0001.tar"


def jpeg() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (4, 4), "red").save(out, "JPEG")
    return out.getvalue()


def samples() -> list[dict[str, object]]:
    good = jpeg()
    return [{"__key__": f"k{i}", "__url__": URL, "jpg": good if i != 2 else good[:20],
             "cls": str(i).encode()} for i in range(5)]


# ------------------------------------------------------------------------- decode error policy


def test_one_corrupt_jpeg_raises_by_default_naming_shard_key_and_field() -> None:
    stage = SampleStage(Decoder("rgb8"), "jpg cls")
    with pytest.raises(FieldDecodeError) as info:
        [stage(s) for s in samples()]
    err = info.value
    assert (err.url, err.key, err.field, err.member) == (URL, "k2", "jpg", "k2.jpg")
    assert URL in str(err) and "'k2'" in str(err) and "'jpg'" in str(err)
    assert pickle.loads(pickle.dumps(err)).member == "k2.jpg"


@pytest.mark.parametrize("policy", ["skip", "warn"])
def test_skip_and_warn_drop_only_the_bad_sample_and_record_it(policy: str) -> None:
    report = ErrorReport()
    stage = SampleStage(Decoder("rgb8"), ("jpg", "cls"), on_error=policy,  # type: ignore[arg-type]
                        report=report)
    if policy == "warn":
        with pytest.warns(UserWarning, match="skipped sample 'k2'"):
            out = [stage(s) for s in samples()]
    else:
        out = [stage(s) for s in samples()]
    kept = [item for item in out if is_kept(item)]
    assert [label for _, label in kept] == [0, 1, 3, 4]
    assert out[2] is SKIPPED
    (record,) = report.records()
    assert record["shard"] == URL and record["member"] == "k2.jpg"
    assert record["error"] == "FieldDecodeError"


def test_missing_field_is_a_per_sample_error_too() -> None:
    report = ErrorReport()
    stage = SampleStage(None, "jpg;png txt", on_error="skip", report=report)
    assert stage({"__key__": "a", "__url__": URL, "jpg": b"x"}) is SKIPPED
    assert report.records()[0]["member"] == "a.txt"
    assert isinstance(MissingFieldError("m"), KeyError)


def test_refused_pickle_is_raised_whatever_the_policy() -> None:
    stage = SampleStage(Decoder(None), on_error="skip")
    with pytest.raises(DecodeError, match="allow_pickle"):
        stage({"__key__": "a", "__url__": URL, "pyd": pickle.dumps(1)})


def test_stage_pickles_and_checks_its_policy() -> None:
    stage = pickle.loads(pickle.dumps(SampleStage(Decoder(), "cls", on_error="skip")))
    assert stage({"__key__": "a", "cls": b"3"}) == (3,)
    assert pickle.loads(pickle.dumps(SKIPPED)) is SKIPPED
    with pytest.raises(ValueError, match="on_error"):
        SampleStage(on_error="ignore")  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- mp and tenbin


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


# ------------------------------------------------------------------- strings are not name lists


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


def test_resampled_shards_takes_one_template_string() -> None:
    shards = ResampledShards("ais://b/s-{00..09}.tar", seed=3)
    assert shards.names == [f"ais://b/s-{i:02d}.tar" for i in range(10)]
    drawn = [name for name, _ in zip(shards, range(50), strict=False)]
    assert set(drawn) <= set(shards.names) and len(set(drawn)) > 3
    assert ResampledShards("ais://b/one.tar").names == ["ais://b/one.tar"]
    with pytest.raises(TypeError):
        ResampledShards(b"ais://b/one.tar")  # type: ignore[arg-type]


def test_image_grid_fields_accept_a_string() -> None:
    pytest.importorskip("matplotlib")
    from aisio.tools.preview import image_grid

    png = io.BytesIO()
    Image.new("RGB", (4, 4)).save(png, "PNG")
    fig = image_grid([{"__key__": "a", "__url__": URL, "png": png.getvalue(), "cls": b"1"}],
                     image_fields="png")
    assert len([ax for ax in fig.axes if ax.images]) == 1


def test_unknown_decoder_spec_is_still_a_config_error() -> None:
    with pytest.raises(ConfigError):
        Decoder("nope")
