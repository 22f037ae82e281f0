"""Tests for aisio.core.format.samples: WebDataset grouping, checked against the webdataset
library."""

from __future__ import annotations

import inspect
import io
import random
import re
import tarfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisio.core.faults.errors import ObjectChangedError, ShardFormatError
from aisio.core.format.samples import NO_OFFSET, group_samples, group_samples_with_end, split_key
from aisio.core.format.tar import iter_tar

wds = pytest.importorskip("webdataset")
from webdataset import tariterators  # noqa: E402

URL = "ais://bucket/shard-000.tar"


def write_tarfile(path: Path, members: Iterable[tuple[str, bytes] | str], fmt: int) -> None:
    """Writes ``members`` ((name, data) files, or directory names) to a tar at ``path``."""
    with tarfile.open(path, "w", format=fmt) as tar:
        for member in members:
            if isinstance(member, str):
                info = tarfile.TarInfo(member)
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
                continue
            name, data = member
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def webdataset_samples(path: Path) -> list[dict[str, Any]]:
    """Returns the samples the webdataset library reads from the shard at ``path``."""
    with open(path, "rb") as stream:
        files = tariterators.tar_file_expander([{"url": URL, "stream": stream}])
        return list(tariterators.group_by_keys(files))


def aisio_samples(path: Path, bufsize: int = 1 << 20) -> list[dict[str, Any]]:
    with open(path, "rb", buffering=0) as stream:
        return list(group_samples(iter_tar(stream, url=URL, bufsize=bufsize), url=URL))


def fields(sample: dict[str, Any]) -> dict[str, Any]:
    """Returns the parts of a sample that matter: the key and the data fields."""
    return {k: v for k, v in sample.items() if k == "__key__" or not k.startswith("__")}


def assert_same_as_webdataset(path: Path, bufsize: int = 1 << 20) -> list[dict[str, Any]]:
    ours = aisio_samples(path, bufsize)
    theirs = webdataset_samples(path)
    assert [fields(s) for s in ours] == [fields(s) for s in theirs]
    assert all(s["__url__"] == URL for s in ours)
    assert all(set(s) - set(fields(s)) == {"__url__"} for s in ours)
    return ours


BLOB = random.Random(7).randbytes(200_000)

TRICKY: list[tuple[str, bytes] | str] = [
    ("__index__", b"meta at the top level"),
    ("__meta__/info.json", b"{}"),
    "train",
    "train/a.b",
    ("train/a.b/c.d.jpg", b"dotted dirs"),
    ("train/a.b/c.d.cls", b"1"),
    ("train/a.b/c.seg.PNG", b"upper-case suffix"),
    ("train/a.b/c.JSON", b"[1]"),
    ("train/" + "k" * 130 + ".jpg", b"long name"),
    ("train/" + "k" * 130 + ".txt", b""),
    ("ünïcødé/ファイル.jpg", b"unicode"),
    ("ünïcødé/ファイル.txt", b"more unicode"),
    ("README", b"no dot: skipped"),
    ("dir/.hidden.jpg", b"dot first: the directory is the key"),
    ("dir.d/.hidden.jpg", b"dot first, dotted directory: skipped"),
    (".top.jpg", b"dot first, no directory: skipped"),
    ("big/0.bin", BLOB),
    ("big/0.empty", b""),
    ("big/1.bin", BLOB[:1234]),
    ("x__/__y__.txt", b"not meta: not at the top"),
    ("a/0.jpg", b"first run"),
    ("b/0.jpg", b"other key"),
    ("a/0.cls", b"same key again, new sample"),
]


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
@pytest.mark.parametrize("bufsize", [1024, 1 << 20])
def test_parity_with_webdataset_on_tricky_tarfile_shards(
    tmp_path: Path, fmt: int, bufsize: int
) -> None:
    path = tmp_path / "tricky.tar"
    write_tarfile(path, TRICKY, fmt)
    samples = assert_same_as_webdataset(path, bufsize)
    keys = [s["__key__"] for s in samples]
    assert keys[:3] == ["train/a.b/c", "train/" + "k" * 130, "ünïcødé/ファイル"]
    assert set(samples[0]) == {"__key__", "__url__", "d.jpg", "d.cls", "seg.png", "json"}
    assert keys[-3:] == ["a/0", "b/0", "a/0"]


