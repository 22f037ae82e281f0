"""Tests for aisio.core.format.tar: the streaming tar reader."""

from __future__ import annotations

import io
import random
import tarfile
from collections.abc import Iterable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aisio.core.faults.errors import LoaderUnavailableError, ShardFormatError
from aisio.core.format.tar import TarMember, iter_tar

URL = "ais://bucket/shard.tar"


# ------------------------------------------------------------------------------------- helpers


def make_tar(
    members: Iterable[tuple[str, bytes] | tarfile.TarInfo],
    fmt: int = tarfile.GNU_FORMAT,
) -> bytes:
    """Returns a tar archive holding ``members`` ((name, data) pairs or data-less TarInfos)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                tar.addfile(member)
                continue
            name, data = member
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def special(name: str, kind: bytes, linkname: str = "") -> tarfile.TarInfo:
    """Returns a TarInfo for a data-less record (directory, link, fifo)."""
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info


def raw_header(name: bytes, size_field: bytes, typeflag: bytes = b"0") -> bytes:
    """Returns a ustar header block with a valid checksum and the given raw fields."""
    block = bytearray(512)
    block[0 : len(name)] = name
    block[100:108] = b"0000644\x00"
    block[124:136] = size_field.ljust(12, b"\x00")
    block[136:148] = b"00000000000\x00"
    block[148:156] = b" " * 8
    block[156:157] = typeflag
    block[257:265] = b"ustar\x0000"
    block[148:156] = b"%06o\x00 " % sum(block)
    return bytes(block)


def pad(data: bytes) -> bytes:
    """Returns ``data`` padded with NULs to a multiple of 512 bytes."""
    return data + bytes(-len(data) % 512)


def pax_record(key: str, value: str) -> bytes:
    """Returns one pax extended-header record."""
    body = f" {key}={value}\n".encode()
    length = len(body) + 1
    while len(str(length)) + len(body) != length:
        length += 1
    return str(length).encode() + body


def read_tarfile(raw: bytes) -> list[tuple[str, bytes]]:
    """Returns the regular files of ``raw`` as Python's tarfile reads them."""
    result = []
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r|") as tar:
        for info in tar:
            if info.isreg():
                handle = tar.extractfile(info)
                assert handle is not None
                result.append((info.name, handle.read()))
    return result


def read_all(raw: bytes, **kwargs: object) -> list[TarMember]:
    return list(iter_tar(io.BytesIO(raw), url=URL, **kwargs))  # type: ignore[arg-type]


def names_and_data(members: Iterable[TarMember]) -> list[tuple[str, bytes]]:
    return [(m.name, m.data) for m in members]


class ShortReader:
    """A stream that returns between 1 and ``most`` bytes per read."""

    def __init__(self, raw: bytes, seed: int, most: int = 700) -> None:
        self._stream = io.BytesIO(raw)
        self._random = random.Random(seed)
        self._most = most

    def read(self, size: int = -1) -> bytes:
        limit = self._random.randint(1, self._most)
        return self._stream.read(limit if size < 0 else min(size, limit))


class RecordingReader(io.BytesIO):
    """A BytesIO remembering the largest read it was asked for."""

    largest = 0

    def read(self, size: int | None = -1) -> bytes:
        self.largest = max(self.largest, size if size is not None else -1)
        return super().read(size)


MIXED = [
    ("a/0001.jpg", b"\xff\xd8" + b"j" * 3000),
    ("a/0001.cls", b"7"),
    ("a/0002.jpg", b""),
    ("a/0002.cls", b"3"),
    ("x" * 120 + "/long.txt", b"long name"),
    ("big.bin", bytes(range(256)) * 40),
]


# --------------------------------------------------------------------------- formats & parity


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
@pytest.mark.parametrize("bufsize", [512, 1024, 4096, 1 << 20])
def test_matches_tarfile(fmt: int, bufsize: int) -> None:
    raw = make_tar(MIXED, fmt)
    members = read_all(raw, bufsize=bufsize)
    assert names_and_data(members) == read_tarfile(raw) == MIXED


