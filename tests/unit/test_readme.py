"""The README's and the docs' Python snippets import what they use (a reader can paste them)."""

from __future__ import annotations

from tests.conftest import ROOT


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
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.arg)):
            bound.add(node.arg if isinstance(node, ast.arg) else node.name)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return used - bound


def test_readme_python_snippets_import_what_they_use() -> None:
    import re

    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    blocks = [code for page in pages
              for code in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)]
    assert blocks
    # What a snippet may take from its reader's context: the training loop's own objects,
    # and `shards`, which the sections name in their text.
    context = {"aisio", "torch", "model", "shards"}
    for code in blocks:
        assert _free_names(code) <= context, (_free_names(code) - context, code[:80])


def test_the_readme_decode_table_says_what_a_batch_is() -> None:
    import io
    import re

    import numpy as np
    from PIL import Image
    from torch.utils.data import default_collate

    from aisio.core.decode.decoders import Decoder

    rows = re.findall(r'^\| `"(\w+)"` \| `(\w+)` \| `\(([^)]*)\)` \|',
                      (ROOT / "README.md").read_text(), re.M)
    assert {spec for spec, _, _ in rows} >= {"torchrgb", "torchl"}
    png = io.BytesIO()
    Image.fromarray(np.zeros((5, 7, 3), np.uint8)).save(png, format="PNG")
    sizes = {"B": 2, "H": 5, "W": 7, "3": 3}
    for spec, dtype, shape in rows:
        images = [Decoder(spec)({"__key__": "k", "png": png.getvalue()})["png"]
                  for _ in range(2)]
        batch = default_collate(images)
        assert str(batch.dtype).endswith(dtype), spec
        assert tuple(batch.shape) == tuple(sizes[n.strip()] for n in shape.split(",")), spec


def test_every_snippet_runs_or_says_why_not() -> None:
    """#41 item 7: each Python snippet of the README and the docs is run against a real AIStore
    (tests/integration/test_snippets.py), or its note names the test that runs it, or why it
    cannot run here (tests/snippets.py)."""
    import re

    from tests.snippets import snippets

    found = snippets()
    assert len(found) >= 20
    for snippet in found:
        if snippet.note is None:
            continue
        runs_in = re.fullmatch(r"runs in (tests/\S+\.py)::(test_\w+)", snippet.note)
        if runs_in:
            source = (ROOT / runs_in[1]).read_text()
            assert f"def {runs_in[2]}(" in source, snippet.id
            continue
        why = re.fullmatch(r"not run: (.{30,})", snippet.note)
        assert why, (snippet.id, snippet.note)


ENTRY_POINTS = ("webdataset_dataloader", "webdataset_loader", "webdataset_stateful_loader",
                "webdataset_node_loader")


def test_one_loader_is_the_one_to_start_with_everywhere_a_newcomer_starts() -> None:
    """#41 item 2: the README, the quick start, the docs home and the loaders guide name one
    entry point to start with, webdataset_dataloader, before any other; the demo runs it."""
    import re

    for name in ("README.md", "docs/quickstart.md", "docs/index.md", "docs/guide/loaders.md"):
        text = (ROOT / name).read_text()
        assert re.search(r"Start with \**`(aisio\.)?webdataset_dataloader`", text), name
        first = re.search("|".join(rf"\b{e}\b" for e in ENTRY_POINTS), text)
        assert first is not None and first[0] == "webdataset_dataloader", name
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^LOADER \?= dataloader$", makefile, re.M)


def test_sample_keys_in_batches_are_documented_with_an_audit_recipe() -> None:
    """#41 item 4: `__key__` among tuple_fields (the README and the option's doc), and the
    audit recipe in the resume guide, which tests/integration/test_snippets.py runs."""
    from tests.snippets import snippets

    assert '__key__"' in (ROOT / "README.md").read_text()
    [recipe] = [s for s in snippets() if s.page == "docs/guide/resume.md" and "Counter" in s.code]
    assert recipe.note is None and "__key__" in recipe.code and "assert" in recipe.code
    from dataclasses import fields

    from aisio.core.pipeline.spec import PipelineOptions

    [option] = [f for f in fields(PipelineOptions) if f.name == "tuple_fields"]
    assert "__key__" in option.metadata["doc"]