def test_parity_with_webdataset_tarwriter_shards(tmp_path: Path) -> None:
    path = tmp_path / "writer.tar"
    rng = random.Random(0)
    with wds.TarWriter(str(path), encoder=False) as sink:
        for i in range(40):
            sink.write(
                {
                    "__key__": f"shard/{i:05d}",
                    "jpg": rng.randbytes(rng.randint(0, 5000)),
                    "cls": str(i % 7).encode(),
                    "meta.json": b'{"i": %d}' % i,
                    "seg.png": rng.randbytes(rng.randint(0, 300)),
                }
            )
    samples = assert_same_as_webdataset(path, bufsize=4096)
    assert len(samples) == 40
    assert set(samples[0]) == {"__key__", "__url__", "jpg", "cls", "meta.json", "seg.png"}


def test_duplicate_suffix_names_member_and_offset() -> None:
    members = [("s/0.jpg", b"a"), ("s/0.cls", b"1"), ("s/0.JPG", b"b")]
    raw = _tar_bytes(members)
    with pytest.raises(ShardFormatError) as info:
        list(group_samples(iter_tar(io.BytesIO(raw), url=URL), url=URL))
    err = info.value
    assert err.member == "s/0.JPG"
    assert err.offset == 2048
    assert err.url == URL
    assert "'s/0.JPG'" in str(err) and "'jpg'" in str(err) and URL in str(err)
    with pytest.raises(ValueError, match="duplicate"):  # webdataset refuses it too
        list(tariterators.group_by_keys(_as_webdataset_files(members)))


def test_duplicate_suffix_with_plain_pairs_has_no_offset() -> None:
    with pytest.raises(ShardFormatError) as info:
        list(group_samples([("k.txt", b"1"), ("k.txt", b"2")], url=URL))
    assert info.value.offset is None and info.value.member == "k.txt"


def test_reserved_suffix_is_refused_like_webdataset() -> None:
    members = [("k.__key__", b"x")]
    with pytest.raises(ShardFormatError):
        list(group_samples(members, url=URL))
    with pytest.raises(ValueError):
        list(tariterators.group_by_keys(_as_webdataset_files(members)))


def test_end_offsets_allow_restarting_after_any_sample() -> None:
    members = [(f"{i // 3:03d}.f{i % 3}", bytes([i]) * (i * 100)) for i in range(30)]
    members.insert(5, ("README", b"skipped member inside the shard"))
    raw = _tar_bytes(members)
    pairs = list(group_samples_with_end(iter_tar(io.BytesIO(raw), url=URL), url=URL))
    assert len(pairs) == 10
    for k, (_, end) in enumerate(pairs):
        assert end % 512 == 0
        rest = group_samples(iter_tar(io.BytesIO(raw[end:]), start_offset=end), url=URL)
        assert list(rest) == [sample for sample, _ in pairs[k + 1 :]]
    assert pairs[-1][1] == _end_of_last_member(raw)


def test_plain_pairs_have_no_end_offset() -> None:
    pairs = list(group_samples_with_end([("a.txt", b"1"), ("a.cls", b"2")], url=URL))
    assert pairs == [({"__key__": "a", "__url__": URL, "txt": b"1", "cls": b"2"}, NO_OFFSET)]


def test_empty_and_all_skipped_inputs() -> None:
    assert list(group_samples([], url=URL)) == []
    assert list(group_samples([("README", b""), ("__index__", b"")], url=URL)) == []


def test_samples_are_independent_dicts() -> None:
    first, second = group_samples([("a.x", b"1"), ("b.x", b"2")], url=URL)
    first["y"] = 1
    assert "y" not in second


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("a/b/c.jpg", ("a/b/c", "jpg")),
        ("a.b/c.d.JPG", ("a.b/c", "d.jpg")),
        ("c.tar.gz", ("c", "tar.gz")),
        ("k.", ("k", "")),
        ("noext", None),
        ("dir.d/noext", None),
        ("dir/.hidden", ("dir/", "hidden")),
        ("a.b/dir/.x.Y", ("a.b/dir/", "x.y")),
        ("a/d.ir/.hidden", None),
        ("/.", ("/", "")),
        (".jpg", None),
        ("__index__", None),
        ("__", None),
        ("___", None),
        ("__meta__/x.json", None),
        ("___/x.json", ("___/x", "json")),
        ("a/__meta__/x.json", ("a/__meta__/x", "json")),
        ("__meta/x.json", ("__meta/x", "json")),
        ("__x.jpg", ("__x", "jpg")),
    ],
)
def test_split_key(name: str, expected: tuple[str, str] | None) -> None:
    assert split_key(name) == expected
    assert split_key(name) == _webdataset_split(name)


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from(list("ab_./Z9é ")), max_size=14))
def test_hypothesis_split_key_matches_webdataset(name: str) -> None:
    assert split_key(name) == _webdataset_split(name)