def test_ustar_prefix_field() -> None:
    name = "d" * 90 + "/" + "e" * 40 + "/file.seg.png"
    raw = make_tar([(name, b"data")], tarfile.USTAR_FORMAT)
    assert raw[345:350] == b"ddddd"  # the name really went through the prefix field
    assert names_and_data(read_all(raw)) == [(name, b"data")]


def test_pax_unicode_and_long_names() -> None:
    members = [("ünïcødé/ファイル.jpg", b"1"), ("p" * 300 + ".txt", b"22"), ("plain.txt", b"")]
    raw = make_tar(members, tarfile.PAX_FORMAT)
    assert names_and_data(read_all(raw)) == members


def test_undecodable_name_does_not_crash() -> None:
    raw = pad(raw_header(b"bad\xff\xfe.txt", b"%011o" % 2) + b"ok") + bytes(1024)
    [member] = read_all(raw)
    assert member.name == "bad\udcff\udcfe.txt"
    assert member.name.encode("utf-8", "surrogateescape") == b"bad\xff\xfe.txt"


def test_skips_directories_links_and_other_records() -> None:
    members: list[tuple[str, bytes] | tarfile.TarInfo] = [
        special("dir", tarfile.DIRTYPE),
        ("dir/f.txt", b"f"),
        special("dir/sym.txt", tarfile.SYMTYPE, "f.txt"),
        special("dir/hard.txt", tarfile.LNKTYPE, "dir/f.txt"),
        special("fifo", tarfile.FIFOTYPE),
        special("y" * 150, tarfile.SYMTYPE, "z" * 150),  # GNU long name and long link
        ("g.txt", b"g"),
    ]
    raw = make_tar(members)
    assert names_and_data(read_all(raw)) == [("dir/f.txt", b"f"), ("g.txt", b"g")]


def test_contiguous_type_and_v7_directory() -> None:
    raw = pad(raw_header(b"c.bin", b"%011o" % 3, b"7") + b"abc")
    raw += raw_header(b"olddir/", b"%011o" % 0, b"\x00")
    raw += pad(raw_header(b"v7.bin", b"%011o" % 1, b"\x00") + b"z")
    assert names_and_data(read_all(raw)) == [("c.bin", b"abc"), ("v7.bin", b"z")]


def test_base256_size() -> None:
    size_field = b"\x80" + (5000).to_bytes(11, "big")
    raw = pad(raw_header(b"b256.bin", size_field) + b"q" * 5000) + bytes(1024)
    [member] = read_all(raw, bufsize=1024)
    assert member.data == b"q" * 5000
    assert member.end == 512 + 5120


def test_pax_size_and_path_override_header() -> None:
    pax = pax_record("path", "real/näme.txt") + pax_record("size", "5") + pax_record("mtime", "1")
    raw = pad(raw_header(b"PaxHeaders/x", b"%011o" % len(pax), b"x") + pax)
    raw += pad(raw_header(b"short", b"%011o" % 0) + b"hello")
    raw += pad(raw_header(b"next.txt", b"%011o" % 1) + b"n")
    members = read_all(raw)
    assert names_and_data(members) == [("real/näme.txt", b"hello"), ("next.txt", b"n")]
    assert members[0].offset == 0
    assert members[1].offset == members[0].end == 2048


def test_global_pax_header_is_skipped() -> None:
    glob = pax_record("comment", "x" * 600)
    raw = pad(raw_header(b"global", b"%011o" % len(glob), b"g") + glob)
    raw += pad(raw_header(b"a.txt", b"%011o" % 1) + b"a")
    [member] = read_all(raw)
    assert (member.name, member.data, member.offset) == ("a.txt", b"a", 1536)


