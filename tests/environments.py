"""Which tests run in which environment: every test at least once, and the tests that depend on
torchdata's generation in each environment.

``make test`` runs pytest twice. The first pass (``.venv``, torchdata 0.9) runs every test it
collects and, with ``--record-ran=FILE``, writes the node id of each test it ran (passed or
failed; not skipped). The second pass (``.venv-td011``, torchdata 0.11), with
``--once-ran-in=FILE``, deselects the tests FILE lists unless they depend on torchdata. So a
test is left out of the second pass only if the first pass ran it: none can be lost, whatever
its marks, its skips or the environments' differences (a test only the second environment can
run, e.g. on ``torchdata.nodes``, is in no record and runs there).

A test depends on torchdata (:func:`depends_on_torchdata`) when it is marked
``@pytest.mark.torchdata`` (also as a module's ``pytestmark``), or when its parameters name a
loader of torchdata's own (:data:`TORCHDATA_LOADERS`: DataLoader2, StatefulDataLoader,
torchdata.nodes). torch's own DataLoader is not one: both environments pin the same torch (the
record names it, and a second pass on another torch deselects nothing). A test whose body picks
its loader by environment (``default_loader``, ``HAS_DATALOADER2``) must carry the mark;
tests/unit/test_environments.py checks that it does.

Each pass prints what it selected, when it has collected and again at its end, e.g. (the
second pass) ``environments (torch 2.15.0, torchdata 0.11.0): 1006 collected; 128 depend on
torchdata (run in every environment); 855 ran in the first pass (deselected here); 74 run only
here``.
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Iterable
from pathlib import Path

import pytest

#: words in a test's parameters that name a loader of torchdata's own (the ids the suite uses:
#: ``dataloader2``/``dl2`` for DataLoader2, ``stateful`` for StatefulDataLoader, ``nodes`` for
#: torchdata.nodes); ``dataloader`` (torch's DataLoader) is not one
TORCHDATA_LOADERS = frozenset({"dataloader2", "dl2", "stateful", "nodes"})

_HEADER = "# aisio: tests that ran, with "
_OUTPUT = "aisio-environments"  # a worker's summary, in its xdist workeroutput


def depends_on_torchdata(marked: bool, param_id: str | None) -> bool:
    """Returns whether a test runs in every environment: it is marked ``torchdata``, or its
    parameter id (``test_x[<id>]``) names one of :data:`TORCHDATA_LOADERS` as a word."""
    words = set(re.findall(r"[a-z0-9]+", (param_id or "").lower()))
    return marked or bool(words & TORCHDATA_LOADERS)


def select(node_ids: Iterable[str], dependent: set[str], ran_before: set[str]
           ) -> tuple[list[str], list[str]]:
    """Returns (the tests to run in this pass, the tests to leave out): a test is left out only
    if the first pass ran it and it does not depend on torchdata."""
    keep: list[str] = []
    drop: list[str] = []
    for node_id in node_ids:
        (drop if node_id in ran_before and node_id not in dependent else keep).append(node_id)
    return keep, drop


def versions() -> str:
    """Returns the versions that decide what a test does here: torch's (same in both
    environments) and torchdata's (the difference between them)."""
    found = []
    for name in ("torch", "torchdata"):
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{name} none")
    return ", ".join(found)


def read_record(path: Path) -> tuple[str, set[str]]:
    """Returns (the versions a record was written with, the node ids it lists)."""
    lines = path.read_text().splitlines()
    header = lines[0][len(_HEADER):] if lines and lines[0].startswith(_HEADER) else ""
    return header, {line for line in lines[1:] if line and not line.startswith("#")}


# ---- the plugin (registered by the checkout's conftest.py) ----------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("aisio environments")
    group.addoption("--record-ran", metavar="FILE", type=Path, default=None,
                    help="write the node ids of the tests this pass ran to FILE")
    group.addoption("--once-ran-in", metavar="FILE", type=Path, default=None,
                    help="leave out the tests FILE lists that do not depend on torchdata")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "torchdata: depends on torchdata's generation: make test runs it in both "
                   "environments, the rest once (tests/environments.py)")
    config.pluginmanager.register(Passes(config), "aisio-environments")


class Passes:
    """Selects this pass's tests, and records the ones that ran (see the module's doc)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.record: Path | None = config.getoption("--record-ran")
        self.source: Path | None = config.getoption("--once-ran-in")
        self.ran: set[str] = set()
        self.summary = ""
        # Under pytest-xdist (make test's -n) each worker collects and selects alike, and the
        # controller, which sees every worker's reports, keeps the record.
        self.worker = hasattr(config, "workerinput")
        if self.record is not None and not self.worker:
            self.record.unlink(missing_ok=True)  # a pass that stops early leaves no stale one

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        dependent = set()
        for item in items:
            callspec = getattr(item, "callspec", None)
            marked = item.get_closest_marker("torchdata") is not None
            if depends_on_torchdata(marked, callspec.id if callspec is not None else None):
                dependent.add(item.nodeid)
                if not marked:
                    item.add_marker(pytest.mark.torchdata)
        self.summary = (f"environments ({versions()}): {len(items)} collected; "
                        f"{len(dependent)} depend on torchdata (run in every environment)")
        if self.source is None:
            return
        if not self.source.is_file():
            raise pytest.UsageError(
                f"--once-ran-in={self.source}: no such record; run the first pass with "
                f"--record-ran={self.source} first (make test does both)")
        written_with, ran_before = read_record(self.source)
        if written_with.partition(",")[0] != versions().partition(",")[0]:
            self.summary += (f"; the record is of another torch ({written_with}): every test "
                             "runs here again")
            ran_before = set()
        keep, drop = select([item.nodeid for item in items], dependent, ran_before)
        if drop:
            dropped = set(drop)
            config.hook.pytest_deselected(items=[i for i in items if i.nodeid in dropped])
            items[:] = [i for i in items if i.nodeid not in dropped]
        only_here = sum(1 for node_id in keep if node_id not in ran_before)
        self.summary += (f"; {len(drop)} ran in the first pass (deselected here); "
                         f"{only_here} run only here")

    def pytest_report_collectionfinish(self) -> str:
        return self.summary

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" and (not report.skipped or hasattr(report, "wasxfail")):
            self.ran.add(report.nodeid)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: object, error: object) -> None:
        """(xdist, on the controller) A worker's summary of its selection, to print."""
        self.summary = self.summary or getattr(node, "workeroutput", {}).get(_OUTPUT, "")

    def pytest_sessionfinish(self, exitstatus: int) -> None:
        if self.worker:
            self.config.workeroutput[_OUTPUT] = self.summary  # type: ignore[attr-defined]
            return
        if self.record is None or exitstatus == pytest.ExitCode.INTERRUPTED:
            return
        self.record.parent.mkdir(parents=True, exist_ok=True)
        self.record.write_text("\n".join([_HEADER + versions(), *sorted(self.ran)]) + "\n")

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.summary:
            terminalreporter.write_line(self.summary)
        if self.record is not None and self.record.is_file():
            terminalreporter.write_line(f"environments: the {len(self.ran)} tests that ran are "
                                        f"recorded in {self.record}")
