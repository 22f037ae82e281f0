"""The aisio exception tree.

Every error aisio raises is an :class:`AISIOError`. Each carries a one-sentence message that names
the thing at fault (URL, object, shard, setting) and says what to do, plus structured fields
(``url``, ``status``, ...) for programs. All of them survive pickling, so an error raised inside a
worker process reaches the training process intact. Four families, by what the user does next::

    AISIOError
    ├── UsageError            the call is wrong: fix the code or the setting
    │   ├── InvalidURLError       a malformed name, template or URL
    │   ├── ConfigError           a missing or malformed setting (endpoint, TLS, retries, ...)
    │   ├── LoaderUnavailableError  the loader needs another torchdata generation
    │   └── StateMismatchError    a saved loader state is not for this loader
    ├── NotFoundError         what was named does not exist (skippable)
    │   ├── BucketNotFoundError
    │   ├── ObjectNotFoundError   (.missing lists every absent name of a template)
    │   └── ETLNotFoundError
    ├── DataError             the bytes are bad (skippable)
    │   ├── ShardFormatError      not a tar, truncated, corrupt header (.offset, .member)
    │   ├── DecodeError           a field could not be decoded
    │   ├── ObjectChangedError    the object changed while it was read
    │   ├── ETLTransformError     an ETL's transform raised on an object
    │   └── EmptyEpochError       every shard of an epoch was skipped: nothing was read
    ├── ClusterError          the cluster cannot serve now: never skipped, raised after retries
    │   ├── AISConnectionError    unreachable, or the connection broke and retries ran out
    │   ├── AISRequestError       refused for another reason (HTTP status in .status)
    │   │   └── AuthError             HTTP 401/403: a token is missing or rejected
    │   └── ETLUnavailableError   no ETL runtime: a build without ETL (HTTP 501), no Kubernetes
    │   (while the cluster changes, a request first waits up to AISConfig.cluster_wait,
    │    saying so once with a ClusterWaitWarning)
    ├── WorkerDiedError       a loader's worker process died unasked (OOM killer, SIGKILL)
    └── PlaygroundError       the local AIStore could not be built, started or stopped

``on_error="skip"`` or ``"warn"`` skips only :class:`NotFoundError` and :class:`DataError`
(:func:`is_skippable`): an outage or a rejected token must never look like an empty dataset.
"""

from __future__ import annotations

import re
from typing import Any


def _rebuild(cls: type[AISIOError], message: str, fields: dict[str, Any]) -> AISIOError:
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.__dict__.update(fields)
    err.message = message
    return err


