"""Options that answer back: an option an entry point does not take is a ConfigError naming the
one to use (webdataset's and the AIStore DataPipes' spellings get their aisio names), on every
entry point; and drop_last keeps the positions of what it drops."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

import aisio
from aisio.core.faults.policy import SKIPPED
from aisio.core.pipeline.loader_options import LOADER_OPTIONS
from aisio.core.pipeline.spec import PipelineOptions, PipelineSpec, pipeline_options
from tests.conftest import HAS_DATALOADER2, LOADERS

SHARDS = "ais://b/s-{0..1}.tar"
ENDPOINT = "http://127.0.0.1:9"  # nothing is read: options are checked first
ENTRY_POINTS = {"webdataset_pipe": aisio.webdataset_pipe,
                **{f"{name} loader": make for name, make in LOADERS.items()}}


def _warn_and_continue() -> None: ...


_warn_and_continue.__name__ = "warn_and_continue"  # as webdataset names its handler


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize(("option", "value", "fix"), [
    ("handler", _warn_and_continue, 'on_error="warn"'),
    ("shardshuffle", True, "shuffle_shards=True"),
    ("shuffle", 1000, "shuffle_buffer=1000"),
    ("etl_name", "resize", "etl='resize'"),
    ("batchsize", 8, "batch_size=8"),
    ("shuffle_bufer", 10, "did you mean shuffle_buffer=?"),
    ("tuple_field", "jpg cls", "did you mean tuple_fields=?"),
])
def test_an_option_no_loader_knows_names_the_one_to_use(entry: str, option: str, value: Any,
                                                        fix: str) -> None:
    with pytest.raises(aisio.ConfigError, match=re.escape(fix)) as info:
        ENTRY_POINTS[entry](SHARDS, url=ENDPOINT, **{option: value})
    assert isinstance(info.value, aisio.UsageError)
    assert f"{option}=" in str(info.value)
    assert "PipelineSpec" not in str(info.value)


def test_the_pipe_sends_dataloader_options_to_the_loaders() -> None:
    with pytest.raises(aisio.ConfigError, match="pass it to a loader"):
        aisio.webdataset_pipe(SHARDS, url=ENDPOINT, pin_memory=True)


@pytest.mark.skipif(not HAS_DATALOADER2, reason="DataLoader2 needs torchdata < 0.10")
@pytest.mark.parametrize(("option", "value", "why"), [
    ("pin_memory", True, "does not pin memory"),
    ("timeout", 5, "no per-batch timeout"),
    ("in_order", False, "in turn"),
])
def test_dataloader2_refuses_what_it_cannot_do(option: str, value: Any, why: str) -> None:
    with pytest.raises(aisio.ConfigError, match=why):
        aisio.webdataset_loader(SHARDS, url=ENDPOINT, num_workers=2, **{option: value})


@pytest.mark.parametrize("kind", ["dataloader", "stateful"])
def test_worker_options_without_workers_are_refused(kind: str) -> None:
    with pytest.raises(aisio.ConfigError, match="num_workers"):
        LOADERS[kind](SHARDS, url=ENDPOINT, prefetch_factor=4)


def test_drop_last_needs_a_batch_size() -> None:
    with pytest.raises(aisio.ConfigError, match="batch_size"):
        aisio.webdataset_pipe(SHARDS, url=ENDPOINT, drop_last=True)


def test_drop_last_turns_the_short_batch_into_positions_only() -> None:
    from aisio.core.pipeline.epoch import drop_last

    triples = [(i, ("p", i), "v") for i in range(8)]
    triples[2] = (SKIPPED, ("p", 2), "v")
    out = list(drop_last(triples, 3))
    assert [p for _, p, _ in out] == [p for _, p, _ in triples]  # every position travels
    assert [v for v, _, _ in out] == [0, 1, SKIPPED, 3, 4, 5, 6, SKIPPED]  # 7 alone: dropped
    assert {version for _, _, version in out} == {"v"}


def test_a_pinned_delivery_pins_its_value_and_is_the_delivery_again() -> None:
    from aisio.core.transport.delivery import Delivery
    from aisio.loaders.torch import _pinnable

    class Tensorish:
        pinned = False

        def pin_memory(self) -> Tensorish:
            self.pinned = True
            return self

    delivery = Delivery([Tensorish(), Tensorish()], [(0, 0, 512, False), (0, 1, 1024, True)])
    out = _pinnable(delivery).pin_memory()  # what torch's pin-memory step calls
    assert out is delivery and all(value.pinned for value in out.value)
    assert _pinnable("a Failure or anything else") == "a Failure or anything else"


@pytest.mark.parametrize("kind", sorted(LOADERS))
@pytest.mark.parametrize(("options", "match"), [
    ({"order": "sorted", "batch_size": 8}, 'order="deterministic"'),
    ({"streams": 4, "batch_size": 8}, 'goes with order="deterministic"'),
    ({"order": "deterministic"}, "needs batch_size=G"),
    ({"order": "deterministic", "batch_size": 8, "streams": 3}, r"one of \[1, 2, 4, 8\]"),
    ({"order": "deterministic", "batch_size": 8, "drop_last": True}, "cannot honour drop_last"),
    ({"order": "deterministic", "batch_size": 8, "decode_threads": 2}, "decode_threads"),
])
def test_the_order_options_answer_back(kind: str, options: dict[str, Any], match: str) -> None:
    with pytest.raises(aisio.ConfigError, match=match):
        LOADERS[kind](SHARDS, url=ENDPOINT, **options)


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_the_deterministic_order_takes_the_global_batch(kind: str) -> None:
    loader = LOADERS[kind](SHARDS, url=ENDPOINT, order="deterministic", batch_size=12, seed=1)
    try:
        assert loader.order.setup.streams == 2  # the largest divisor of 12 up to 8 and the 2 shards
        assert loader.state_dict()["batch"] == 12
    finally:
        loader.shutdown()


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_the_default_streams_leave_no_stream_without_a_shard(kind: str) -> None:
    """5 shards, batch 16: K=8 left 3 streams empty and every batch had 10 samples; the
    default is now the largest divisor of 16 up to 8 and up to the 5 shards."""
    five = [f"ais://b/s-{i}.tar" for i in range(5)]
    loader = LOADERS[kind](five, url=ENDPOINT, order="deterministic", batch_size=16, seed=1)
    try:
        assert loader.order.setup.streams == 4
    finally:
        loader.shutdown()


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_more_streams_than_shards_warn_at_construction_with_the_fix(kind: str) -> None:
    five = [f"ais://b/s-{i}.tar" for i in range(5)]
    with pytest.warns(UserWarning, match=r"streams=8 over 5 shards: 3 of the 8 streams have no "
                                         r"shard, so every batch has at most 10 of the 16 "
                                         r"samples asked for; streams=1 gives batches of 16"):
        loader = LOADERS[kind](five, url=ENDPOINT, order="deterministic", batch_size=16,
                               streams=8, seed=1)
    loader.shutdown()


# -- the options, declared once (PipelineOptions) ---------------------------------------------

#: webdataset_pipe's keyword options and their defaults: the public API, pinned.
PIPE_OPTIONS = {
    "endpoint": None, "url": None, "config": None, "etl": None, "shuffle_shards": True,
    "shuffle_buffer": 1000, "decode": None, "decode_threads": 0, "tuple_fields": None,
    "batch_size": None, "collate": True, "drop_last": False, "on_error": "raise",
    "report": None, "resampled": False, "concurrency": 1, "cache": None, "store": None,
    "timings": False, "map": None,
}


def _keywords(fn: Any) -> dict[str, Any]:
    return {p.name: p.default for p in inspect.signature(fn).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY}


def test_the_pipes_keyword_options_and_defaults_are_pinned() -> None:
    assert _keywords(aisio.webdataset_pipe) == PIPE_OPTIONS
    assert _keywords(PipelineSpec.build) == {k: v for k, v in PIPE_OPTIONS.items()
                                             if k != "resampled"}
    assert pipeline_options() == tuple(_keywords(PipelineSpec.build))


def test_the_option_defaults_are_the_specs() -> None:
    """The spec keeps no defaults of its own: what an option left out becomes is its declared
    default, checked and resolved once (PipelineSpec.build)."""
    spec = PipelineSpec.build(endpoint=ENDPOINT)
    resolved = {"config", "etl", "report"}  # made into an AISConfig, an ETL, an ErrorReport
    kept = ({f.name for f in dataclasses.fields(PipelineSpec)} & set(pipeline_options())
            - resolved)
    assert len(kept) == 12
    for option in dataclasses.fields(PipelineOptions):
        if option.name in kept:
            assert getattr(spec, option.name) == option.default, option.name
    assert all(f.default is dataclasses.MISSING for f in dataclasses.fields(PipelineSpec))


@pytest.mark.parametrize("entry", ["webdataset_pipe", "webdataset_dataloader",
                                   "webdataset_stateful_loader", "webdataset_node_loader",
                                   "webdataset_loader"])
def test_every_entry_point_documents_every_option_from_its_declaration(entry: str) -> None:
    doc = getattr(aisio, entry).__doc__ or ""
    if "DataLoader2" in doc and "needs torchdata < 0.10" in doc.splitlines()[0]:
        pytest.skip("the stand-in for DataLoader2's loader (torchdata >= 0.10)")
    for option in dataclasses.fields(PipelineOptions):
        entries = re.findall(rf"^ {{8}}{option.name}: ", doc, flags=re.MULTILINE)
        assert len(entries) == 1, (entry, option.name)
        first_words = " ".join(option.metadata["doc"].split()[:6])
        assert first_words in " ".join(doc.split()), (entry, option.name)


# ------------------------------------------------------------- order="deterministic" refusals

ORDERED_SHARDS = [f"ais://b/s-{i}.tar" for i in range(8)]  # nothing is read: refused at the call


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_the_deterministic_order_refuses_resampled_on_every_loader(name: str) -> None:
    with pytest.raises(aisio.ConfigError, match=r"resampled="):
        LOADERS[name](ORDERED_SHARDS, url="http://127.0.0.1:9", order="deterministic",
                      batch_size=8, resampled=True)


@pytest.mark.skipif(not HAS_DATALOADER2, reason="DataLoader2 needs torchdata < 0.10")
@pytest.mark.parametrize("option", [{"post": lambda pipe: pipe}, {"samples_per_epoch": 16}])
def test_the_deterministic_order_refuses_dataloader2s_post_and_samples_per_epoch(
        option: dict[str, Any]) -> None:
    with pytest.raises(aisio.ConfigError, match=r"neither post= nor samples_per_epoch="):
        aisio.webdataset_loader(ORDERED_SHARDS, url="http://127.0.0.1:9", order="deterministic",
                                batch_size=8, **option)


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_a_loader_refuses_streams_its_ranks_cannot_share(name: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """R = 2 ranks (what torch.distributed would say), K = 3 streams: R does not divide K."""
    import aisio.runtime.setup

    make = LOADERS[name]
    make(ORDERED_SHARDS, url="http://127.0.0.1:9", order="deterministic", batch_size=6,
         streams=3).shutdown()  # one rank: fine
    monkeypatch.setattr(aisio.runtime.setup, "rank_and_world", lambda: (0, 2))
    with pytest.raises(aisio.ConfigError, match=r"2 ranks cannot share streams=3"):
        make(ORDERED_SHARDS, url="http://127.0.0.1:9", order="deterministic", batch_size=6,
             streams=3)


# -- the loader options, one table (aisio.core.pipeline.loader_options) ------------------------

def _kind(where: str) -> str:
    """Returns the LOADERS name of entry point ``where``."""
    return {"webdataset_loader": "dataloader2", "webdataset_dataloader": "dataloader",
            "webdataset_stateful_loader": "stateful", "webdataset_node_loader": "nodes"}[where]


_REFUSALS = [(where, name) for name, option in LOADER_OPTIONS.items() for where in option.refused]


@pytest.mark.parametrize(("where", "name"), _REFUSALS)
def test_each_loader_refuses_by_name_what_the_table_says_it_refuses(where: str,
                                                                  name: str) -> None:
    if _kind(where) not in LOADERS:
        pytest.skip(f"{where} needs another torchdata")
    why = LOADER_OPTIONS[name].refused[where]
    with pytest.raises(aisio.ConfigError, match=re.escape(f"cannot honour {name}=: {why}")):
        LOADERS[_kind(where)](SHARDS, url=ENDPOINT, num_workers=1, **{name: True})


@pytest.mark.parametrize("kind", sorted(LOADERS))
@pytest.mark.parametrize("order", ["fast", "deterministic"])
def test_every_loader_returns_the_one_public_loader_class_in_either_order(kind: str,
                                                                         order: str) -> None:
    loader = LOADERS[kind](SHARDS, url=ENDPOINT, order=order, batch_size=4, seed=1)
    try:
        assert type(loader) is aisio.ResumableLoader and "ResumableLoader" in aisio.__all__
        assert loader.state_dict()["epoch"] == 0
    finally:
        loader.shutdown()


def test_the_docs_table_of_loader_options_is_drawn_from_the_table() -> None:
    """The guide's table and each loader's docstring say what the one table says."""
    from aisio.core.pipeline.loader_options import FRONT_ENDS, loader_options_doc, options_table

    for where in FRONT_ENDS:
        doc = getattr(aisio, where).__doc__ or ""
        if "needs torchdata < 0.10" in doc.splitlines()[0]:
            continue  # the stand-in for DataLoader2's loader (torchdata >= 0.10)
        assert " ".join(loader_options_doc(where).split()) in " ".join(doc.split()), where

    table = options_table()
    assert len(table.splitlines()) == 2 + len(LOADER_OPTIONS)
    assert "| `timeout` | yes | yes | refused by name | refused by name |" in table
    guide = (Path(__file__).parents[3] / "docs" / "guide" / "loaders.md").read_text()
    assert "<!-- aisio:loader-options -->" in guide
