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
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from aisio.core.errors import AISIOError, ShardFormatError
from aisio.core.tar import TarMember

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


def _duplicate(url: str, name: str, suffix: str, key: str, offset: int | None) -> ShardFormatError:
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
        members: tar members in archive order (from :func:`aisio.core.tar.iter_tar`).
        url: the shard's name, stored in ``__url__`` and used in error messages.

    Raises:
        ShardFormatError: a suffix repeats within a sample. Before an error (this one, or one
            from ``members``) every sample known to be whole is yielded (the one in progress
            is, when the error names a member of another sample); otherwise the error names in
            ``given_up`` the key of the sample in progress, not yielded: files of it may lie
            past the fault.
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
        if sample is not None and getattr(exc, "given_up", None) is None:
            at = getattr(exc, "member", None)
            parts = split_key(at) if at else None
            if parts is not None and parts[0] != sample["__key__"]:
                yield sample, end  # the fault is in another sample's file: this one is whole
            else:  # given up: more of its files may lie past the fault
                exc.given_up = sample["__key__"]  # type: ignore[attr-defined]
        raise
    if sample is not None:
        yield sample, end


def group_samples(members: Iterable[MemberLike], *, url: str) -> Iterator[dict[str, Any]]:
    """Yields the WebDataset samples made of ``members``, in order.

    See :func:`group_samples_with_end`, which this wraps.

    Args:
        members: tar members in archive order (from :func:`aisio.core.tar.iter_tar`).
        url: the shard's name, stored in ``__url__`` and used in error messages.

    Raises:
        ShardFormatError: a suffix repeats within a sample.
    """
    for sample, _ in group_samples_with_end(members, url=url):
        yield sample


__all__ = ["NO_OFFSET", "MemberLike", "group_samples", "group_samples_with_end", "split_key"]