class AISIOError(Exception):
    """Base class of every error raised by aisio.

    Attributes:
        message: the human-readable sentence.
        url: the URL (or ``ais://`` name) at fault, when there is one.
        status: the HTTP status the server answered, when there was one.
    """

    def __init__(self, message: str, *, url: str | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.url = url
        self.status = status

    def __reduce__(self) -> tuple[Any, ...]:
        fields = {k: v for k, v in self.__dict__.items() if k != "message"}
        return (_rebuild, (type(self), self.message, fields))

    def __str__(self) -> str:
        return self.message


class UsageError(AISIOError, ValueError):
    """The call is wrong: a malformed name, a bad setting, a loader that is not installed."""


class NotFoundError(AISIOError):
    """A bucket, object or ETL that was named does not exist. ``on_error="skip"`` skips it."""


class DataError(AISIOError):
    """An object's bytes are not what was expected. ``on_error="skip"`` skips it."""


class ClusterError(AISIOError):
    """The cluster cannot serve the request now. Raised after retries; never skipped."""


class ClusterWaitWarning(UserWarning):
    """aisio is waiting for the cluster to serve again (a node down, joining or leaving, a
    proxy election): said once per wait, with what it waits for and for how long at most
    (``AISConfig.cluster_wait``)."""


class ConfigError(UsageError):
    """A setting is missing or malformed (endpoint, TLS files, retry policy, ...)."""


class InvalidURLError(UsageError):
    """A source string is not a valid ``provider://bucket[/object]`` name or template."""


class BucketNotFoundError(NotFoundError):
    """The bucket does not exist on the cluster (HTTP 404, ``ErrBckNotFound``)."""


class ObjectNotFoundError(NotFoundError):
    """One or more objects do not exist (HTTP 404).

    Attributes:
        missing: the names that were not found (several when a template was checked).
    """

    def __init__(
        self,
        message: str,
        *,
        url: str | None = None,
        status: int | None = 404,
        missing: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message, url=url, status=status)
        self.missing = tuple(missing)


class ETLUnavailableError(ClusterError):
    """The cluster cannot run ETL at all (a build without ETL support: HTTP 501), and no local
    ETL of that name runs beside it."""


class ETLNotFoundError(NotFoundError):
    """The named ETL is not running on the cluster (HTTP 404 naming the ETL)."""


class AISRequestError(ClusterError):
    """The cluster refused a request for a reason not covered by a more specific error."""


class AISConnectionError(ClusterError):
    """The cluster could not be reached, or the connection broke and retries ran out.

    Attributes:
        offset: for an object stream that broke, the byte of the object where it stopped.
    """

    def __init__(self, message: str, *, url: str | None = None, status: int | None = None,
                 offset: int | None = None) -> None:
        super().__init__(message, url=url, status=status)
        self.offset = offset


class ETLTransformError(DataError):
    """An ETL's transform failed on an object (the ETL server answered HTTP 500).

    Attributes:
        etl: the ETL's name.
        reason: what the transform raised, as the server reported it.
    """

    def __init__(self, message: str, *, url: str | None = None, status: int | None = 500,
                 etl: str = "", reason: str = "") -> None:
        super().__init__(message, url=url, status=status)
        self.etl = etl
        self.reason = reason


class ObjectChangedError(DataError):
    """An object changed while it was being read, so resuming it would splice two versions."""


class ShardFormatError(DataError):
    """A shard is not a valid tar/WebDataset shard.

    Attributes:
        offset: byte offset in the shard where the problem was found.
        member: the tar member being read, when known.
    """

    def __init__(
        self,
        message: str,
        *,
        url: str | None = None,
        offset: int | None = None,
        member: str | None = None,
    ) -> None:
        super().__init__(message, url=url)
        self.offset = offset
        self.member = member


class DecodeError(DataError):
    """A sample field could not be decoded, or its decoder is refused (pickle without opt-in)."""


class StateMismatchError(UsageError):
    """A saved loader state does not fit this loader (another shard list, corrupt, or a loader
    that cannot resume)."""


class EmptyEpochError(DataError):
    """An epoch yielded no sample because every shard of it was skipped (``on_error="skip"``)."""


class LoaderUnavailableError(UsageError, ImportError):
    """The loader asked for needs a package version that is not installed (DataLoader2 needs
    torchdata < 0.10; torchdata.nodes needs torchdata >= 0.10)."""


class AuthError(AISRequestError):
    """The cluster refused the request for lack of a valid token (HTTP 401/403)."""


class PlaygroundError(AISIOError):
    """The local AIStore playground could not be built, started or stopped."""


class WorkerDiedError(AISIOError, RuntimeError):
    """A loader's worker process ended without being asked to (e.g. killed by the OOM killer).

    Attributes:
        worker: the worker's index.
        pid: its process id.
        exitcode: its exit code (negative: the number of the signal that killed it).
    """

    def __init__(self, message: str, *, worker: int = -1, pid: int | None = None,
                 exitcode: int | None = None, url: str | None = None) -> None:
        super().__init__(message, url=url)
        self.worker = worker
        self.pid = pid
        self.exitcode = exitcode


class WorkerTraceback(Exception):
    """Where an error raised in a worker process came from: the worker's traceback, as text.

    An aisio error from a worker reaches the training loop as itself (type, message, fields);
    this is its ``__cause__``, so that the worker's frames print after it.
    """

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


#: How a bad shard's error ends: what to do about it. Once ``on_error="skip"``/``"warn"`` has
#: skipped the shard, :func:`skipped_reason` leaves out the advice to skip it.
BAD_SHARD_HINT = "re-upload the shard or read it with on_error='skip'"


def skipped_reason(error: BaseException | str) -> str:
    """Returns the error's message as a skip warning or record shows it: without the advice
    to skip, which was taken.

    Example:
        >>> skipped_reason(ShardFormatError(f"s.tar is truncated; {BAD_SHARD_HINT}"))
        's.tar is truncated; re-upload the shard'
    """
    return _SKIP_ADVICE.sub("", str(error))


#: The advice to skip, in each of the forms messages give it (:func:`skipped_reason`).
_SKIP_ADVICE = re.compile(r",? or (?:read it|skip such \w+) with on_error='skip'")


def is_skippable(error: BaseException) -> bool:
    """Returns whether ``on_error="skip"``/``"warn"`` may skip ``error``: only a missing object
    (or bucket, or ETL) and bad data; usage and cluster errors always raise.

    Example:
        >>> is_skippable(ShardFormatError("bad")), is_skippable(AISConnectionError("down"))
        (True, False)
    """
    return isinstance(error, (NotFoundError, DataError))


# Users catch and read these as ``aisio.UsageError``, ...: tracebacks, reprs and pickles name
# them there (a pickle is resolved through ``aisio``, which imports this module at once).
for _cls in [v for v in list(globals().values()) if isinstance(v, type)
             and issubclass(v, (AISIOError, WorkerTraceback)) and v.__module__ == __name__]:
    _cls.__module__ = "aisio"
del _cls

__all__ = [
    "AISConnectionError",
    "AISIOError",
    "AISRequestError",
    "AuthError",
    "BucketNotFoundError",
    "ClusterError",
    "ClusterWaitWarning",
    "ConfigError",
    "DataError",
    "DecodeError",
    "ETLNotFoundError",
    "ETLTransformError",
    "EmptyEpochError",
    "ETLUnavailableError",
    "InvalidURLError",
    "LoaderUnavailableError",
    "NotFoundError",
    "ObjectChangedError",
    "ObjectNotFoundError",
    "PlaygroundError",
    "ShardFormatError",
    "StateMismatchError",
    "UsageError",
    "WorkerDiedError",
    "BAD_SHARD_HINT",
    "WorkerTraceback",
    "is_skippable",
    "skipped_reason",
]
