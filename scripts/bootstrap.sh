#!/usr/bin/env bash
# Sets up everything aisio's commands need in this checkout, from caches outside it:
#   - uv (pinned, from PyPI) in $AISIO_CACHE_DIR/tools/uv-<version>, and uv's cache in
#     $AISIO_CACHE_DIR/uv, which keeps every wheel (torch too) once for all venvs and checkouts;
#   - .venv (torchdata 0.9, requirements/td09.txt) and .venv-td011 (torchdata 0.11,
#     requirements/td011.txt), linked from that cache, with this checkout's aisio editable;
#     each is rebuilt only when its lock, pyproject.toml, the Python or the checkout moved;
#   - the AIStore node binary, built with `go install` into $AISIO_CACHE_DIR/aisnode/<version>.
# AISIO_CACHE_DIR defaults to ~/.cache/aisio. Safe to run again: a warm run takes seconds.
# `scripts/bootstrap.sh --lock [uv pip compile options]` recompiles both locks from
# requirements/*.in and pyproject.toml (pins already in the locks are kept unless upgraded).
# `scripts/bootstrap.sh --browser` installs Debian's Chromium where it is missing (the docs'
# browser test, tests/docs, opens the built site in it; `make docs` runs this first).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = --browser ]; then
  for name in chromium chromium-browser google-chrome; do
    command -v "$name" >/dev/null 2>&1 && exit 0
  done
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "aisio: installing Chromium with apt-get, for the docs' browser test" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      chromium fonts-dejavu-core >/dev/null
  else
    echo "aisio: Chromium is missing and apt-get cannot run here as root: install Debian's" \
      "chromium package to run the docs' browser test (tests/docs)" >&2
  fi
  exit 0
fi

CACHE="${AISIO_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/aisio}"
PYTHON="${PYTHON:-python3}"
UV_VERSION=0.13.9
export UV_CACHE_DIR="$CACHE/uv" UV_LINK_MODE=hardlink UV_PYTHON_DOWNLOADS=never UV_NO_PROGRESS=1

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
  echo "aisio needs Python >= 3.10 (found: $("$PYTHON" --version 2>&1)); set PYTHON=/path/to/python3.x" >&2
  exit 2
fi
PYTHON=$("$PYTHON" -c 'import sys; print(sys.executable)')

tool="$CACHE/tools/uv-$UV_VERSION"
if [ ! -x "$tool/bin/uv" ]; then
  echo "aisio: installing uv $UV_VERSION into $tool" >&2
  rm -rf "$tool.tmp.$$"
  "$PYTHON" -m venv "$tool.tmp.$$"
  "$tool.tmp.$$/bin/python" -m pip install -q "uv==$UV_VERSION"
  mv -T "$tool.tmp.$$" "$tool" 2>/dev/null || rm -rf "$tool.tmp.$$"  # bin/uv is a static binary
fi
uv="$tool/bin/uv"

if [ "${1:-}" = --lock ]; then
  shift
  for env in td09 td011; do
    UV_CUSTOM_COMPILE_COMMAND="scripts/bootstrap.sh --lock" "$uv" pip compile -q --python "$PYTHON" \
      --generate-hashes --all-extras pyproject.toml "requirements/$env.in" -o "requirements/$env.txt" "$@"
  done
  exit 0
fi

# venv dir, lock file: this checkout's venv of that lock, with aisio installed editable from here.
setup_venv() {
  local stamp
  stamp="$PWD $("$PYTHON" -c 'import sys; print(sys.version.split()[0])') $(cat "$2" pyproject.toml | sha256sum | cut -c1-16)"
  [ "$(cat "$1/.aisio-stamp" 2>/dev/null)" = "$stamp" ] && return
  echo "aisio: setting up $1 from $2" >&2
  rm -rf "$1"
  "$uv" venv -q --python "$PYTHON" "$1"
  # From the cache alone when it has every wheel (no index round trips), else from the index.
  "$uv" pip sync -q --python "$1/bin/python" --require-hashes --offline "$2" 2>/dev/null ||
    "$uv" pip sync -q --python "$1/bin/python" --require-hashes "$2"
  "$uv" pip install -q --python "$1/bin/python" --offline --no-deps --no-build-isolation -e .
  echo "$stamp" > "$1/.aisio-stamp"
}
setup_venv .venv requirements/td09.txt
setup_venv .venv-td011 requirements/td011.txt

# The AIStore node (skipped when the user points at an existing cluster).
if [ -z "${AIS_ENDPOINT:-}" ]; then
  .venv/bin/aisio playground build >/dev/null
fi
