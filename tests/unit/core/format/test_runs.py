"""Runs of regular samples (aisio.core.format.tar.runs) against the per-member parser and the stage.

A run hands a loader the picked fields of many samples at once, in place of their dicts. It is
only an optimisation: on random archives that are mostly regular (long stretches of the same
suffixes, now and then a sample that is not: a field missing or repeated, another key width,
an upper-case suffix, a label int() reads but plain digits do not spell, a pax or GNU long
name, a directory, a key that continues) and on corrupt and truncated ones, the values,
positions and errors must be exactly those of the per-member parser followed by the stage.
"""

from __future__ import annotations

import io
import tarfile
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from aisio import Decoder
from aisio.core.decode.runs import run_plan
from aisio.core.faults.errors import AISIOError
from aisio.core.format.samples import iter_samples
from aisio.core.format.tar.runs import CONTINUES, Columns, RunPlan, regular_run
from aisio.core.pipeline.stages import SampleStage

URL = "ais://bucket/shard-007.tar"
TAG = ("__pos__", 7, 0, frozenset(), {"__version__": "v1"})

_ODD = ["missing", "extra", "other", "width", "upper", "newline", "sign", "letters", "long",
        "pax", "gnu", "dir", "repeat", "continues", "slash", "underscore", "meta", "empty",
        "dotkey", "prefix", "mtime", "negative", "paxpath", "intmtime"]


def _add(tar: tarfile.TarFile, name: str, data: bytes, *, kind: str = "file",
         mtime: float | None = None, pax: dict[str, str] | None = None) -> None:
    info = tarfile.TarInfo(name)
    info.mtime = 1_700_000_000 if mtime is None else mtime
    info.pax_headers = dict(pax or {})
    if kind == "dir":
        info.type = tarfile.DIRTYPE
    else:
        info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _sample(tar: tarfile.TarFile, fmt: int, i: int, odd: str | None, payload: bytes,
            label: int, *, mtime: float | None = None) -> None:
    """Writes sample ``s{i:05d}`` (``jpg`` and ``cls``), made irregular as ``odd`` says; a
    float ``mtime`` in the pax format gives each member a pax header (webdataset's way)."""
    if odd == "gnu" and fmt == tarfile.USTAR_FORMAT:  # a name ustar cannot store
        odd = "pax"
    key = f"s{i:05d}" if odd != "width" else f"s{i:07d}"
    key = {"continues": f"s{max(i - 1, 0):05d}", "slash": f"d/s{i:05d}",
           "underscore": f"_s{i:05d}", "pax": f"s{i:03d}é", "gnu": f"s{i:05d}" + "g" * 120,
           "dotkey": f"s.{i:04d}", "prefix": "p" * 90 + f"/s{i:05d}",
           }.get(odd or "", key)  # (keys of the regular samples' length in bytes, but "width")
    digits = str(label).encode()
    digits = {"newline": digits + b"\n", "sign": b"+" + digits, "letters": b"x" + digits,
              "empty": b"", "long": b"9" * 20}.get(odd or "", digits)
    if odd == "dir":
        _add(tar, key + ".d", b"", kind="dir")
    _add(tar, f"{key}.jpg", payload,
         mtime=12345 if odd in ("mtime", "intmtime") else mtime,
         pax={"path": f"z{key[1:]}.jpg"} if odd == "paxpath" else None)
    if odd == "meta":
        _add(tar, f"__{key}.x__", b"meta")
    if odd != "missing":
        _add(tar, f"{key}.{ {'upper': 'CLS', 'other': 'txt'}.get(odd or '', 'cls') }", digits,
             mtime=-1.5 if odd == "negative" and fmt == tarfile.PAX_FORMAT else mtime)
    if odd == "extra":
        _add(tar, f"{key}.txt", b"more")
    if odd == "repeat":
        _add(tar, f"{key}.jpg", payload)


@st.composite
def mostly_regular(draw: st.DrawFn) -> bytes:
    """Returns a WebDataset tar of samples ``s00042.{jpg,cls}`` (random payloads of 0-600
    bytes, labels of 1-3 digits), now and then a sample made irregular in one way (one way
    per archive, so that each comes up often between regular ones)."""
    fmt = draw(st.sampled_from([tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]))
    kind = draw(st.sampled_from(_ODD))
    floats = fmt == tarfile.PAX_FORMAT and draw(st.booleans())  # a pax mtime every member
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for i in range(draw(st.integers(0, 80))):
            odd = kind if draw(st.integers(0, 11)) == 0 else None
            _sample(tar, fmt, i, odd, draw(st.binary(max_size=600)), draw(st.integers(0, 999)),
                    mtime=1_700_000_000 + i * draw(st.sampled_from([0.5, 0.123456, 1.0]))
                    if floats else None)
    return out.getvalue()


