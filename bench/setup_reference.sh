#!/usr/bin/env bash
# Create (idempotently) the venv of the reference implementation: insitubatch 0.2.0, the Python
# project insitubatch-rs rebuilds, on Python 3.12 at
# ${INSITUBATCH_CACHE:-$HOME/.cache/insitubatch}/venv-reference, made by uv from
# tools/python/reference.txt (scripts/pyenv.sh `ib_venv reference`, which brings it to that lock
# when the lock changes). Prints the venv's python path on success.
# Usage: IB_REFERENCE_PY=$(bench/setup_reference.sh)   (run it, do not source it)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/pyenv.sh
py="$(ib_venv reference)"
"$py" -c "import insitubatch, zarr; print('insitubatch', insitubatch.__version__, 'zarr', zarr.__version__)" >&2
echo "$py"