def test_members_larger_than_buffer_and_empty_members() -> None:
    blob = random.Random(1).randbytes(300_000)
    members = [("e.txt", b""), ("big.bin", blob), ("e2.txt", b""), ("odd.bin", blob[:1001])]
    raw = make_tar(members)
    for bufsize in (512, 4096, 65536):
        stream = RecordingReader(raw)
        result = list(iter_tar(stream, bufsize=bufsize))
        assert names_and_data(result) == members
        assert stream.largest <= bufsize  # memory stays bounded by the buffer, not the shard


# ------------------------------------------------------------------------------ stream shapes


@pytest.mark.parametrize("seed", range(5))
def test_short_reads(seed: int) -> None:
    raw = make_tar(MIXED, tarfile.PAX_FORMAT)
    expected = read_all(raw)
    result = list(iter_tar(ShortReader(raw, seed), url=URL, bufsize=1024))
    assert result == expected


def test_reads_from_unbuffered_file(tmp_path: pytest.TempPathFactory) -> None:
    path = tmp_path / "shard.tar"  # type: ignore[operator]
    raw = make_tar(MIXED)
    path.write_bytes(raw)
    with open(path, "rb", buffering=0) as stream:
        assert names_and_data(iter_tar(stream, bufsize=2048)) == MIXED


def test_zero_bytes_is_a_shard_error() -> None:
    with pytest.raises(ShardFormatError, match="empty") as info:
        read_all(b"")
    assert info.value.offset == 0
    assert read_all(b"", start_offset=1024) == []  # a stream resumed exactly at its end


def test_only_end_of_archive_blocks() -> None:
    assert read_all(bytes(10240)) == []


def test_clean_eof_without_end_blocks() -> None:
    raw = make_tar(MIXED)
    end = read_all(raw)[-1].end
    assert names_and_data(read_all(raw[:end])) == MIXED


def test_stops_at_end_of_archive_and_ignores_trailing_bytes() -> None:
    raw = make_tar(MIXED) + b"trailing garbage after the archive"
    assert names_and_data(read_all(raw)) == MIXED


# ------------------------------------------------------------------------------------ offsets


def test_offsets_and_restart_at_member_boundaries() -> None:
    raw = make_tar(MIXED)
    members = read_all(raw, bufsize=1024)
    previous_end = 0
    for member in members:
        assert member.offset == previous_end  # GNU long-name header included in the offset
        assert member.offset % 512 == 0 and member.end % 512 == 0
        previous_end = member.end
    long_member = members[4]
    assert raw[long_member.offset + 156 : long_member.offset + 157] == b"L"
    for k, member in enumerate(members):
        rest = list(iter_tar(io.BytesIO(raw[member.end :]), start_offset=member.end, bufsize=1024))
        assert rest == members[k + 1 :]


def test_restart_at_offset_of_member_with_extended_header() -> None:
    raw = make_tar(MIXED, tarfile.PAX_FORMAT)
    members = read_all(raw)
    start = members[4].offset
    rest = list(iter_tar(io.BytesIO(raw[start:]), start_offset=start))
    assert rest == members[4:]


# ------------------------------------------------------------------------------------- errors


def test_truncated_inside_data_names_member_and_offset() -> None:
    raw = make_tar([("a/0001.jpg", b"j" * 4096), ("a/0001.cls", b"1")])
    with pytest.raises(ShardFormatError) as info:
        read_all(raw[: 512 + 1000])
    err = info.value
    assert err.member == "a/0001.jpg"
    assert err.offset == 1512
    assert err.url == URL
    assert "ais://bucket/shard.tar" in str(err) and "'a/0001.jpg'" in str(err)
    assert "1512" in str(err) and "truncated" in str(err)


def test_truncated_inside_header() -> None:
    raw = make_tar(MIXED)
    second = read_all(raw)[1].offset
    with pytest.raises(ShardFormatError, match="inside a tar header") as info:
        read_all(raw[: second + 100])
    assert info.value.offset == second + 100


