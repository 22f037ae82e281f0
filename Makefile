# The two commands a new user needs (each sets up the venv, packages and AIStore node itself):
#   make demo   - the main job: a real pipeline from a local AIStore into a training loop
#   make test   - lint, type checks, unit and integration tests against a real local AIStore
PY := .venv/bin/python
# This checkout's aisio, whichever checkout the shared venv's editable install points at.
export PYTHONPATH := $(CURDIR)

.PHONY: demo test lint setup
setup:
	@scripts/bootstrap.sh

demo: setup
	$(PY) examples/train_digits.py

lint: setup
	$(PY) -m ruff check aisio tests examples benchmarks
	$(PY) -m mypy

test: lint
	$(PY) -m pytest
