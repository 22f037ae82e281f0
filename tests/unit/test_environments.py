"""make test's two passes (tests/environments.py): the second leaves out only what the first
ran and what does not depend on torchdata, and a test that picks its loader by environment is
marked so."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import ROOT
from tests.environments import depends_on_torchdata, read_record, select

ids = st.sets(st.sampled_from([f"t.py::test_{i}" for i in range(12)]))


@given(collected=ids, dependent=ids, ran=ids)
def test_the_second_pass_leaves_out_only_what_the_first_ran(
        collected: set[str], dependent: set[str], ran: set[str]) -> None:
    keep, drop = select(sorted(collected), dependent, ran)
    assert sorted(keep + drop) == sorted(collected)
    assert set(drop) <= ran - dependent  # never a test that ran nowhere, nor a dependent one
    assert set(keep) >= collected & dependent


def test_a_loader_of_torchdata_named_in_the_parameters_is_a_dependency() -> None:
    for param_id in ("data-dataloader2", "nodes-workers0", "dl2", "False-stateful",
                     "batchsize-8-batch_size=8-nodes loader", "webdataset_stateful_loader"):
        assert depends_on_torchdata(False, param_id), param_id
    for param_id in (None, "dataloader", "dataloader-fast", "pipe", "dataloader2x", "4-drop"):
        assert not depends_on_torchdata(False, param_id), param_id
    assert depends_on_torchdata(True, None)


#: names whose value differs by environment: a test that uses one runs another loader in each
BY_ENVIRONMENT = {"default_loader", "HAS_DATALOADER2", "HAS_NODES"}


def _marks(decorators: list[ast.expr]) -> set[str]:
    return {ast.unparse(d).split("(")[0].rsplit(".", 1)[-1] for d in decorators}


def test_tests_that_pick_their_loader_by_environment_are_marked() -> None:
    """A test whose body uses a name of BY_ENVIRONMENT runs DataLoader2 in one environment and
    another loader in the other: it must run in both (``@pytest.mark.torchdata``), unless it
    runs with DataLoader2 only (``needs_dataloader2``)."""
    unmarked = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        module_marks = set()
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
                value = node.value
                elements = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
                module_marks |= _marks(list(elements))
        for node in tree.body:
            if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test")):
                continue
            body = ast.Module(body=node.body, type_ignores=[])
            used = {n.id for n in ast.walk(body) if isinstance(n, ast.Name)} & BY_ENVIRONMENT
            marks = module_marks | _marks(node.decorator_list)
            if used and not marks & {"torchdata", "needs_dataloader2"}:
                unmarked.append(f"{path.relative_to(ROOT)}::{node.name} uses {sorted(used)}")
    assert unmarked == []


PASSES = '''
import pytest

def test_once(): pass

@pytest.mark.parametrize("kind", ["dataloader", "nodes"])
def test_by_loader(kind): pass

@pytest.mark.torchdata
def test_marked(): pass

@pytest.mark.skip(reason="not in the first environment")
def test_skipped_first(): pass
'''


def test_two_passes_run_every_test_and_the_dependent_ones_twice(tmp_path: Path) -> None:
    (tmp_path / "test_passes.py").write_text(textwrap.dedent(PASSES))
    record = tmp_path / "ran.txt"

    def run(*options: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "tests.environments", "-p",
             "no:cacheprovider", "-rA", "-q", "-c", "/dev/null", "--rootdir", str(tmp_path),
             *options, str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout

    first = run(f"--record-ran={record}")
    assert "4 depend" not in first and "2 depend on torchdata" in first, first
    versions, ran = read_record(record)
    assert versions.startswith("torch ")
    assert {r.split("::")[1] for r in ran} == {
        "test_once", "test_by_loader[dataloader]", "test_by_loader[nodes]", "test_marked"}
    second = run(f"--once-ran-in={record}")
    passed = {line.split("::")[1] for line in second.splitlines() if line.startswith("PASSED")}
    assert passed == {"test_by_loader[nodes]", "test_marked"}, second
    assert "1 skipped, 2 deselected" in second, second  # the skipped one is tried again
    assert "2 ran in the first pass" in second, second
    assert "1 run only here" in second, second