def _staged(read: Any, stage: SampleStage) -> tuple[str, Any, int]:
    """Returns ``("ok" or "error", what came, how many came in runs)``: each sample as
    ``(value, position, version)`` (the stage applied to a dict, as a loader applies it), up to
    the first error (its type, message, offset, member)."""
    items: list[Any] = []
    in_runs = 0
    try:
        for item in read():
            if type(item) is Columns:
                in_runs += len(item.values)
                items.extend((value, position, item.extra.get("__version__"))
                             for value, position in zip(item.values, item.positions,
                                                        strict=True))
                continue
            position, version = item.pop("__pos__"), item.pop("__version__", None)
            items.append((stage(item), position, version))
        return "ok", items, in_runs
    except AISIOError as exc:
        return "error", (items, type(exc).__name__, str(exc), getattr(exc, "offset", None),
                         getattr(exc, "member", None)), in_runs


def _both(raw: bytes, bufsize: int, fields: tuple[str, ...], decoder: Decoder | None
          ) -> tuple[Any, Any]:
    stage = SampleStage(decoder, fields)
    plan = run_plan(decoder, fields)
    assert plan is not None

    def per_member() -> Any:
        return iter_samples(io.BytesIO(raw), url=URL, bufsize=bufsize, tag=TAG)

    def with_runs() -> Any:
        return iter_samples(io.BytesIO(raw), url=URL, bufsize=bufsize, tag=TAG, runs=plan)

    return _staged(per_member, stage), _staged(with_runs, stage)


_SETTINGS = settings(max_examples=120, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
_BUFSIZES = st.sampled_from([4096, 65536, 1 << 20, 1 << 20])
_PICKS = st.sampled_from([("__key__", "jpg", "cls"), ("cls",), ("jpg", "__url__"),
                          ("cls", "jpg")])
_DECODERS = st.sampled_from([Decoder(None, only=["cls"]), Decoder(None), None])


@_SETTINGS
@given(raw=mostly_regular(), bufsize=_BUFSIZES, fields=_PICKS, decoder=_DECODERS)
def test_runs_give_what_the_per_member_parser_and_the_stage_give(
        raw: bytes, bufsize: int, fields: tuple[str, ...], decoder: Decoder | None) -> None:
    reference, runs = _both(raw, bufsize, fields, decoder)
    assert runs[:2] == reference[:2]


@_SETTINGS
@given(raw=mostly_regular(), bufsize=_BUFSIZES, where=st.integers(0, 1 << 20),
       byte=st.integers(0, 255), cut=st.booleans())
def test_corrupt_or_truncated_archives_fail_alike(raw: bytes, bufsize: int, where: int,
                                                   byte: int, cut: bool) -> None:
    assume(len(raw) > 0)
    where %= len(raw)
    bad = raw[:where] if cut else raw[:where] + bytes([byte]) + raw[where + 1:]
    reference, runs = _both(bad, bufsize, ("__key__", "jpg", "cls"), Decoder(None, only=["cls"]))
    assert runs[:2] == reference[:2]


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.PAX_FORMAT, "webdataset"])
@pytest.mark.parametrize("odd", _ODD)
def test_one_irregular_sample_between_runs(odd: str, fmt: Any) -> None:
    """Each way a sample can be irregular, alone between regular ones: the same values,
    positions and errors as per member, and the regular ones around it still in runs (also
    where every member has a pax header holding its float mtime, as webdataset writes)."""
    out = io.BytesIO()
    floats = fmt == "webdataset"
    fmt = tarfile.PAX_FORMAT if floats else fmt
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for i in range(61):
            _sample(tar, fmt, i, odd if i == 30 else None, bytes([i]) * (i * 7), i,
                    mtime=1_700_000_000.25 + i if floats else None)
    reference, runs = _both(out.getvalue(), 1 << 20, ("__key__", "jpg", "cls"),
                            Decoder(None, only=["cls"]))
    assert runs[:2] == reference[:2]
    assert runs[2] >= 20  # samples before the odd one came in a run


