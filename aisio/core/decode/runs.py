"""Which stages a run of regular samples can stand in for: the plan the tar parser follows.

The parser gives runs of regular samples at once, as columns
(:mod:`aisio.core.format.tar.runs`), only when that gives what the per-sample stage would:
:func:`run_plan` says so for a stage's decoder and picked fields, and what each field is.
"""

from __future__ import annotations

from aisio.core.decode.decoders import BASIC_DECODERS, Decoder
from aisio.core.faults.errors import AISIOError
from aisio.core.format.tar.runs import RunPlan


def run_plan(decoder: Decoder | None, fields: tuple[str, ...]) -> RunPlan | None:
    """Returns the plan for a stage that decodes with ``decoder`` (a plain
    :class:`~aisio.core.decode.decoders.Decoder`, or None) and picks ``fields``, or
    None when a run cannot give what that stage gives (another decoder, a custom one, an
    alternative between fields, a meta field other than the key and the URL)."""
    if decoder is not None and type(decoder).__call__ is not Decoder.__call__:
        return None
    kinds = []
    for field in fields:
        if field in ("__key__", "__url__"):
            kinds.append(field.strip("_"))
            continue
        if ";" in field or field.startswith("__") or field != field.lower():
            return None
        try:
            found = decoder.plan(field) if decoder is not None else None
        except AISIOError:  # a pickle it refuses: the per-sample stage says so
            return None
        kind = "raw" if found is None else ("int" if found is BASIC_DECODERS.get("cls")
                                             else None)
        if kind is None or "." in field:  # (a suffix of two parts: left to the stage)
            return None
        kinds.append(kind)
    return RunPlan(tuple(fields), tuple(kinds))


__all__ = ["run_plan"]
