"""aisio's parts import each other one way only, as ``aisio._layers.LAYERS`` says, and no two
modules import each other, not even inside a function (a cycle hidden that way is still one)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
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


# ---- what importing a module does ------------------------------------------------------------
# Importing an aisio module defines its names and nothing else: it assigns into no other
# module (what is plugged in is passed in, through the set-up, aisio.runtime.setup), registers
# nothing with the interpreter or another package (that happens where a loader is built), and
# reads no environment variable (configuration is read when it is used). Class bodies, default
# arguments and decorators run at import too; function bodies do not.

#: Calls that register something process-wide, by the called name's last part (or its whole
#: dotted name), beside any whose name says ``register`` (``ForkingPickler.register``,
#: ``os.register_at_fork``, ``atexit.register``): refused at import anywhere in the package.
#: (torch's ``@functional_datapipe`` class decorator, how a DataPipe declares its functional
#: form, is not one: the DataPipes front end is imported on first use, see aisio._lazy.)
REGISTRATIONS = ("after_import", "set_start_method", "set_sharing_strategy", "copyreg.pickle",
                 "signal.signal", "sys.meta_path.insert", "sys.meta_path.append")

#: What importing a module may still do, and why (module, the statement as ``ast.unparse``
#: writes it).
ALLOWED = {
    # `IterableWrapper([...]).ais_list_files()` works after a bare `import aisio`: the
    # functional forms are registered with torch's DataPipes right after torch is imported
    # (aisio._lazy); nothing else runs before a DataPipe's functional form is looked up.
    ("aisio", "_register_datapipes_with_torch()"),
}


def _imported_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def _root(node: ast.expr) -> str | None:
    """Returns the name an attribute or item chain starts from (``a`` of ``a.b[c].d``)."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _at_import(body: list[ast.stmt]) -> Iterator[ast.AST]:
    """Yields the nodes of ``body`` that run when the module is imported."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from (sub for each in (*node.decorator_list, *node.args.defaults,
                                         *(d for d in node.args.kw_defaults if d is not None))
                        for sub in ast.walk(each))
        elif isinstance(node, ast.ClassDef):
            yield from (sub for each in (*node.decorator_list, *node.bases)
                        for sub in ast.walk(each))
            yield from _at_import(node.body)
        elif isinstance(node, (ast.If, ast.For, ast.While, ast.With, ast.Try)):
            heads = [getattr(node, "test", None), getattr(node, "iter", None),
                     *(item.context_expr for item in getattr(node, "items", []))]
            yield from (sub for head in heads if head is not None for sub in ast.walk(head))
            for block in ("body", "orelse", "finalbody"):
                yield from _at_import(getattr(node, block, []))
            for handler in getattr(node, "handlers", []):
                yield from _at_import(handler.body)
        else:
            yield from ast.walk(node)


def import_time_effects(module: str, source: str) -> list[str]:
    """Returns what importing ``source`` (module ``module``) does beyond defining its names:
    assignments into imported modules (or anything imported), ``setattr``/``delattr`` on them,
    registrations (:data:`REGISTRATIONS`, or any call whose name says ``register``), and reads
    of the environment; each as ``"module:line: statement"``, less :data:`ALLOWED`."""
    tree = ast.parse(source)
    imported = _imported_names(tree)
    found: list[tuple[int, str]] = []
    for node in _at_import(tree.body):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, (ast.Attribute, ast.Subscript)) and _root(t) in imported
                   for t in targets):
                found.append((node.lineno, ast.unparse(node).splitlines()[0]))
        elif isinstance(node, ast.Call):
            called = ast.unparse(node.func)
            last = called.rpartition(".")[2]
            if ((called in ("setattr", "delattr") and node.args
                 and _root(node.args[0]) in imported)
                    or last in REGISTRATIONS or called in REGISTRATIONS
                    or "register" in last.lower()):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Attribute) and ast.unparse(node) in ("os.environ",
                                                                        "os.getenv"):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Name) and node.id in ("environ", "getenv") \
                and node.id in imported:
            found.append((node.lineno, node.id))
    return [f"{module}:{line}: {text}" for line, text in sorted(set(found))
            if (module, text) not in ALLOWED]


def test_importing_a_module_plugs_in_registers_and_reads_nothing() -> None:
    effects = [effect for module, path in sorted(MODULES.items())
               for effect in import_time_effects(module, path.read_text())]
    assert effects == []


def test_the_import_rule_sees_what_it_must() -> None:
    """The checker itself: each kind of import-time coupling is found, at any depth of the
    module's own statements, and a function's body is left alone."""
    source = '''
import os
from multiprocessing.reduction import ForkingPickler
from aisio.core.epochs import received
received.gather_over_ranks = len
ForkingPickler.register(int, str)
os.register_at_fork(after_in_child=print)
LIMIT = int(os.environ.get("X", 1))
if True:
    setattr(received, "check", len)
class Plugged:
    received.hooks["x"] = 1
def at_use(size=os.getenv("Y")):
    received.gather_over_ranks = len
    ForkingPickler.register(int, str)
    return os.environ.get("X")
'''
    lines = [int(effect.split(":")[1]) for effect in import_time_effects("m", source)]
    assert lines == [5, 6, 7, 8, 10, 12, 13]
    assert import_time_effects("aisio", "_register_datapipes_with_torch()") == []