KEYS = st.sampled_from(["a", "b", "d/a", "d.x/a", "__m__", "__m__/a", "a_"])
SUFFIXES = st.sampled_from(["jpg", "JPG", "cls", "seg.png", "", None])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(KEYS, SUFFIXES, st.binary(max_size=4)), max_size=12))
def test_hypothesis_grouping_matches_webdataset(
    parts: list[tuple[str, str | None, bytes]],
) -> None:
    members = [(key if suffix is None else f"{key}.{suffix}", data) for key, suffix, data in parts]
    members = [(name, data) for name, data in members if not _webdataset_skips_meta(name)]
    ours, our_error = _collect(group_samples(members, url=URL))
    theirs, their_error = _collect(tariterators.group_by_keys(_as_webdataset_files(members)))
    assert [fields(s) for s in ours] == [fields(s) for s in theirs]
    assert (our_error is None) == (their_error is None)
    assert our_error is None or isinstance(our_error, ShardFormatError)


# ------------------------------------------------------------------------------------ helpers


def _tar_bytes(members: list[tuple[str, bytes]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _end_of_last_member(raw: bytes) -> int:
    return max(m.end for m in iter_tar(io.BytesIO(raw)))


def _as_webdataset_files(members: list[tuple[str, bytes]]) -> list[dict[str, Any]]:
    return [{"fname": name, "data": data, "__url__": URL} for name, data in members]


def _webdataset_skips_meta(name: str) -> bool:
    """Returns whether webdataset's tar_file_iterator drops ``name`` as a meta file."""
    skip_meta = inspect.signature(tariterators.tar_file_iterator).parameters["skip_meta"].default
    prefix, suffix = tariterators.meta_prefix, tariterators.meta_suffix
    if "/" not in name and name.startswith(prefix) and name.endswith(suffix):
        return True
    return re.match(skip_meta, name) is not None


def _webdataset_split(name: str) -> tuple[str, str] | None:
    """Returns (key, suffix) as webdataset computes them, None when it skips the name."""
    if _webdataset_skips_meta(name):
        return None
    key, suffix = tariterators.base_plus_ext(name)
    return None if key is None else (key, suffix.lower())


def _collect(samples: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], Exception | None]:
    out: list[dict[str, Any]] = []
    try:
        for sample in samples:
            out.append(sample)
    except Exception as exc:  # both libraries' errors are compared
        return out, exc
    return out, None


@pytest.mark.parametrize("fast", [True, False])
def test_a_reader_closed_unfinished_adds_nothing_to_the_stage_times(fast: bool) -> None:
    """A reader dropped mid-shard (a loop that stopped; collected later, maybe while another
    epoch runs in this process) must not add its members to that epoch's counts."""
    from aisio.core.format.samples import iter_samples
    from aisio.core.system import timing

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(10):
            for suffix in ("jpg", "cls"):
                info = tarfile.TarInfo(f"{i:03d}.{suffix}")
                info.size = 3
                tar.addfile(info, io.BytesIO(b"abc"))
    timing.reset()
    samples = iter_samples(io.BytesIO(out.getvalue()), url="s.tar", fast=fast)
    next(samples)
    samples.close()
    members = iter_tar(io.BytesIO(out.getvalue()), url="s.tar")
    next(members)
    members.close()
    assert timing.snapshot()["parse_n"] == 0
    assert sum(1 for _ in iter_samples(io.BytesIO(out.getvalue()), url="s.tar", fast=fast)) == 10
    assert timing.snapshot()["parse_n"] == 20
    timing.reset()


def test_a_cut_in_a_pax_header_names_the_member_and_gives_up_its_sample() -> None:
    """Python's tarfile names each pax extended header '././@PaxHeader'; a shard cut inside
    one names the member the header describes, and the sample that member belongs to."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for key in ("k0", "k1"):
            for ext in ("cls", "png"):
                data = f"{key}.{ext}".encode()
                info = tarfile.TarInfo(f"shapes/{key}.{ext}")
                info.size = len(data)
                info.pax_headers = {"path": info.name, "comment": "c" * 300}
                tar.addfile(info, io.BytesIO(data))
    raw = buf.getvalue()
    cut = raw.index(b"path=shapes/k1.png") + 40  # inside k1.png's pax header
    got: list[dict[str, Any]] = []
    with pytest.raises(ShardFormatError) as info:
        got.extend(group_samples(iter_tar(io.BytesIO(raw[:cut]), url="ais://b/s.tar"),
                                 url="ais://b/s.tar"))
    assert "PaxHeader" not in str(info.value)
    assert info.value.member == "shapes/k1.png"
    assert "extended header of member 'shapes/k1.png'" in str(info.value)
    assert [s["__key__"] for s in got] == ["shapes/k0"]
    assert info.value.given_up == "shapes/k1"  # type: ignore[attr-defined]


@pytest.mark.parametrize("ends", [False, True])
def test_iter_samples_yields_the_sample_a_fault_in_the_next_one_leaves_whole(ends: bool) -> None:
    """Torn inside the first file of sample b: sample a, whole, is yielded (with its end,
    with ``ends=True``) before the error, and b, whose file the fault is in, is given up; torn
    inside a's second file, a is given up. As group_samples_with_end does."""
    from aisio.core.format.samples import iter_samples

    raw = _tar_bytes([("a.cls", b"1"), ("a.txt", b"x" * 600), ("b.cls", b"2" * 3000)])
    a_end = raw.index(b"b.cls")  # b's header begins where a's last member ends
    torn = raw[:a_end + 512 + 1000]  # inside b.cls's data
    got, error = _collect(iter_samples(io.BytesIO(torn), url=URL, ends=ends))
    assert isinstance(error, ShardFormatError) and error.member == "b.cls"
    assert getattr(error, "given_up", None) == "b"  # not yielded: the record must name it
    expected = {"__key__": "a", "__url__": URL, "cls": b"1", "txt": b"x" * 600}
    assert got == ([(expected, a_end)] if ends else [expected])
    got, error = _collect(iter_samples(io.BytesIO(raw[:1024 + 300]), url=URL, ends=ends))
    assert got == [] and getattr(error, "given_up", None) == "a"


def test_an_error_that_names_no_member_gives_up_the_sample_in_progress() -> None:
    """An object that changed while it was read (an error of no tar member, skippable): the
    whole samples before it are yielded, the one in progress is given up, and the error is
    the one raised (a skip policy can take it), not another."""
    changed = ObjectChangedError("ais://b/s.tar changed while it was read", url=URL)

    def members() -> Iterable[tuple[str, bytes]]:
        yield from [("a.cls", b"1"), ("a.txt", b"x"), ("b.cls", b"2")]
        raise changed

    got, error = _collect(sample for sample, _ in group_samples_with_end(members(), url=URL))
    assert [s["__key__"] for s in got] == ["a"]
    assert error is changed and changed.given_up == "b"  # type: ignore[attr-defined]


@pytest.mark.parametrize("fast", [True, False])
def test_a_size_field_of_twelve_digits_is_read_whole(fast: bool) -> None:
    """A writer may fill the 12-byte size field with digits and no terminator: ``000000001750``
    is 1,000 bytes (the fast path, which reads 11 digits, must leave such a header alone).
    The second header: the fast path reads from the buffer the first one filled."""
    from aisio.core.format.samples import iter_samples

    raw = bytearray(_tar_bytes([("a.cls", b"7"), ("a.bin", b"q" * 1000), ("b.cls", b"8")]))
    at = raw.index(b"a.bin")  # its header
    raw[at + 124:at + 136] = b"%012o" % 1000
    raw[at + 148:at + 156] = b" " * 8
    raw[at + 148:at + 156] = b"%06o\x00 " % sum(raw[at:at + 512])
    samples = list(iter_samples(io.BytesIO(bytes(raw)), url=URL, fast=fast))
    assert [(s["__key__"], len(s.get("bin", b""))) for s in samples] == [("a", 1000), ("b", 0)]


def test_headers_with_a_non_ascii_owner_are_read_by_the_fast_path_alike() -> None:
    """An owner name outside ASCII puts high bytes in the headers' last 356 bytes (whose sum
    the fast path keeps apart): every sample is read, the same as by the general reader."""
    from aisio.core.format.samples import iter_samples

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(4):
            for suffix, data in (("bin", bytes([i]) * 700), ("cls", b"%d" % i)):
                info = tarfile.TarInfo(f"{i:03d}.{suffix}")
                info.size, info.uname, info.gname = len(data), "\u00e9l\u00e8ve", "gr\u00fcn"
                tar.addfile(info, io.BytesIO(data))
    raw = out.getvalue()
    assert b"\xc3\xa9l\xc3\xa8ve" in raw
    fast = list(iter_samples(io.BytesIO(raw), url=URL))
    assert fast == list(iter_samples(io.BytesIO(raw), url=URL, fast=False))
    assert [(s["__key__"], s["cls"]) for s in fast] == [(f"{i:03d}", b"%d" % i) for i in range(4)]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("__a.b__", None),
        ("__meta__/sub/x.json", None),
        ("____/a.jpg", None),
        ("__a/b__/c.jpg", ("__a/b__/c", "jpg")),
        ("a/b.c/d/.jpg", ("a/b.c/d/", "jpg")),
        (".d/.jpg", None),
        ("x/.d/.jpg", None),
    ],
)
def test_meta_files_and_dot_files_are_kept_or_skipped_as_webdataset_does(
    name: str, expected: tuple[str, str] | None
) -> None:
    """Which names are a sample's files: a top-level ``__x__`` (a dot in it too), anything
    under a top-level ``__x__/`` (however deep, ``____/`` too) is skipped; a file name
    starting with a dot keeps its directory as the key unless that directory's own name has
    a dot (only the nearest directory counts)."""
    assert split_key(name) == expected
    assert split_key(name) == _webdataset_split(name)