def test_truncated_inside_padding() -> None:
    raw = make_tar([("a.txt", b"abc"), ("b.txt", b"b")])
    with pytest.raises(ShardFormatError) as info:
        read_all(raw[:600])
    assert info.value.member == "a.txt"


def test_truncated_after_extended_header() -> None:
    raw = make_tar([("n" * 200 + ".txt", b"x")])
    with pytest.raises(ShardFormatError, match="extended header") as info:
        read_all(raw[:1024])  # the 'L' header and its data, no member header
    assert info.value.member == "n" * 200 + ".txt"


def test_every_cut_point_is_clean_or_shard_format_error() -> None:
    raw = make_tar(MIXED, tarfile.PAX_FORMAT)
    full = read_all(raw)
    boundaries = {m.end for m in full}  # cut 0 is a zero-byte object: an error, not a clean end
    for cut in range(0, full[-1].end + 1, 37):
        try:
            result = read_all(raw[:cut], bufsize=1024)
        except ShardFormatError as err:
            assert cut not in boundaries
            assert err.offset is not None and 0 <= err.offset <= cut
        else:
            assert cut in boundaries
            assert result == [m for m in full if m.end <= cut]


def test_corrupt_checksum_after_first_member() -> None:
    raw = bytearray(make_tar(MIXED))
    second = read_all(bytes(raw))[1].offset
    raw[second + 3] ^= 0x01
    with pytest.raises(ShardFormatError, match="corrupt tar header") as info:
        read_all(bytes(raw))
    assert info.value.offset == second
    assert "after the header of 'a/0001.jpg'" in str(info.value)


def test_signed_checksum_is_accepted() -> None:
    block = bytearray(raw_header(b"\xe9t\xe9.txt", b"%011o" % 1))
    block[148:156] = b" " * 8
    signed = sum(b - 256 if b >= 128 else b for b in block)
    block[148:156] = b"%06o\x00 " % signed
    assert names_and_data(read_all(pad(bytes(block) + b"s"))) == [("\udce9t\udce9.txt", b"s")]


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes(random.Random(2).randbytes(2000)),
        random.Random(3).randbytes(4096),
        b"PK\x03\x04" + bytes(1020),
        b"x" * 100,
    ],
    ids=["jpeg", "random", "zip", "short-text"],
)
def test_non_tar_data(raw: bytes) -> None:
    with pytest.raises(ShardFormatError) as info:
        read_all(raw)
    assert info.value.offset == 0 or info.value.offset == len(raw)
    assert URL in str(info.value)


def test_non_tar_message_without_url() -> None:
    with pytest.raises(ShardFormatError, match="<stream> is not a tar file") as info:
        list(iter_tar(io.BytesIO(b"y" * 512)))
    assert info.value.url is None


def test_start_offset_shifts_error_offsets() -> None:
    with pytest.raises(ShardFormatError, match="corrupt tar header at byte 10240 ") as info:
        list(iter_tar(io.BytesIO(b"y" * 512), start_offset=10240))
    assert info.value.offset == 10240


@pytest.mark.parametrize("size_field", [b"garbage!", b"\xff" + bytes(11), b"-0000001", b"99"])
def test_invalid_size_field(size_field: bytes) -> None:
    raw = raw_header(b"bad.bin", size_field) + bytes(1024)
    with pytest.raises(ShardFormatError, match="invalid size") as info:
        read_all(raw)
    assert info.value.member == "bad.bin"
    assert info.value.offset == 0


def test_oversized_extended_header() -> None:
    raw = raw_header(b"././@LongLink", b"%011o" % (64 << 20), b"L") + bytes(1024)
    with pytest.raises(ShardFormatError, match="extended header of"):
        read_all(raw)


@pytest.mark.parametrize("pax", [b"garbage", b"5 a=b\n", b"99 path=x\n", b"12 noequal\n"])
def test_malformed_pax_header(pax: bytes) -> None:
    raw = pad(raw_header(b"pax", b"%011o" % len(pax), b"x") + pax) + bytes(1024)
    with pytest.raises(ShardFormatError, match="pax"):
        read_all(raw)


