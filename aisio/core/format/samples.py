"""WebDataset grouping: tar members to samples.

The rules are those of the ``webdataset`` library (1.0.x):

* a member name splits into a *key* (the directories plus the file name up to its first dot) and
  a *suffix* (everything after that dot, lower-cased): ``train/a.b/0001.seg.PNG`` gives key
  ``train/a.b/0001`` and suffix ``seg.png``;
* names whose file name has no dot are skipped, as are meta files: a top-level name like
  ``__index__`` or anything under a top-level ``__meta__/`` directory (for file names starting
  with a dot, see :func:`split_key`);
* a sample is a run of *consecutive* members sharing a key, and a suffix may appear only once in
  a sample.

:func:`iter_samples` reads a tar stream into samples in one pass: the fast path every loader
takes (see its docstring); :func:`group_samples` groups members already read.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterable, Iterator
from typing import Any

from aisio.core.faults.errors import AISIOError, ShardFormatError
from aisio.core.format.tar.fast import batches
from aisio.core.format.tar.runs import Columns, Run, RunPlan
from aisio.core.format.tar.stream import BinaryReadable, ShardReader, StageTimes, TarMember
from aisio.core.system import timing

MemberLike = TarMember | tuple[str, bytes]
"""A :class:`TarMember`, or a plain ``(name, data)`` pair (which has no offsets)."""

NO_OFFSET = -1
"""The end offset reported for samples built from plain ``(name, data)`` pairs."""


def _is_meta(name: str) -> bool:
    """Returns whether ``name`` is a WebDataset meta file (``__x__`` or ``__x__/...``)."""
    if not name.startswith("__"):
        return False
    slash = name.find("/")
    if slash < 0:
        return name.endswith("__")
    return slash >= 4 and name[slash - 2 : slash] == "__"


def split_key(name: str) -> tuple[str, str] | None:
    """Returns the ``(key, suffix)`` of a member name, or None when WebDataset skips the member.

    The key is the path up to the first dot of the file name (directories, dots included, are
    kept); the suffix is the rest, lower-cased. Like ``webdataset``, a file name starting with a
    dot keeps its directory as the key (``d/.jpg`` -> ``("d/", "jpg")``) unless that directory's
    own name has a dot or there is no directory (then the member is skipped).

    Args:
        name: a tar member's path.
    """
    if _is_meta(name):
        return None
    slash = name.rfind("/")
    dot = name.find(".", slash + 1)
    if dot < 0:
        return None
    if dot == slash + 1 and (slash < 0 or "." in name[name.rfind("/", 0, slash) + 1 : slash]):
        return None
    return name[:dot], name[dot + 1 :].lower()


def _duplicate(url: str, name: str, suffix: str, key: str, offset: int | None
               ) -> ShardFormatError:
    where = f" at byte {offset}" if offset is not None else ""
    return ShardFormatError(
        f"shard {url} has member {name!r}{where} whose suffix '{suffix}' is already taken in "
        f"sample {key!r}; give every file of a sample a distinct suffix",
        url=url,
        offset=offset,
        member=name,
    )


def group_samples_with_end(
    members: Iterable[MemberLike], *, url: str
) -> Iterator[tuple[dict[str, Any], int]]:
    """Yields ``(sample, end)`` for each sample; ``end`` is where the sample's last member ends.

    A reader that stopped after a sample can restart the shard at ``end`` (a member boundary).
    ``end`` is :data:`NO_OFFSET` (-1) when the members are plain ``(name, data)`` pairs.

    Each sample is a new dict with ``__key__``, ``__url__`` and one entry ``suffix -> bytes`` per
    member. Only one sample is held at a time.

    Args:
        members: tar members in archive order (from :func:`aisio.core.format.tar.iter_tar`).
        url: the shard's name, stored in ``__url__`` and used in error messages.

    Raises:
        ShardFormatError: a suffix repeats within a sample. Before an error (this one, or one
            from ``members``) every sample known to be whole is yielded (the one in progress
            is, when the error names a member of another sample), and the error names in
            ``given_up`` the key of the sample the fault interrupted, not yielded: the one whose
            file the error names, else the one in progress (files of it may lie past the
            fault).
    """
    sample: dict[str, Any] | None = None
    end = NO_OFFSET
    try:
        for member in members:
            if isinstance(member, TarMember):
                name, data, offset, member_end = member
            else:
                name, data = member
                offset, member_end = None, NO_OFFSET
            parts = split_key(name)
            if parts is None:
                continue
            key, suffix = parts
            if sample is None or sample["__key__"] != key:
                if sample is not None:
                    yield sample, end
                sample = {"__key__": key, "__url__": url}
            if suffix in sample:
                raise _duplicate(url, name, suffix, key, offset)
            sample[suffix] = data
            end = member_end
    except AISIOError as exc:
        yield from _at_fault(exc, sample, end, True, None, 0)
        raise
    if sample is not None:
        yield sample, end


def _given_up(sample: dict[str, Any] | None, at: tuple[str, str] | None) -> str | None:
    """Returns the key of the sample a fault interrupts: the one whose file it is in (``at``,
    the faulting member's key and suffix, when the error names a member), else the one in
    progress (more of its files may lie past the fault), else None."""
    if at is not None:
        return at[0]
    return None if sample is None else str(sample["__key__"])


def group_samples(members: Iterable[MemberLike], *, url: str) -> Iterator[dict[str, Any]]:
    """Yields the WebDataset samples made of ``members``, in order.

    See :func:`group_samples_with_end`, which this wraps.

    Args:
        members: tar members in archive order (from :func:`aisio.core.format.tar.iter_tar`).
        url: the shard's name, stored in ``__url__`` and used in error messages.

    Raises:
        ShardFormatError: a suffix repeats within a sample.
    """
    for sample, _ in group_samples_with_end(members, url=url):
        yield sample


def iter_samples(
    stream: BinaryReadable,
    *,
    url: str,
    start_offset: int = 0,
    bufsize: int = 1 << 20,
    ends: bool = False,
    fast: bool = True,
    tag: Tag | None = None,
    runs: RunPlan | None = None,
) -> Iterator[Any]:
    """Yields the WebDataset samples of a tar stream, read and grouped in one pass.

    The same samples, offsets and errors as ``group_samples(iter_tar(stream, ...))`` (see
    :func:`aisio.core.format.tar.iter_tar` for the tar formats, compression, offsets and errors, and
    :func:`group_samples_with_end` for the grouping), at a fraction of the cost per member: the
    members come from the fast path (:mod:`aisio.core.format.tar.fast`: plain members read
    straight from the read buffer, anything else and every error from the general reader), a
    batch at a time, and are grouped here with :func:`split_key`'s common case inlined.

    Args:
        stream: a binary file-like with ``read(n)``; short reads are fine.
        url: the shard's name, stored in ``__url__`` and used in error messages.
        start_offset: where a reopened stream starts (see :func:`aisio.core.format.tar.iter_tar`).
        bufsize: how many bytes to read at a time.
        ends: yield ``(sample, end)`` pairs instead of samples, ``end`` being the offset just
            past the sample's last member (where a reader restarts after it).
        fast: False reads every member through the general reader (for tests).
        tag: ``(field, shard, first, skip, extra)``: give each sample its position in
            ``field``, ``(shard, ordinal, end, last)``, counting ordinals from ``first``, and
            the ``extra`` fields; samples whose ordinal is in ``skip`` are read but not
            yielded (a resumed shard task: :func:`aisio.core.pipeline.parse.task_samples`). ``last``
            is True for the shard's final sample only.
        runs: with a ``tag`` whose ``skip`` is empty: where the read buffer holds a run of
            regular samples (:func:`aisio.core.format.tar.runs.regular_run`), yield them at
            once as one :class:`~aisio.core.format.tar.runs.Columns` of the fields ``runs``
            picks, in place of their dicts (for a loader whose per-sample stage is that pick).

    Raises:
        ShardFormatError: as :func:`aisio.core.format.tar.iter_tar`, or a suffix repeats in a
            sample.
        LoaderUnavailableError: the shard is zstd-compressed and ``zstandard`` is missing.
    """
    if runs is not None and (tag is None or tag[3] or ends or not fast):
        runs = None
    return _scan(ShardReader(stream, url, start_offset, bufsize), url, ends, fast, tag, runs)


Tag = tuple[str, int, int, "frozenset[int] | set[int]", "dict[str, Any]"]
"""What :func:`iter_samples` adds to each sample of a shard task (see its ``tag``)."""


def _scan(reader: ShardReader, url: str, ends: bool, fast: bool, tag: Tag | None,
          runs: RunPlan | None = None) -> Iterator[Any]:
    """Yields samples (or ``(sample, end)`` pairs) from ``reader`` (see :func:`iter_samples`),
    grouped as :func:`group_samples_with_end` groups (:func:`split_key`'s common case inlined)."""
    field, shard, ordinal, skip, extra = tag if tag is not None else ("", 0, 0, frozenset(), {})
    send = batches(reader, url, fast, runs).send
    times, clock = StageTimes(reader.timer), time.perf_counter
    busy, resumed, members, counted = 0.0, clock(), 0, 0  # stage times, as iter_tar keeps them
    sample: dict[str, Any] | None = None
    key: str | None = None
    end, closed = NO_OFFSET, False
    try:
        try:
            while (batch := send(key)) is not None:
                if type(batch) is tuple:  # a run of whole samples: the first ends this one
                    busy += clock() - resumed
                    ordinal, members = yield from _run(batch, sample, end, tag, ordinal, members)
                    sample, key, batch, resumed = None, None, [], clock()
                members += len(batch)
                for name, data, offset, member_end in batch:  # type: ignore[misc]
                    member_key, dot, suffix = name.partition(".")
                    if dot and member_key and name[0] != "_" and "/" not in suffix:
                        suffix = suffix.lower()
                    else:
                        parts = split_key(name)
                        if parts is None:
                            continue
                        member_key, suffix = parts
                    if member_key != key:
                        if sample is not None:
                            busy += clock() - resumed
                            if tag is None:  # _finished(..., last=False), inlined: per sample
                                yield (sample, end) if ends else sample
                            elif ordinal not in skip:  # a next sample began: not the last
                                sample[field] = (shard, ordinal, end, False)
                                sample.update(extra)
                                yield sample
                            ordinal += 1
                            resumed = clock()
                        sample = {"__key__": member_key, "__url__": url}
                        key = member_key
                    if suffix in sample:  # type: ignore[operator]
                        raise _duplicate(url, name, suffix, member_key, offset)
                    sample[suffix] = data  # type: ignore[index]
                    end = member_end
                if members - counted >= 256:
                    times.report(busy + clock() - resumed, members - counted)
                    busy, resumed, counted = 0.0, clock(), members
        except AISIOError as exc:  # as group_samples_with_end: the sample in progress
            yield from _at_fault(exc, sample, end, ends, tag, ordinal)
            raise
        busy += clock() - resumed
        yield from _finished(sample, end, ends, tag, ordinal, last=True)
    except GeneratorExit:  # closed unfinished: not counted (see StageTimes)
        closed = True
        raise
    finally:
        if not closed:
            times.report(busy, members - counted)


def _run(batch: tuple[Run, int], sample: dict[str, Any] | None, end: int, tag: Tag | None,
         ordinal: int, members: int) -> Generator[Any, None, tuple[int, int]]:
    """Yields the sample in progress, which a run's first sample ends, then the run's samples
    as one :class:`~aisio.core.format.tar.runs.Columns`; returns the next sample's ordinal and
    the members read so far."""
    run, base = batch
    _, shard, _, _, extra = tag  # type: ignore[misc]  # (runs come with a tag, skipping none)
    if sample is not None:
        yield from _finished(sample, end, False, tag, ordinal, last=False)
        ordinal += 1
    count = len(run.values)
    yield Columns(run.values, [(shard, ordinal + i, base + stop, False)
                               for i, stop in enumerate(run.ends)], extra)
    timing.add("decode", 0.0, count)
    return ordinal + count, members + run.members


def _at_fault(exc: AISIOError, sample: dict[str, Any] | None, end: int, ends: bool,
              tag: Tag | None, ordinal: int) -> Iterator[Any]:
    """Yields the sample in progress (as :func:`_finished`) when the fault ``exc`` names a
    file of another sample (this one is whole), and sets on ``exc`` the key of the sample it
    gives up (see :func:`group_samples_with_end`), unless an inner reader has."""
    if getattr(exc, "given_up", None) is not None:
        return
    at = getattr(exc, "member", None)
    parts = split_key(at) if at else None
    if sample is not None and parts is not None and parts[0] != sample["__key__"]:
        yield from _finished(sample, end, ends, tag, ordinal, last=False)
    given_up = _given_up(sample, parts)
    if given_up is not None:
        exc.given_up = given_up  # type: ignore[attr-defined]


def _finished(sample: dict[str, Any] | None, end: int, ends: bool, tag: Tag | None,
              ordinal: int, *, last: bool) -> Iterator[Any]:
    """Yields what :func:`_scan` yields for a finished sample: the sample, ``(sample, end)``,
    or (with a ``tag``) the sample with its position and extra fields; nothing when there is
    no sample or the tag skips its ordinal."""
    if sample is None:
        return
    if tag is None:
        yield (sample, end) if ends else sample
        return
    field, shard, _, skip, extra = tag
    if ordinal in skip:
        return
    sample[field] = (shard, ordinal, end, last)
    sample.update(extra)
    yield sample


__all__ = [
    "NO_OFFSET",
    "MemberLike",
    "group_samples",
    "group_samples_with_end",
    "iter_samples",
    "split_key",
]