Tag = tuple[str, int, int, frozenset[int], dict[str, Any]]


def _torn_in_the_second_sample() -> tuple[bytes, int]:
    """Returns a shard torn inside sample b's first file (a's two files are whole), and where
    a's last file ends."""
    raw = _tar_bytes([("a.cls", b"1"), ("a.txt", b"x" * 600), ("b.cls", b"2" * 3000)])
    a_end = raw.index(b"b.cls")
    return raw[:a_end + 512 + 1000], a_end


@pytest.mark.parametrize("fast", [True, False])
def test_the_sample_a_fault_in_the_next_one_leaves_whole_is_not_the_shards_last(
    fast: bool,
) -> None:
    """A shard task torn in sample b's file: sample a comes before the error with its
    position, ``last`` False (the shard did not end there: a resume must not take it as
    done)."""
    from aisio.core.format.samples import iter_samples

    torn, a_end = _torn_in_the_second_sample()
    tag: Tag = ("__pos__", 4, 7, frozenset(), {"__version__": "v"})
    got, error = _collect(iter_samples(io.BytesIO(torn), url=URL, tag=tag, fast=fast))
    assert isinstance(error, ShardFormatError) and error.member == "b.cls"
    assert [s["__pos__"] for s in got] == [(4, 7, a_end, False)]
    assert got[0]["__pos__"][3] is False and got[0]["__version__"] == "v"