def test_sparse_members_are_refused() -> None:
    raw = pad(raw_header(b"sparse.bin", b"%011o" % 4, b"S") + b"abcd") + bytes(1024)
    with pytest.raises(ShardFormatError, match="sparse"):
        read_all(raw)


def test_bufsize_must_hold_a_header() -> None:
    with pytest.raises(ValueError, match="bufsize"):
        read_all(b"", bufsize=100)


# --------------------------------------------------------------------------------- hypothesis

NAME_CHARS = st.sampled_from([*"abcXYZ019._-/ ", "é", "ß", "字", "🙂"])
NAMES = st.text(NAME_CHARS, min_size=1, max_size=160).filter(
    lambda n: not n.endswith("/") and "//" not in n and not n.startswith("/")
)
MEMBERS = st.lists(st.tuples(NAMES, st.binary(max_size=3000)), max_size=6)
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
VALID = make_tar(MIXED[:2] + MIXED[4:5], tarfile.PAX_FORMAT)


@FAST
@given(
    members=MEMBERS,
    fmt=st.sampled_from([tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]),
    bufsize=st.integers(512, 8192),
    seed=st.integers(0, 1000),
)
def test_hypothesis_matches_tarfile(
    members: list[tuple[str, bytes]], fmt: int, bufsize: int, seed: int
) -> None:
    raw = make_tar(members, fmt)
    result = list(iter_tar(ShortReader(raw, seed), bufsize=bufsize))
    assert names_and_data(result) == read_tarfile(raw) == members


@FAST
@given(st.binary(max_size=3000))
def test_hypothesis_random_bytes(raw: bytes) -> None:
    try:
        read_all(raw, bufsize=1024)
    except ShardFormatError as err:
        assert err.offset is not None and 0 <= err.offset <= len(raw)
    except LoaderUnavailableError:  # zstd magic without the optional zstandard package
        assert raw.startswith(b"\x28\xb5\x2f\xfd")


@FAST
@given(
    mutations=st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), max_size=4),
    cut=st.integers(0, len(VALID)),
)
def test_hypothesis_mutated_tar(mutations: list[tuple[int, int]], cut: int) -> None:
    raw = bytearray(VALID)
    for position, value in mutations:
        raw[position] = value
    try:
        members = read_all(bytes(raw[:cut]), bufsize=1024)
    except ShardFormatError as err:
        assert err.offset is not None and 0 <= err.offset <= cut
    else:
        assert all(m.offset < m.end <= cut for m in members)


VALID_HEADERS = [0, *(m.end for m in read_all(VALID)[:-1])]


def _with_checksum(block: bytearray) -> bytearray:
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\x00 " % sum(block)
    return block


