#!/usr/bin/env bash
# Sets up everything aisio's commands need, reusing caches outside the clone:
#   - a virtual environment with the pinned packages of requirements/lock.txt, kept in
#     $AISIO_CACHE_DIR/venv/<python>-<lock hash>, which ./.venv (this checkout's own, tiny) uses;
#   - the wheels it was built from, in $AISIO_CACHE_DIR/wheels (downloaded once; this registry
#     marks its answers uncacheable, so pip's own cache keeps nothing);
#   - the AIStore node binary, built with `go install` into $AISIO_CACHE_DIR/aisnode/<version>.
# AISIO_CACHE_DIR defaults to ~/.cache/aisio. Safe to run again: a warm run takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${AISIO_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/aisio}"
PYTHON="${PYTHON:-python3}"
LOCK=requirements/lock.txt

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
  echo "aisio needs Python >= 3.10 (found: $("$PYTHON" --version 2>&1)); set PYTHON=/path/to/python3.x" >&2
  exit 2
fi
pyver=$("$PYTHON" -c 'import sys; print(f"py{sys.version_info[0]}{sys.version_info[1]}")')
key=$(sha256sum "$LOCK" | cut -c1-16)
venv="$CACHE/venv/$pyver-$key"
wheels="$CACHE/wheels"

if [ ! -f "$venv/.complete" ]; then
  echo "aisio: setting up $venv (first time only; torch is large)" >&2
  mkdir -p "$wheels"
  # Offline from the wheelhouse if it has everything, else fetch what is missing first.
  if ! "$PYTHON" -m pip download -q --no-index --find-links "$wheels" -d "$wheels" -r "$LOCK" >/dev/null 2>&1; then
    "$PYTHON" -m pip download -q -d "$wheels" -r "$LOCK"
  fi
  rm -rf "$venv"
  "$PYTHON" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --no-index --find-links "$wheels" -r "$LOCK"
  touch "$venv/.complete"
fi
# This checkout's own small venv: its packages come from the shared one through a .pth file, and
# aisio is installed editable from here, so checkouts never see each other's aisio.
shared_site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [ -L .venv ] || [ ! -x .venv/bin/python ] || [ "$(cat .venv/.aisio-shared 2>/dev/null)" != "$venv" ]; then
  rm -rf .venv
  "$PYTHON" -m venv --without-pip .venv
  site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$shared_site" > "$site/aisio-shared-venv.pth"
  echo "$venv" > .venv/.aisio-shared
fi
if [ ! -x .venv/bin/aisio ]; then
  .venv/bin/python -m pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null
  # The shared venv's tools (ruff, mypy, pytest, jupyter, ...) on this venv's bin too.
  for tool in "$venv"/bin/*; do
    name=$(basename "$tool")
    case "$name" in python*|pip*|activate*|Activate*) continue ;; esac
    [ -e ".venv/bin/$name" ] || ln -s "$tool" ".venv/bin/$name"
  done
fi

# The AIStore node (skipped when the user points at an existing cluster).
if [ -z "${AIS_ENDPOINT:-}" ]; then
  .venv/bin/aisio playground build >/dev/null
fi
