"""A newcomer's first hour, round two (issue #19), without a cluster: the advice errors give,
the docs `help()` shows, the shuffle default, and mixed image sizes in a batch."""

from __future__ import annotations

import pydoc

import numpy as np
import pytest

import aisio
from aisio.core.faults.policy import SKIPPED
from aisio.core.format.decode import MissingFieldError
from aisio.core.pipeline.spec import PipelineSpec
from aisio.core.pipeline.stages import SampleStage
from tests.conftest import LOADERS


def test_missing_field_advice_names_fixes_that_work() -> None:
    sample = {"__key__": "k", "__url__": "ais://b/s.tar", "png": b"x"}
    with pytest.raises(MissingFieldError) as info:
        SampleStage(None, "jpg cls")(sample)
    message = str(info.value)
    assert "pass missing_ok=True" not in message  # no loader takes it
    assert "tuple_fields" in message and "on_error='skip'" in message
    # Both fixes it names work, as the loaders take them:
    assert SampleStage(None, "jpg;png", on_error="skip")(sample) == (b"x",)
    assert SampleStage(None, "jpg cls", on_error="skip")(sample) is SKIPPED
    spec = PipelineSpec.build(endpoint="http://h:1", tuple_fields="jpg;png cls",
                              on_error="skip")
    assert spec.stage() is not None


def test_the_loaders_shuffle_by_default() -> None:
    from aisio.core.pipeline.spec import DEFAULT_SHUFFLE_BUFFER

    assert PipelineSpec.build(endpoint="http://h:1").shuffle_buffer == DEFAULT_SHUFFLE_BUFFER > 0
    assert PipelineSpec.build(endpoint="http://h:1", shuffle_buffer=0).shuffle_buffer == 0


ENTRY_POINTS = ["webdataset_pipe", *(f.__name__ for f in LOADERS.values())]


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_help_shows_every_option_of_an_entry_point(name: str) -> None:
    text = pydoc.render_doc(getattr(aisio, name), renderer=pydoc.plaintext)
    for option in ("shards", "num_workers" if name != "webdataset_pipe" else "resampled",
                   "shuffle_buffer", "decode", "tuple_fields", "batch_size", "on_error",
                   "cache", "timings"):
        assert f"{option}:" in text, (name, option)
    assert "default 1000" in text and "0: shard order" in text  # the default and its cost
    assert "100 MB" in text


def test_images_of_different_sizes_raise_a_typed_error_naming_the_samples() -> None:
    import torch
    from torch.utils.data import default_collate

    from aisio.core.format.collate import BatchCollate, MixedShapesError

    batch = [(torch.zeros(3, 8, 8), 0), (torch.zeros(3, 8, 8), 1), (torch.zeros(3, 9, 8), 2)]
    names = ["sample #0 of ais://b/a.tar", "sample #1 of ais://b/a.tar", "sample #5 of ais://b/c.tar"]
    with pytest.raises(MixedShapesError) as info:
        BatchCollate(default_collate, lambda n: names[-n:])(batch)
    assert isinstance(info.value, aisio.DecodeError)
    message = str(info.value)
    assert "field 0" in message and "3x8x8 in 2" in message
    assert "3x9x8 in 1 (sample #5 of ais://b/c.tar)" in message
    assert BatchCollate(default_collate)(batch[:2])[1].tolist() == [0, 1]
    # Not a shape problem: torch's own error, untouched.
    with pytest.raises(TypeError):
        BatchCollate(default_collate)([object(), object()])
    assert np.array_equal(BatchCollate(default_collate)([np.zeros(2)])[0], np.zeros(2))


def _free_names(code: str) -> set[str]:
    """Returns the names a snippet reads but neither imports nor assigns."""
    import ast
    import builtins

    tree = ast.parse(code)
    bound = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.arg)):
            bound.add(node.name if isinstance(node, ast.FunctionDef) else node.arg)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return used - bound


def test_readme_python_snippets_import_what_they_use() -> None:
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[4] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    assert blocks
    # What a snippet may take from its reader's context: the training loop's own objects,
    # and `shards`, which the sections name in their text.
    context = {"aisio", "torch", "model", "shards"}
    for code in blocks:
        assert _free_names(code) <= context, (_free_names(code) - context, code[:80])
