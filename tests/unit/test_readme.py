"""The README's Python snippets import what they use (a reader can paste them)."""

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
        elif isinstance(node, (ast.FunctionDef, ast.arg)):
            bound.add(node.name if isinstance(node, ast.FunctionDef) else node.arg)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return used - bound


def test_readme_python_snippets_import_what_they_use() -> None:
    import re

    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    assert blocks
    # What a snippet may take from its reader's context: the training loop's own objects,
    # and `shards`, which the sections name in their text.
    context = {"aisio", "torch", "model", "shards"}
    for code in blocks:
        assert _free_names(code) <= context, (_free_names(code) - context, code[:80])
