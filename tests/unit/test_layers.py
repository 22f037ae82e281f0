"""aisio's parts import each other one way only, as ``aisio._layers.LAYERS`` says, and no two
modules import each other, not even inside a function (a cycle hidden that way is still one)."""

from __future__ import annotations

import ast
from pathlib import Path

from aisio._layers import LAYERS, may_import, part_of

PACKAGE = Path(__file__).resolve().parents[2] / "aisio"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports(module: str) -> set[str]:
    """Returns the aisio modules that ``module`` imports anywhere in it."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            for alias in node.names:  # `from aisio.core.store import client` names a module
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else base)
    return {name for name in found if name in MODULES and name != module}


GRAPH = {module: imports(module) for module in MODULES}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Returns the import cycles of ``graph`` (each as the path that closes it)."""
    found: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for dep in sorted(graph.get(module, ())):
            if state.get(dep) == 1:
                found.append([*path[path.index(dep):], dep])
            elif dep not in state:
                visit(dep, [*path, dep])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return found


def test_every_module_belongs_to_a_part_and_every_part_exists() -> None:
    assert {module for module in MODULES if part_of(module) is None} == set()
    # the core's modules sit in named parts, never loose in aisio.core itself
    assert [m for m in MODULES if part_of(m) == "aisio" and m.startswith("aisio.core.")] == []
    assert [m for m in MODULES if m.startswith("aisio.core.") and m.count(".") == 2
            and MODULES[m].name != "__init__.py"] == []
    parts = [part for layer in LAYERS for part in layer]
    assert sorted(p for p in parts if p not in MODULES) == []


def test_imports_go_down_the_layers_only() -> None:
    wrong = sorted(f"{a} -> {b}" for a, deps in GRAPH.items() for b in deps
                   if not may_import(a, b))
    assert wrong == []


def test_no_module_imports_one_that_imports_it_back() -> None:
    assert cycles(GRAPH) == []


def test_the_rule_sees_what_it_must(tmp_path: Path) -> None:
    """The checker itself: an upward import and a cycle are both found."""
    assert not may_import("aisio.core.format.tar", "aisio.core.store.client")
    assert not may_import("aisio.core.faults.errors", "aisio.core.system.timing")
    assert may_import("aisio.core.store.client", "aisio.core.format.tar")
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert "aisio.core.store.ais" in GRAPH["aisio.core.pipeline.fetch"]
