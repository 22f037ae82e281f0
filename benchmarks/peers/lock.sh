#!/usr/bin/env bash
# Recompiles the peers' locks (benchmarks/peers/locks/<peer>.txt) from their .in files with the
# project's pinned uv (scripts/bootstrap.sh installs it). The project's own requirements/ locks
# are not touched. Pins already in a lock are kept unless upgraded (pass --upgrade).
set -euo pipefail
cd "$(dirname "$0")/locks"
CACHE="${AISIO_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/aisio}"
export UV_CACHE_DIR="$CACHE/uv" UV_CUSTOM_COMPILE_COMMAND="benchmarks/peers/lock.sh"
for lock in *.in; do
  "$CACHE/tools/uv-0.13.9/bin/uv" pip compile -q --python "${PYTHON:-python3}" --generate-hashes \
    "$lock" -o "${lock%.in}.txt" "$@"
done
