# The two commands a new user needs (each sets up the venvs, packages and AIStore node itself):
#   make demo   - the main job: a real pipeline from a local AIStore into a training loop
#   make test   - lint, type checks, unit and integration tests against a real local AIStore,
#                 with torchdata 0.9 (.venv), then what depends on it with torchdata 0.11 (.venv-td011)
PY := .venv/bin/python
PY_TD011 := .venv-td011/bin/python
# make demo LOADER=dataloader|stateful|nodes runs the demo on another loader (nodes: torchdata 0.11)
LOADER ?= dataloader2
DEMO_PY := $(if $(filter nodes,$(LOADER)),$(PY_TD011),$(PY))

.PHONY: demo test lint setup test-td09 test-td011 notebook
setup:
	@scripts/bootstrap.sh

demo: setup
	$(DEMO_PY) examples/train_digits.py --loader $(LOADER)

notebook: setup
	.venv/bin/jupyter lab notebooks/explore.ipynb

lint: setup
	$(PY) -m ruff check aisio tests examples benchmarks
	$(PY) -m mypy

# make test runs every test once, and the tests that depend on torchdata's generation in both
# environments: the .venv pass runs all it collects and records the ones it ran; the .venv-td011
# pass leaves out those it recorded, unless marked torchdata (tests/environments.py).
# test-td09 and test-td011 alone each run everything their environment collects.
# --durations: the slowest tests, in every CI log (make test has a 12-minute budget)
RAN := .pytest_cache/aisio/ran-td09.txt

test-td09: setup
	$(PY) -m pytest --durations=30 --record-ran=$(RAN)

test-td011: setup
	$(PY_TD011) -m pytest --durations=30

test: lint test-td09
	$(PY_TD011) -m pytest --durations=30 --once-ran-in=$(RAN)
