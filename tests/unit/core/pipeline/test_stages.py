"""Tests for aisio.core.pipeline.stages: the per-sample stage (decode, tuple fields) and its
error policy (a bad sample raises, or is skipped and reported), and the advice it gives."""

from __future__ import annotations

import io
import pickle
from collections.abc import Mapping
from typing import Any

import pytest
from PIL import Image

from aisio import Decoder, ErrorReport
from aisio.core.decode.decoders import FieldDecodeError, FieldPicker, MissingFieldError
from aisio.core.faults.errors import DecodeError
from aisio.core.faults.policy import SKIPPED, is_kept
from aisio.core.pipeline.spec import PipelineSpec
from aisio.core.pipeline.stages import SampleStage

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


# ------------------------------------------------------------------- decoding what is picked


def test_a_tuple_stage_decodes_only_the_fields_it_picks() -> None:
    """A field left out of tuple_fields is neither decoded nor able to fail the sample; the
    fields picked decode (and fail) as before."""
    sample = {"__key__": "a", "__url__": URL, "json": b"{not json", "cls": b"3", "jpg": jpeg()}
    assert SampleStage(Decoder("rgb8"), "cls")(sample) == (3,)
    with pytest.raises(FieldDecodeError, match="'json'"):
        SampleStage(Decoder("rgb8"), "cls json")(sample)


@pytest.mark.parametrize("fields", ["cls", "jpg cls", "cls __key__ jpg", "jpg;png cls"])
@pytest.mark.parametrize("decoder", [Decoder(), Decoder(None, only=["cls"]), Decoder("rgb8")])
def test_a_tuple_stage_gives_what_decoding_then_picking_gives(fields: str,
                                                             decoder: Decoder) -> None:
    for sample in samples()[:2]:
        got = SampleStage(decoder, fields)(sample)
        want = FieldPicker(fields)(decoder(sample))
        assert len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            assert type(a) is type(b)
            assert (a == b).all() if hasattr(a, "shape") else a == b


def test_a_decoder_subclass_with_its_own_call_is_called() -> None:
    class Upper(Decoder):
        def __call__(self, sample: Mapping[str, Any]) -> dict[str, Any]:
            return {k: v.upper() if isinstance(v, bytes) else v for k, v in sample.items()}

    assert SampleStage(Upper(), "txt")({"__key__": "a", "txt": b"hi"}) == (b"HI",)


# ------------------------------------------------------------------------------------- advice


def test_missing_field_advice_names_fixes_that_work() -> None:
    sample = {"__key__": "k", "__url__": "ais://b/s.tar", "png": b"x"}
    with pytest.raises(MissingFieldError) as info:
        SampleStage(None, "jpg cls")(sample)
    message = str(info.value)
    assert "pass missing_ok=True" not in message  # no loader takes it
    assert "tuple_fields" in message and "on_error='skip'" in message
    # Both fixes it names work, as the loaders take them:
    assert SampleStage(None, "jpg;png", on_error="skip")(sample) == (b"x",)
    assert SampleStage(None, "jpg cls", on_error="skip")(sample) is SKIPPED
    spec = PipelineSpec.build(endpoint="http://h:1", tuple_fields="jpg;png cls",
                              on_error="skip")
    stage = spec.stage()
    assert stage is not None and stage(sample) is SKIPPED  # "cls" is missing: skipped


def test_a_stage_given_no_report_records_its_skips_in_its_own() -> None:
    """``stage.report`` is where a stage built without a report records the samples it skips
    (its docstring's example; the loaders pass theirs)."""
    stage = SampleStage(None, "jpg;png txt", on_error="skip")
    assert stage({"__key__": "a", "__url__": URL, "jpg": b"x"}) is SKIPPED
    assert [record["member"] for record in stage.report.records()] == ["a.txt"]