def test_a_header_whose_checksum_fails_ends_the_run_before_it() -> None:
    raw = bytearray(_regular(61))
    at = 30 * 2048 + 136  # sample 30's first header: a byte of its mtime
    raw[at] ^= 0x01
    reference, runs = _both(bytes(raw), 1 << 20, ("__key__", "jpg", "cls"),
                            Decoder(None, only=["cls"]))
    assert reference[0] == "error" and reference[1][1] == "ShardFormatError"
    assert runs[:2] == reference[:2] and runs[2] >= 20


@pytest.mark.parametrize(("suffixes", "fields"), [
    (("jpg", "c/ls"), ("__key__", "jpg")),    # "/" after the dot: not a member of the sample
    (("jpg", "clś"), ("__key__", "jpg")),      # a suffix that is not ASCII
    (("jpg", "cls", "jpg"), ("__key__", "jpg")),  # a suffix twice in every sample
    (("x__",), ("__key__",)),                  # every name a meta file's ("__s00001.x__")
])
def test_samples_irregular_alike_are_left_to_the_per_member_parser(
        suffixes: tuple[str, ...], fields: tuple[str, ...]) -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(40):
            key = f"__s{i:05d}" if suffixes == ("x__",) else f"s{i:05d}"
            for suffix in suffixes:
                _add(tar, f"{key}.{suffix}", str(i).encode())
    reference, runs = _both(out.getvalue(), 1 << 20, fields, Decoder(None))
    assert runs == reference


def test_no_run_of_samples_that_repeat_a_suffix() -> None:
    """(The per-member parser raises at the first such sample; a run must not begin at one.)"""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(40):
            for suffix in ("jpg", "cls", "jpg"):
                _add(tar, f"s{i:05d}.{suffix}", b"1")
    assert regular_run(out.getvalue(), 0, RunPlan(("cls",), ("int",)), URL, None) is None


def _regular(samples: int) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(samples):
            _add(tar, f"s{i:05d}.jpg", bytes([i % 256]) * (100 + i))
            _add(tar, f"s{i:05d}.cls", str(i).encode())
    return out.getvalue()


def test_a_regular_shard_comes_in_runs_and_only_its_last_sample_alone() -> None:
    """The fast path applies where it should (a run that silently never happens would pass the
    properties above): all but the first sample (read as the buffer fills) and the last
    (whose end only the archive's end shows) come in one run."""
    raw = _regular(300)
    assert len(raw) < 1 << 20  # one read buffer
    plan = run_plan(Decoder(None, only=["cls"]), ("__key__", "jpg", "cls"))
    items = list(iter_samples(io.BytesIO(raw), url=URL, tag=TAG, runs=plan))
    runs = [item for item in items if type(item) is Columns]
    # The first sample is read as the buffer fills (member by member), the last alone.
    assert len(runs) == 1 and len(runs[0].values) == 298 and len(items) == 3
    assert type(items[-1]) is dict and items[-1]["__pos__"][3] is True  # the last, marked
    first = runs[0]
    assert first.values[2] == ("s00003", bytes([3]) * 103, 3)
    assert first.positions[:2] == [(7, 1, 2 * 2048, False), (7, 2, 3 * 2048, False)]
    assert first.extra == {"__version__": "v1"}


def test_a_run_begins_after_the_sample_in_progress() -> None:
    raw = _regular(40)
    plan = RunPlan(("cls",), ("int",))
    assert regular_run(raw, 0, plan, URL, "s00000") is CONTINUES
    run = regular_run(raw, 0, plan, URL, "s99999")
    assert run is not None and run is not CONTINUES and len(run.values) == 39


