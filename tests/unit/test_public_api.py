"""The public API is what ``aisio.__all__`` names, and it is pinned here: moving the code
underneath (its parts are listed in ``aisio._layers``) must not move a user's import."""

from __future__ import annotations

import importlib
import inspect

import aisio

PUBLIC = [
    "AISConfig", "AISConnectionError", "AISFileLister", "AISFileLoader", "AISIOError",
    "AISRequestError", "AISSourceLister", "AuthError", "BucketNotFoundError", "ClusterError",
    "ClusterWaitWarning",
    "ConfigError", "DataError", "DecodeError", "Decoder", "ETL", "ETLNotFoundError",
    "ETLTransformError", "ETLUnavailableError", "EmptyEpochError", "ErrorReport",
    "InvalidURLError", "LoaderUnavailableError", "NotFoundError", "ObjectChangedError",
    "ObjectNotFoundError", "PlaygroundError", "ResampledShards", "ResumableLoader", "ShardCache",
    "ShardFormatError", "ShardSamples", "StateMismatchError", "ToTuple", "UsageError",
    "WebDatasetParser", "WorkerDiedError", "WorkerTraceback", "gather_state", "make_loader",
    "merge_states", "to_tuple", "webdataset_dataloader", "webdataset_loader",
    "webdataset_node_loader", "webdataset_pipe", "webdataset_stateful_loader",
]

# Namespaces reached as attributes of the package (imported on first use).
NAMESPACES = ["datapipes", "loaders", "localetl", "playground", "tools"]


def test_all_is_pinned() -> None:
    assert aisio.__all__ == PUBLIC


def test_every_public_name_resolves_and_says_where_it_lives() -> None:
    for name in PUBLIC:
        value = getattr(aisio, name)
        assert value.__module__.startswith("aisio."), name
        assert value.__doc__, name


def test_the_namespaces_resolve() -> None:
    for name in NAMESPACES:
        assert getattr(aisio, name) is importlib.import_module(f"aisio.{name}")


def test_all_is_sorted_and_complete() -> None:
    assert aisio.__all__ == sorted(aisio.__all__)
    public = {n for n, v in vars(aisio).items() if not n.startswith("_") and
              (inspect.isclass(v) or inspect.isfunction(v))}
    assert public <= set(aisio.__all__)
