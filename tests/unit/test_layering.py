"""The core's modules import each other one way: no module imports one that imports it back,
not even inside a function (a cycle hidden that way is still a cycle)."""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "aisio" / "core"


def core_imports(core: Path) -> dict[str, set[str]]:
    """Returns, for each module of ``core``, the core modules it imports anywhere in it."""
    graph: dict[str, set[str]] = {}
    for path in core.glob("*.py"):
        deps = graph.setdefault(path.stem, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module.startswith("aisio.core."):
                    deps.add(node.module.split(".")[2])
                elif node.module == "aisio.core":
                    deps.update(alias.name for alias in node.names)
    return graph


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


def test_core_modules_import_each_other_one_way() -> None:
    graph = core_imports(CORE)
    assert {"epoch", "delivery", "fetch", "stages", "transport"} <= set(graph)
    assert cycles(graph) == []