@FAST
@given(
    header=st.sampled_from(VALID_HEADERS),
    mutations=st.lists(
        st.tuples(
            st.sampled_from([*range(100, 136), 156, *range(257, 265), *range(345, 360)]),
            st.integers(0, 255),
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_hypothesis_mutated_header_with_valid_checksum(
    header: int, mutations: list[tuple[int, int]]
) -> None:
    raw = bytearray(VALID)
    block = raw[header : header + 512]
    for position, value in mutations:
        block[position] = value
    raw[header : header + 512] = _with_checksum(block)
    try:
        members = read_all(bytes(raw), bufsize=1024)
    except ShardFormatError as err:
        assert err.offset is not None and 0 <= err.offset <= len(raw)
    else:
        assert all(m.offset < m.end <= len(raw) for m in members)


def test_error_survives_pickling() -> None:
    import pickle

    with pytest.raises(ShardFormatError) as info:
        read_all(make_tar(MIXED)[:700])
    copy = pickle.loads(pickle.dumps(info.value))
    assert type(copy) is ShardFormatError
    assert (str(copy), copy.offset, copy.member, copy.url) == (
        str(info.value),
        info.value.offset,
        info.value.member,
        URL,
    )


@pytest.mark.parametrize("form", [b"%06o\x00 ", b"%o\x00", b"%o \x00"])
def test_a_signed_checksum_without_leading_zeros_is_accepted(form: bytes) -> None:
    """Old writers sum header bytes as signed and may not zero-pad: this header's signed
    sum is 0o5422, written from its first digit, an odd one (octal text, which only a high
    bit in the first byte would make GNU base-256)."""
    block = bytearray(raw_header(b"\xe9t\xe9.txt", b"%011o" % 1))
    block[148:156] = b" " * 8
    signed = sum(b - 256 if b >= 128 else b for b in block)
    assert signed == 0o5422 and sum(block) != signed
    block[148:156] = (form % signed).ljust(8, b"\x00")
    assert names_and_data(read_all(pad(bytes(block) + b"s"))) == [("\udce9t\udce9.txt", b"s")]


def test_a_signed_checksum_of_zero_is_accepted() -> None:
    """A header whose signed byte sum is 0 (its name's high bytes outweigh the rest), as a
    signed-sum writer records it: a checksum of 0 is a checksum, not a missing one."""
    name = b"\x80" * 18 + b"\xc2"
    block = bytearray(raw_header(name, b"%011o" % 1))
    block[148:156] = b" " * 8
    assert sum(b - 256 if b >= 128 else b for b in block) == 0
    block[148:156] = b"000000\x00 "
    [member] = read_all(pad(bytes(block) + b"z"))
    assert member.data == b"z"


def test_a_record_of_unknown_type_cut_short_names_itself_and_the_byte() -> None:
    """Records of types aisio does not read are skipped with their data; cut short inside that
    data, the error (skippable) names the record and where the data stopped."""
    raw = raw_header(b"odd.rec", b"%011o" % 3000, b"Z") + b"z" * 1000
    with pytest.raises(ShardFormatError, match="truncated at byte 1512 inside record") as info:
        read_all(raw, bufsize=1024)
    assert info.value.offset == 1512 and info.value.member == "odd.rec"


def test_a_checksum_in_base_256_is_accepted() -> None:
    """tarfile reads any numeric field, the checksum too, as GNU base-256 when its first byte
    has the high bit set; so does aisio (every other reader of the shard would take it)."""
    block = bytearray(raw_header(b"b.bin", b"%011o" % 1))
    block[148:156] = b" " * 8
    block[148:156] = b"\x80" + sum(block).to_bytes(7, "big")
    assert names_and_data(read_all(pad(bytes(block) + b"b"))) == [("b.bin", b"b")]


def _signed(block: bytearray, form: bytes = b"%06o\x00 ") -> bytes:
    """Returns ``block`` with the signed byte sum of its bytes as its checksum, in ``form``."""
    block[148:156] = b" " * 8
    signed = sum(b - 256 if b >= 128 else b for b in block)
    assert signed != sum(block)  # (so the unsigned sum is not it)
    block[148:156] = form % signed if b"%" in form else form + signed.to_bytes(7, "big")
    return bytes(block)


def test_a_signed_checksum_is_accepted_past_the_first_header() -> None:
    """The signed sum is checked over the header where it lies in the read buffer, not over
    the buffer's first 512 bytes (a second member, data before it)."""
    first = pad(raw_header(b"a.txt", b"%011o" % 5) + b"a" * 5)
    second = pad(_signed(bytearray(raw_header(b"\xe9t\xe9.txt", b"%011o" % 1))) + b"s")
    raw = first + second + bytes(1024)
    assert names_and_data(read_all(raw)) == [("a.txt", b"a" * 5), ("\udce9t\udce9.txt", b"s")]
    assert names_and_data(read_all(raw)) == read_tarfile(raw)


def test_a_signed_checksum_counts_every_byte_of_the_header_once() -> None:
    """A symlink whose link name fills its 100 bytes (to byte 256, where the checksum's two
    halves meet), under a signed checksum: skipped as a link, the file after it read, as
    tarfile reads them."""
    link = bytearray(raw_header(b"\xe9.lnk", bytes(11), b"2"))
    link[157:257] = b"t" * 100
    raw = _signed(link) + pad(raw_header(b"b.txt", b"%011o" % 1) + b"b") + bytes(1024)
    assert names_and_data(read_all(raw)) == [("b.txt", b"b")] == read_tarfile(raw)


def test_a_checksum_in_base_256_of_the_signed_sum_is_accepted_as_tarfile_accepts_it() -> None:
    """tarfile takes a checksum of either sum in either notation; the bytes of a base-256
    checksum field (0x80 first) are not counted among the header's high bytes."""
    block = bytearray(raw_header(b"\xe9t\xe9.txt", b"%011o" % 1))
    raw = pad(_signed(block, b"\x80") + b"s") + bytes(1024)
    assert names_and_data(read_all(raw)) == [("\udce9t\udce9.txt", b"s")]
    assert names_and_data(read_all(raw)) == read_tarfile(raw)


def test_a_header_whose_checksum_field_is_not_a_number_is_refused_whatever_it_sums_to() -> None:
    """A block after a member whose checksum field holds no number: corrupt, even when its
    bytes happen to sum (signed) to 1, a number a check could compare them with."""
    block = bytearray(512)
    block[0:5] = b"\x80\x80\x80.S"
    block[148:156] = b"zzzzzzzz"
    assert sum(b - 256 if b >= 128 else b for b in block) - sum(b"zzzzzzzz") + 8 * 0x20 == 1
    raw = pad(raw_header(b"a.txt", b"%011o" % 1) + b"a") + bytes(block) + bytes(1024)
    with pytest.raises(ShardFormatError, match="corrupt tar header at byte 1024") as info:
        read_all(raw)
    assert info.value.offset == 1024


def test_a_gnu_long_name_that_is_not_utf8_is_read_with_surrogate_escapes() -> None:
    """Names are bytes in tar: a long name (GNU 'L' record) outside UTF-8 is read as a
    header's own name is, undecodable bytes as surrogate escapes, not refused."""
    name = "n" * 120 + "\udcff.txt"
    raw = make_tar([(name, b"x")], tarfile.GNU_FORMAT)
    assert b"\xff.txt" in raw
    assert names_and_data(read_all(raw)) == [(name, b"x")]


def test_a_size_field_left_blank_is_an_empty_member_as_tarfile_reads_it() -> None:
    """A size field of NULs only (some writers leave it so for files without data) is 0,
    the next member read after the header alone."""
    raw = (raw_header(b"a.txt", bytes(12)) + pad(raw_header(b"b.txt", b"%011o" % 1) + b"b")
           + bytes(1024))
    assert names_and_data(read_all(raw)) == [("a.txt", b""), ("b.txt", b"b")]
    assert names_and_data(read_all(raw)) == read_tarfile(raw)


@pytest.mark.parametrize(
    ("size_field", "error"),
    [
        (b"\x80\x01" + bytes(9) + b"\x05", "truncated"),  # 2**80 + 5 bytes: all 11 bytes read
        (b"\xff" + bytes(9) + b"\x10\x00", "invalid size"),  # negative: 4096 - 256**11
        (b"\xff\x01" + bytes(8) + b"\x10\x00", "invalid size"),  # negative too
    ],
    ids=["huge", "negative", "negative-with-a-high-byte"],
)
def test_a_base_256_size_is_read_from_every_byte_and_a_negative_one_refused(
    size_field: bytes, error: str
) -> None:
    """GNU base-256 sizes: 0x80 then the value in 11 bytes, 0xFF then a negative one
    (two's complement). No reading of them may turn into a few bytes a member could hold."""
    raw = pad(raw_header(b"big.bin", size_field) + b"d" * 4096) + bytes(1024)
    got: list[TarMember] = []
    with pytest.raises(ShardFormatError, match=error) as info:
        got.extend(iter_tar(io.BytesIO(raw), url=URL))
    assert got == [] and info.value.member == "big.bin" and info.value.url == URL


def test_a_shard_cut_after_an_extended_header_names_itself_and_the_byte() -> None:
    """The error of a stream that ends right after an extended header (the member it
    describes missing) names the shard and the byte, as every truncation error does."""
    raw = make_tar([("n" * 200 + ".txt", b"x")])
    with pytest.raises(ShardFormatError, match="right after the extended header") as info:
        read_all(raw[:1024])
    assert info.value.url == URL and info.value.offset == 1024
    record = pad(raw_header(b"odd.rec", b"%011o" % 3000, b"Z")) + b"z" * 1000
    with pytest.raises(ShardFormatError, match="inside record") as info:
        read_all(record, bufsize=1024)
    assert info.value.url == URL and info.value.offset == 1512


def test_a_ustar_prefix_of_one_character_is_part_of_the_name() -> None:
    """The prefix field is used when its first byte is set, however short (``d`` here)."""
    name = "d/" + "x" * 99
    raw = make_tar([(name, b"data")], tarfile.USTAR_FORMAT)
    assert raw[345:347] == b"d\x00"  # a prefix of one byte
    assert names_and_data(read_all(raw)) == [(name, b"data")]


def test_a_read_failing_past_what_is_needed_is_raised_once_the_bytes_before_it_are_used() -> None:
    """Gathering reads ahead of what the parser needs: a read that fails once the needed bytes
    are in (here exactly them) leaves those bytes to be parsed, and the error is raised at the
    next fill, not dropped (the stream then says it ended)."""
    from aisio.core.format.tar.stream import _Source

    reads = iter([b"x" * 512, OSError("connection reset"), b""])

    def read(size: int) -> bytes:
        step = next(reads)
        if isinstance(step, Exception):
            raise step
        return step

    source = _Source(read, 0, 4096, gather=True)
    assert source.fill(512) == 512 and source.buf == b"x" * 512
    source.pos = 512
    with pytest.raises(OSError, match="connection reset"):
        source.fill(512)


def test_a_pax_size_applies_to_the_next_file_not_to_a_long_name_record_between() -> None:
    """A pax header's ``size`` is the next *file's*: a GNU long-name record between them keeps
    its own size (read with the pax size, its name's bytes would be cut and the archive read
    from the wrong place)."""

    record = b"10 size=5\n"
    longname = b"d" * 120 + b"/sample.cls"
    raw = (raw_header(b"././@PaxHeader", b"%011o" % len(record), b"x") + pad(record)
           + raw_header(b"././@LongLink", b"%011o" % (len(longname) + 1), b"L")
           + pad(longname + b"\x00")
           + raw_header(b"short.cls", b"%011o" % 5) + pad(b"12345") + bytes(1024))
    assert names_and_data(read_all(raw)) == [(longname.decode(), b"12345")]


def test_a_pax_record_value_may_hold_an_equals_sign() -> None:
    """A pax record is ``key=value`` split at the first ``=``: a path holding one is kept."""
    name = "été=2024/s001.jpg"
    raw = make_tar([(name, b"data")], tarfile.PAX_FORMAT)
    assert b"path=" + name.encode() in raw  # the name went through a pax record
    assert names_and_data(read_all(raw)) == [(name, b"data")]


def test_a_pax_header_before_a_record_of_an_unknown_type_is_spent_on_it() -> None:
    """A pax header applies to the record right after it: when that record is of a type aisio
    skips (``V``, a volume label, here), the file after it keeps its own name."""
    record = b"20 path=renamed.jpg\n"
    raw = (raw_header(b"././@PaxHeader", b"%011o" % len(record), b"x") + pad(record)
           + raw_header(b"label", b"%011o" % 0, b"V")
           + raw_header(b"s.cls", b"%011o" % 1) + pad(b"7") + bytes(1024))
    assert names_and_data(read_all(raw)) == [("s.cls", b"7")]
