"""The aisio exception tree.

Every error aisio raises is an :class:`AISIOError`. Each carries a one-sentence message that names
the thing at fault (URL, object, shard, setting) and says what to do, plus structured fields
(``url``, ``status``, ...) for programs. All of them survive pickling, so an error raised inside a
DataLoader2 worker reaches the training process intact.
"""

from __future__ import annotations

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


class ConfigError(AISIOError, ValueError):
    """A setting is missing or malformed (endpoint, TLS files, retry policy, ...)."""


class InvalidURLError(AISIOError, ValueError):
    """A source string is not a valid ``provider://bucket[/object]`` name or template."""


class BucketNotFoundError(AISIOError):
    """The bucket does not exist on the cluster (HTTP 404, ``ErrBckNotFound``)."""


class ObjectNotFoundError(AISIOError):
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


class ETLUnavailableError(AISIOError):
    """The cluster cannot run ETL at all (a build without ETL support: HTTP 501)."""


class ETLNotFoundError(AISIOError):
    """The named ETL is not running on the cluster (HTTP 404 naming the ETL)."""


class AISRequestError(AISIOError):
    """The cluster refused a request for a reason not covered by a more specific error."""


class AISConnectionError(AISIOError):
    """The cluster could not be reached, or the connection broke and retries ran out."""


class ObjectChangedError(AISIOError):
    """An object changed while it was being read, so resuming it would splice two versions."""


class ShardFormatError(AISIOError):
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


class DecodeError(AISIOError):
    """A sample field could not be decoded, or its decoder is refused (pickle without opt-in)."""


class LoaderUnavailableError(AISIOError, ImportError):
    """The loader asked for needs a package version that is not installed (DataLoader2 needs
    torchdata < 0.10; torchdata.nodes needs torchdata >= 0.10)."""


class PlaygroundError(AISIOError):
    """The local AIStore playground could not be built, started or stopped."""


__all__ = [
    "AISConnectionError",
    "AISIOError",
    "AISRequestError",
    "BucketNotFoundError",
    "ConfigError",
    "DecodeError",
    "ETLNotFoundError",
    "ETLUnavailableError",
    "InvalidURLError",
    "LoaderUnavailableError",
    "ObjectChangedError",
    "ObjectNotFoundError",
    "PlaygroundError",
    "ShardFormatError",
]


class WorkerDiedError(AISIOError, RuntimeError):
    """A DataLoader2 worker process ended without being asked to (e.g. killed by the OOM killer).

    Attributes:
        worker: the worker's index.
        pid: its process id.
        exitcode: its exit code (negative: the number of the signal that killed it).
    """

    def __init__(self, message: str, *, worker: int, pid: int | None,
                 exitcode: int | None) -> None:
        super().__init__(message)
        self.worker = worker
        self.pid = pid
        self.exitcode = exitcode


__all__ += ["WorkerDiedError"]
