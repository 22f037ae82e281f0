"""What every ``aisio`` subcommand parses alike: whole numbers, and the endpoint to talk to."""

from __future__ import annotations

import argparse

from aisio.core.faults.errors import ConfigError
from aisio.core.store.config import AISConfig

NO_ENDPOINT = (
    "no AIStore endpoint: pass --endpoint http://host:port or set AIS_ENDPOINT; for a local "
    'cluster run: eval "$(aisio playground up)"'
)


def positive(text: str) -> int:
    """Returns ``text`` as a whole number of at least 1 (an ``argparse`` type)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def endpoint_config(args: argparse.Namespace) -> AISConfig:
    """Returns the client configuration for ``--endpoint`` (else ``AIS_ENDPOINT``); raises
    :class:`~aisio.ConfigError` naming both when there is neither."""
    config = AISConfig.from_env(endpoint=args.endpoint)
    if not config.endpoint:
        raise ConfigError(NO_ENDPOINT)
    return config
