# The two commands a new user needs (each sets up the venvs, packages and AIStore node itself):
#   make demo   - the main job: a real pipeline from a local AIStore into a training loop
#   make test   - lint, type checks, the docs site, unit and integration tests against a real
#                 local AIStore, with torchdata 0.9 (.venv), then what depends on torchdata's
#                 generation again with torchdata 0.11 (.venv-td011)
# and, to check an install quickly:
#   make check  - lint, type checks, the unit tests and one smoke test against a real local
#                 AIStore (tests/integration/test_smoke.py), in .venv
PY := .venv/bin/python
PY_TD011 := .venv-td011/bin/python
# make demo LOADER=dataloader2|stateful|nodes runs the demo on another loader (nodes: torchdata 0.11)
LOADER ?= dataloader
DEMO_PY := $(if $(filter nodes,$(LOADER)),$(PY_TD011),$(PY))

.PHONY: demo test check lint setup test-td09 test-td011 test-trainers test-long notebook docs mutate
setup:
	@scripts/bootstrap.sh

demo: setup
	$(DEMO_PY) examples/train_digits.py --loader $(LOADER)

notebook: setup
	.venv/bin/jupyter lab notebooks/explore.ipynb

lint: setup
	$(PY) -m ruff check aisio tests examples benchmarks docs
	$(PY) -m mypy

# The documentation site (mkdocs.yml, docs/): built into site/ with warnings as errors (broken
# links and anchors, docstrings mkdocstrings cannot read), then opened in headless Chromium
# (tests/docs, once: the test-* runs below leave it out; it needs none of the conftest fixtures,
# nor the torch they import).
docs: setup
	@scripts/bootstrap.sh --browser
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet
	AISIO_DOCS_SITE=site $(PY) -m pytest tests/docs -q --noconftest

# The quick check of an install: lint, the unit tests and one smoke test against a real local
# AIStore (make test is the full run).
check: lint
	$(PY) -m pytest -q -m "not long" tests/unit tests/integration/test_smoke.py

# make test runs every test once, and the tests that depend on torchdata's generation in both
# environments: the .venv pass runs all it collects and records the ones it ran; the .venv-td011
# pass leaves out those it recorded, unless marked torchdata (tests/environments.py).
# test-td09 and test-td011 alone each run everything their environment collects.
# --durations: the slowest tests, in every CI log (make test has a 12-minute budget)
RAN := .pytest_cache/aisio/ran-td09.txt
# Two pytest-xdist workers, each test file whole on one of them (its module fixtures, a cluster
# or an upload, made once): the suite waits on its AIStore and its subprocesses more than it
# computes, so two files at a time fit in this machine's 2 cores. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
XDIST := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

test-td09: setup
	$(PY) -m pytest $(XDIST) --durations=30 --ignore=tests/docs -m "not long" --record-ran=$(RAN)

test-td011: setup
	$(PY_TD011) -m pytest $(XDIST) --durations=30 --ignore=tests/docs -m "not long"

test: lint docs test-td09
	$(PY_TD011) -m pytest $(XDIST) --durations=30 --ignore=tests/docs -m "not long" --once-ran-in=$(RAN)

# Everything marked long (the trainer matrix and its random property run, the benchmark suite's
# smoke run, the node with ETL support, the exit-traceback checks), by hand.
test-long: setup
	$(PY) -m pytest -m long --durations=20

# The long profile, by hand: each trainer (Lightning, Fabric, accelerate, torchrun) killed and
# resumed on 1 and 2 processes, both orders, and the random property run (AISIO_TRAINER_TRIALS,
# default 8; AISIO_TRAINER_SEED replays a draw); make test runs one case per trainer.
test-trainers: setup
	$(PY) -m pytest tests/integration/trainers --durations=20

# Mutation testing, by hand, not in make test: mutmut (configured in pyproject.toml's
# [tool.mutmut]) alters the modules that decide which sample is delivered, skipped or counted,
# one change at a time, in a copy of the checkout (mutants/), and runs the unit tests that reach
# each change; a change no test notices survives. scripts/mutate.py runs only the mutants with no
# result kept in docs/mutation/results.json (keyed by each function's source: a changed function
# is run again) and writes theirs back, so each run continues the last; commit that file. A
# mutant that changes only a message's text is kept as such, not run. MUTATE_WORKERS (default
# 1) under nice (the machine is shared), at most MUTATE_BUDGET seconds a run. MUTANTS narrows
# it, e.g. MUTANTS='aisio.core.faults.policy.*'; MUTATE_AGAIN=1 runs those even if kept (a
# survivor, after its test). Then the tables: scripts/mutation_report.py; docs/mutation.md.
MUTATE_BUDGET ?= 3600
MUTATE_WORKERS ?= 1
MUTANTS ?=
MUTATE_AGAIN ?=
mutate: setup
	nice -n 19 $(PY) scripts/mutate.py --budget $(MUTATE_BUDGET) --workers $(MUTATE_WORKERS) $(if $(MUTATE_AGAIN),--again) $(MUTANTS)
	$(PY) scripts/mutation_report.py --page > docs/mutation/report.md