def test_two_labels_int_refuses_at_different_samples_end_the_run_at_the_first() -> None:
    """Two picked labels that int() reads but plain digits do not spell ("+3"), each refused
    by int() at another sample, the later field's later: the run ends before the first one
    refused (the per-member stage names that sample), with its columns of one length."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(30):
            _add(tar, f"s{i:05d}.cls", b"x" if i == 10 else b"+%d" % i)
            _add(tar, f"s{i:05d}.id", b"x" if i == 12 else b"+%d" % i)
    run = regular_run(out.getvalue(), 0, RunPlan(("cls", "id"), ("int", "int")), URL, None)
    assert run is not None and run is not CONTINUES
    assert run.values == [(i, i) for i in range(10)] and len(run.ends) == 10


class _Shouting(Decoder):
    def __call__(self, sample: Any) -> dict[str, Any]:
        return {k: v.upper() if isinstance(v, bytes) else v for k, v in sample.items()}


@pytest.mark.parametrize(("decoder", "fields", "planned"), [
    (Decoder(None, only=["cls"]), ("__key__", "jpg", "cls"), ("key", "raw", "int")),
    (None, ("jpg", "__url__"), ("raw", "url")),
    (Decoder("rgb8"), ("jpg", "cls"), None),          # an image decoded: per sample
    (Decoder(None), ("json",), None),                 # json decoded: per sample
    (Decoder(None), ("jpg;png", "cls"), None),         # alternatives: per sample
    (Decoder(None, only=["cls"]), ("seg.png",), None),  # a suffix with a dot
    (Decoder(None), ("pyd",), None),                  # a pickle: the stage refuses it
    (Decoder(None, custom={"cls": int}), ("cls",), None),  # a custom decoder
    (_Shouting(None), ("jpg",), None),                # a Decoder with a __call__ of its own
])
def test_a_plan_only_for_what_a_run_gives(decoder: Decoder | None, fields: tuple[str, ...],
                                          planned: tuple[str, ...] | None) -> None:
    plan = run_plan(decoder, fields)
    assert (plan.kinds if plan is not None else None) == planned


class _Breaking(io.RawIOBase):
    """A stream that gives ``chunk`` bytes a read and raises ConnectionError at ``fail``."""

    def __init__(self, raw: bytes, chunk: int, fail: int) -> None:
        self.raw, self.chunk, self.fail, self.pos = raw, chunk, fail, 0

    def read(self, size: int = -1) -> bytes:
        if self.pos >= self.fail:
            raise ConnectionError(f"connection reset at byte {self.pos}")
        data = self.raw[self.pos:self.pos + min(size, self.chunk, self.fail - self.pos)]
        self.pos += len(data)
        return data


@pytest.mark.parametrize("fail", [100_000, 300_000, 500_000])
def test_a_read_that_fails_while_gathering_loses_no_sample_read_before_it(fail: int) -> None:
    """With runs, the parser fills its buffer with several reads (a run's cost is per buffer);
    a read that fails on the way is raised only once the bytes read before it are parsed:
    the samples that come before the error without runs come with them (and the one whole
    sample whose end a run saw in the next header, which the per-member reader had not yet
    given when the read failed)."""
    raw = _regular(300)
    plan = run_plan(Decoder(None, only=["cls"]), ("__key__", "jpg", "cls"))
    stage = SampleStage(Decoder(None, only=["cls"]), ("__key__", "jpg", "cls"))

    def read(runs: RunPlan | None) -> list[Any]:
        got: list[Any] = []
        with pytest.raises(ConnectionError, match=f"byte {fail}"):
            for item in iter_samples(_Breaking(raw, 65_536, fail), url=URL, tag=TAG,
                                     runs=runs):
                if type(item) is Columns:
                    got.extend(item.values)
                else:
                    item.pop("__pos__"), item.pop("__version__")
                    got.append(stage(item))
        return got

    with_runs, per_member = read(plan), read(None)
    assert with_runs[:len(per_member)] == per_member
    assert len(per_member) >= fail // 2048 - 2 and len(with_runs) - len(per_member) <= 1


def test_big_samples_are_read_member_by_member() -> None:
    """Runs are for small samples: once a member of more than 32 KiB is read, the rest of the
    shard goes member by member, and no run is looked for again (looking for one in every
    buffer cost more than the per-sample Python it saves: the 100 KiB no-shuffle regression,
    benchmarks/README.md). Small samples keep their runs to the end of the shard."""
    import aisio.core.format.tar.fast as fast_module

    def big(samples: int) -> bytes:
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for i in range(samples):
                _add(tar, f"s{i:05d}.jpg", bytes([i % 256]) * 40_000)
                _add(tar, f"s{i:05d}.cls", str(i).encode())
        return out.getvalue()

    plan = run_plan(Decoder(None, only=["cls"]), ("__key__", "jpg", "cls"))
    stage = SampleStage(Decoder(None, only=["cls"]), ("__key__", "jpg", "cls"))
    raw = big(200)  # ~8 MB: eight 1 MiB buffers, each with room for a run of >= 8 samples
    calls: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[1])
        return regular_run(*args, **kwargs)

    original = fast_module.regular_run
    fast_module.regular_run = counted  # type: ignore[assignment]
    try:
        for bufsize in (1 << 20, 65_536):
            calls.clear()
            items = list(iter_samples(io.BytesIO(raw), url=URL, tag=TAG, runs=plan,
                                      bufsize=bufsize))
            assert not any(type(item) is Columns for item in items)
            assert len(items) == 200 and len(calls) <= 1
    finally:
        fast_module.regular_run = original  # type: ignore[assignment]
    per_member = _staged(lambda: iter_samples(io.BytesIO(raw), url=URL, tag=TAG), stage)
    assert _staged(lambda: iter(items), stage)[:2] == per_member[:2]
    small = _regular(3000)
    assert len(small) > 2 << 20
    runs = [item for item in iter_samples(io.BytesIO(small), url=URL, tag=TAG, runs=plan)
            if type(item) is Columns]
    assert len(runs) >= 3


def test_labels_of_nineteen_digits_are_read_as_int_reads_them() -> None:
    """A run reads a label of plain digits with numpy's int64 only up to 18 digits: 19 nines
    do not fit one (they wrap around), so such labels are read as ``int()`` reads them. The
    property tests draw labels of 1-3 digits (and 20 as an odd one): this is the edge."""
    out = io.BytesIO()
    labels = [10**18 + i if i % 2 else 10**19 - 1 - i for i in range(40)]  # 19 digits each
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i, label in enumerate(labels):
            _add(tar, f"s{i:05d}.jpg", bytes([i]) * 50)
            _add(tar, f"s{i:05d}.cls", str(label).encode())
    reference, runs = _both(out.getvalue(), 1 << 20, ("__key__", "cls"),
                            Decoder(None, only=["cls"]))
    assert runs[:2] == reference[:2]
    assert [value[1] for value, _, _ in runs[1]] == labels
    assert runs[2] >= 20  # the labels came in a run, read whole


def test_labels_read_in_a_run_are_ints_as_the_per_member_path_gives() -> None:
    """A run's labels are Python ints, of the type ``int()`` gives: ``==`` cannot tell 3.0
    from 3, but a batch collates floats into a float tensor (class ids must stay integers)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(40):
            _add(tar, f"s{i:05d}.jpg", bytes([i]) * 50)
            _add(tar, f"s{i:05d}.cls", str(i * 7).encode())
    reference, runs = _both(out.getvalue(), 1 << 20, ("__key__", "cls"),
                            Decoder(None, only=["cls"]))
    assert runs[2] >= 20  # the labels came in a run, read whole
    assert [type(value[1]) for value, _, _ in runs[1]] == [int] * 40
    assert [type(value[1]) for value, _, _ in reference[1]] == [int] * 40


def test_a_key_byte_at_0x80_ends_a_run_and_comes_as_the_per_member_parser_gives_it() -> None:
    """Keys with a byte at 0x80 after 20 ASCII ones (of one length): not ASCII, so no run's
    (the per-member path keeps the byte, escaped); the run ends before them and the same
    samples come (the property tests draw ASCII keys)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT,
                      errors="surrogateescape") as tar:
        for i in range(40):
            key = f"s{i:05d}" if i < 20 else f"s\udc80{i:04d}"
            _add(tar, key + ".jpg", bytes([i]) * 50)
            _add(tar, key + ".cls", b"%d" % i)
    reference, runs = _both(out.getvalue(), 1 << 20, ("__key__", "jpg", "cls"),
                            Decoder(None, only=["cls"]))
    assert reference[0] == "ok" and len(reference[1]) == 40
    assert runs[:2] == reference[:2] and runs[2] >= 8


def test_a_run_gives_the_key_and_the_url_where_they_are_picked() -> None:
    """``__key__`` and ``__url__`` picked beside a member's field come in the run, as the
    per-member path gives them (the property tests, at the examples a mutation run draws,
    did not pick ``__url__`` in a run)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(40):
            _add(tar, f"s{i:05d}.jpg", bytes([i]) * 50)
            _add(tar, f"s{i:05d}.cls", b"%d" % i)
    for fields in (("__url__", "cls"), ("jpg", "__url__", "__key__")):
        reference, runs = _both(out.getvalue(), 1 << 20, fields, Decoder(None, only=["cls"]))
        assert runs[2] >= 20, fields  # they came in a run
        assert runs[:2] == reference[:2] and reference[0] == "ok", fields


@pytest.mark.parametrize("first", [1, 10])
@pytest.mark.parametrize("odd", [b"1:", b"/5", b"4 2"])
def test_a_label_with_a_byte_beside_the_digits_ends_the_run_as_int_refuses_it(
        odd: bytes, first: int) -> None:
    """Bytes just outside ``0``-``9`` (``:`` after ``9``, ``/`` before ``0``) are not digits:
    the run stops before the sample whose label ``int()`` refuses, and the stage names it.
    The property tests' odd labels are letters, signs, spaces and newlines. ``first=10``:
    every other label has as many bytes as the odd one (the check of the bytes inside a
    label is then the only one that can refuse it)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(40):
            _add(tar, f"s{i:05d}.jpg", bytes([i]) * 50)
            _add(tar, f"s{i:05d}.cls", odd if i == 30 else b"%d" % (i + first))
    reference, runs = _both(out.getvalue(), 1 << 20, ("__key__", "cls"),
                            Decoder(None, only=["cls"]))
    assert reference[0] == "error" and len(reference[1][0]) == 30
    assert runs[:2] == reference[:2] and runs[2] >= 20


def test_size_fields_of_twelve_digits_and_no_nul_are_left_to_the_per_member_parser() -> None:
    """A writer may fill a header's 12-byte size field with digits and no NUL
    (``000000000144``: 100 bytes). A run reads the first 11 (``00000000014``: 12 bytes), so it
    must not take such headers; tarfile, which the property tests write with, never writes
    them. Sizes here are 8 to 511 bytes, where the 11 digits still give the right number of
    blocks: only the values would be wrong."""
    raw = bytearray(_regular_labelled(40))
    for at in range(0, len(raw) - 1024, 512):
        head = raw[at:at + 512]
        if head[257:262] != b"ustar" or head[135] != 0:
            continue  # a data block, or (no) the end
        size = int(head[124:135], 8)
        raw[at + 124:at + 136] = b"%012o" % size
        raw[at + 148:at + 156] = b" " * 8
        raw[at + 148:at + 156] = b"%06o\x00 " % sum(raw[at:at + 512])
    reference, runs = _both(bytes(raw), 1 << 20, ("__key__", "jpg", "cls"),
                            Decoder(None, only=["cls"]))
    assert reference[0] == "ok" and len(reference[1]) == 40
    assert runs[:2] == reference[:2]


def _regular_labelled(samples: int) -> bytes:
    """``_regular`` with payloads of 100 bytes and more and labels of 8 digits."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(samples):
            _add(tar, f"s{i:05d}.jpg", bytes([i % 256]) * (100 + i))
            _add(tar, f"s{i:05d}.cls", str(10_000_000 + i).encode())
    return out.getvalue()


def test_a_big_member_read_from_the_buffer_ends_the_runs_for_the_rest_of_the_shard() -> None:
    """The rule of ``test_big_samples_are_read_member_by_member`` also where the first big
    member comes from the read buffer, after a run: an irregular sample ends the run, big ones
    follow it in the same buffer, and no later buffer of small samples is looked at for runs
    (the values, positions and errors as per member)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(3000):
            odd = "extra" if i == 100 else None
            payload = bytes([i % 256]) * (40_000 if 101 <= i < 104 else 100)
            _sample(tar, tarfile.USTAR_FORMAT, i, odd, payload, i)
    raw = out.getvalue()
    assert len(raw) > 4 << 20  # buffers of small samples after the big ones
    reference, runs = _both(raw, 1 << 20, ("__key__", "jpg", "cls"), Decoder(None, only=["cls"]))
    assert runs[:2] == reference[:2]
    assert 50 <= runs[2] <= 100  # the samples before the irregular one, and none after it


@pytest.mark.parametrize("case", ["no tag", "skips", "ends", "not fast"])
def test_a_plan_where_runs_cannot_apply_is_ignored(case: str) -> None:
    """Runs need a tag that skips nothing, no ends and the fast path: a plan given anyway (a
    resumed shard task skips the samples it delivered) changes nothing."""
    raw = _regular(300)
    plan = run_plan(Decoder(None, only=["cls"]), ("__key__", "jpg", "cls"))
    options: dict[str, Any] = {
        "no tag": {}, "skips": {"tag": (*TAG[:3], frozenset({0, 1}), TAG[4])},
        "ends": {"tag": TAG, "ends": True}, "not fast": {"tag": TAG, "fast": False}}[case]
    expected = list(iter_samples(io.BytesIO(raw), url=URL, **options))
    assert list(iter_samples(io.BytesIO(raw), url=URL, runs=plan, **options)) == expected
    assert len(expected) == 300 - ("skips" in case) * 2
