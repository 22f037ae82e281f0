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
    "InvalidURLError", "LoaderUnavailableError", "MemoryStore", "NotFoundError",
    "ObjectChangedError", "ObjectNotFoundError", "ObjectStore", "PlaygroundError",
    "ResampledShards", "ResumableLoader", "ShardCache",
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
        assert value.__module__ == "aisio" or value.__module__.startswith("aisio."), name
        assert value.__doc__, name


def test_errors_are_named_where_users_catch_them() -> None:
    """A traceback, a repr and a pickle say ``aisio.UsageError``, the name users catch, not
    the module it is defined in (#41 item 5); a pickle still loads in a fresh process."""
    import pickle
    import subprocess
    import sys

    errors = [getattr(aisio, n) for n in PUBLIC if isinstance(getattr(aisio, n), type)
              and issubclass(getattr(aisio, n), (aisio.AISIOError, aisio.WorkerTraceback))]
    assert len(errors) == 24
    for cls in errors:
        assert cls.__module__ == "aisio" and getattr(aisio, cls.__qualname__) is cls, cls
    blob = pickle.dumps(aisio.ShardFormatError("bad", url="ais://b/s.tar", member="k.cls"))
    code = ("import pickle, sys; e = pickle.loads(sys.stdin.buffer.read()); "
            "print(type(e).__module__, type(e).__name__, e.member); raise e")
    done = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True,
                          timeout=60)
    assert done.stdout.decode().split() == ["aisio", "ShardFormatError", "k.cls"]
    assert done.stderr.decode().splitlines()[-1] == "aisio.ShardFormatError: bad"


def test_the_namespaces_resolve() -> None:
    for name in NAMESPACES:
        assert getattr(aisio, name) is importlib.import_module(f"aisio.{name}")


def test_all_is_sorted_and_complete() -> None:
    assert aisio.__all__ == sorted(aisio.__all__)
    public = {n for n, v in vars(aisio).items() if not n.startswith("_") and
              (inspect.isclass(v) or inspect.isfunction(v))}
    assert public <= set(aisio.__all__)