def test_group_samples_with_end_yields_the_sample_a_fault_in_the_next_one_leaves_whole() -> None:
    """The members' grouping at a fault in sample b's file: sample a, whole, comes as
    ``(sample, end)`` with where its last file ends (a reader restarts there), then the
    error."""
    torn, a_end = _torn_in_the_second_sample()
    got: list[tuple[dict[str, Any], int]] = []
    with pytest.raises(ShardFormatError) as info:
        got.extend(group_samples_with_end(iter_tar(io.BytesIO(torn), url=URL), url=URL))
    assert info.value.given_up == "b"  # type: ignore[attr-defined]
    assert got == [({"__key__": "a", "__url__": URL, "cls": b"1", "txt": b"x" * 600}, a_end)]


def test_a_run_after_the_sample_in_progress_numbers_on_from_the_tasks_first_ordinal() -> None:
    """A shard task resumed at sample 5 (from its byte, nothing to skip): the first sample is
    read member by member, the run after it goes on from ordinal 6, every sample numbered
    once, in order, as without runs."""
    from aisio import Decoder
    from aisio.core.decode.runs import run_plan
    from aisio.core.format.samples import iter_samples
    from aisio.core.format.tar.runs import Columns

    raw = _tar_bytes([(f"s{i:05d}.{suffix}", b"%d" % i) for i in range(40)
                      for suffix in ("jpg", "cls")])
    tag: Tag = ("__pos__", 2, 5, frozenset(), {})
    plan = run_plan(Decoder(None, only=["cls"]), ("__key__", "cls"))
    ordinals: list[int] = []
    in_runs = 0
    for item in iter_samples(io.BytesIO(raw), url=URL, tag=tag, runs=plan):
        if type(item) is Columns:
            ordinals.extend(position[1] for position in item.positions)
            in_runs += len(item.values)
        else:
            ordinals.append(item["__pos__"][1])
    assert in_runs >= 30  # (the run did come)
    assert ordinals == list(range(5, 45))
    assert [s["__pos__"][1] for s in iter_samples(io.BytesIO(raw), url=URL, tag=tag)] == ordinals
