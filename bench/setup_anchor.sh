#!/usr/bin/env bash
# Create (idempotently) the venv of the reference implementation: insitubatch 0.2.0, the Python
# project insitubatch-rs rebuilds, on Python 3.12 at
# ${INSITUBATCH_CACHE:-$HOME/.cache/insitubatch}/venv-anchor. Re-installs when
# bench/requirements-anchor.txt changes. Prints the venv's python path on success. (The file,
# venv and variable names keep "anchor": scripts/ and the Python parity tests use them.)
# Usage: IB_ANCHOR_PY=$(bench/setup_anchor.sh)   (run it, do not source it)
set -euo pipefail
_here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${INSITUBATCH_CACHE:-$HOME/.cache/insitubatch}"
venv="$cache/venv-anchor"
req="$_here/requirements-anchor.txt"
want="$(sha256sum "$req" | cut -d' ' -f1)"
# One installer at a time: scripts/warm.sh may be creating it in the background; a second
# caller waits here, then finds it current.
mkdir -p "$cache"
exec 9>"$cache/.lock-venv-anchor"
flock 9
have="$(cat "$venv/.req-hash" 2>/dev/null || true)"
if [ "$want" != "$have" ] || [ ! -x "$venv/bin/python" ]; then
    mkdir -p "$cache"
    rm -rf "$venv"
    PYENV_VERSION="${IB_ANCHOR_PYENV_VERSION:-3.12.1}" python -m venv "$venv"
    "$venv/bin/python" -m pip install -q -r "$req"
    "$venv/bin/python" -c "import insitubatch, zarr; print('insitubatch', insitubatch.__version__, 'zarr', zarr.__version__)" >&2
    echo "$want" >"$venv/.req-hash"
fi
IB_ANCHOR_PY="$venv/bin/python"
echo "$IB_ANCHOR_PY"
