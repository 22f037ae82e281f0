"""Per-sample stages under an error policy: decode and pick fields, skipping only the bad sample.

One corrupt JPEG should not end an epoch. :class:`SampleStage` decodes a sample and/or turns it
into a tuple; with ``on_error="skip"`` or ``"warn"`` a sample whose field does not decode, or
lacks a field, is replaced by :data:`SKIPPED` (drop those with :func:`is_kept`) and recorded in
an :class:`~aisio.core.faults.report.ErrorReport` with its shard, key and field: webdataset's
``handler=warn_and_continue``, per sample. Errors that are not the sample's fault (a refused
pickle, a missing optional package) are raised whatever the policy.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from aisio.core.decode.decoders import Decoder, FieldPicker, SampleError
from aisio.core.epochs.progress import Position
from aisio.core.faults.policy import SKIPPED, ErrorPolicy, OnError
from aisio.core.faults.report import ErrorReport
from aisio.core.format.tar.runs import Columns
from aisio.core.system import timing
from aisio.core.system.timing import StageTimes
from aisio.core.transport.delivery import POSITION, VERSION


class SampleStage:
    """Decodes a sample and/or picks its fields as a tuple, under an error policy; picklable.

    Args:
        decoder: a :class:`Decoder` (or None: leave fields as they are).
        fields: fields for :func:`to_tuple` (``"jpg;png cls"`` or ``("jpg;png", "cls")``), or
            None to yield dicts.
        on_error: ``"raise"`` the :class:`~aisio.core.decode.decoders.SampleError`; ``"warn"`` or
            ``"skip"`` to return :data:`SKIPPED` and record the sample in ``report``
            (``"warn"`` also warns).
        report: where skipped samples are recorded (default: a new in-memory report).
        times: a :class:`~aisio.core.system.timing.StageTimes` that the processes running this stage
            report their stage totals to.
        map: a function applied last to each kept sample (or tuple): ``map=`` of the loaders.

    Example:
        >>> stage = SampleStage(Decoder(), "cls", on_error="skip")
        >>> stage({"__key__": "a", "__url__": "ais://b/s.tar", "cls": b"7"})
        (7,)
        >>> stage({"__key__": "b", "__url__": "ais://b/s.tar", "cls": b"x"})
        SKIPPED
        >>> [r["member"] for r in stage.report.records()]
        ['b.cls']
    """

    def __init__(self, decoder: Decoder | None = None, fields: Any = None, *,
                 on_error: OnError = "raise", report: ErrorReport | None = None,
                 times: StageTimes | None = None, map: Callable[[Any], Any] | None = None
                 ) -> None:
        self.decoder = decoder
        self.map = map
        self.picker = None if fields is None else FieldPicker(fields)
        self.fields = None if self.picker is None else self.picker.fields
        self.policy = ErrorPolicy(on_error, report if report is not None else ErrorReport())
        self.on_error = on_error
        self.report = self.policy.report
        self.times = times
        # Decoding only the fields it picks, when each is one name: the same values as decoding
        # the sample and then picking, without decoding or copying the fields left out.
        self._picked = (self.picker is not None and self.picker.plain
                        and type(decoder).__call__ is Decoder.__call__)

    def __repr__(self) -> str:
        return (f"SampleStage(decoder={self.decoder!r}, fields={self.fields!r}, "
                f"on_error={self.on_error!r})")

    def __call__(self, sample: Mapping[str, Any]) -> Any:
        start = time.perf_counter()
        try:
            out: Any
            if self._picked:
                out = self.decoder.picked(  # type: ignore[union-attr]
                    sample, self.fields, self.picker(sample))  # type: ignore[arg-type, misc]
            else:
                out = sample if self.decoder is None else self.decoder(sample)
                if self.picker is not None:
                    out = self.picker(out)
            return out if self.map is None else self.map(out)
        except SampleError as exc:
            self.policy.handle(exc, sample.get("__url__"), sample=sample.get("__key__"))
            return SKIPPED
        finally:
            timing.add("decode", time.perf_counter() - start)
            timing.flush()


class Positioned:
    """Applies a per-sample stage (decode, tuple) to a sample and returns ``(value, position,
    version)``: the position and the shard's content id taken out of the sample first, the
    value :data:`~aisio.core.pipeline.stages.SKIPPED` when the stage skipped the sample (its
    position
    is still delivered, so that the shard can be finished). Picklable when the stage is."""

    def __init__(self, stage: Any = None) -> None:
        self.stage = stage

    def __call__(self, sample: dict[str, Any]) -> tuple[Any, Position, str | None]:
        if type(sample) is Columns:  # already staged (a run of regular samples)
            return sample
        position = sample.pop(POSITION)
        version = sample.pop(VERSION, None)
        return (self.stage(sample) if self.stage is not None else sample), position, version


__all__ = ["Positioned", "SampleStage"]
