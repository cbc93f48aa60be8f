#!/usr/bin/env bash
# Create (idempotently) the Ray Train venv: ray[train] + torch on Python 3.12 at
# ${INSITUBATCH_CACHE:-$HOME/.cache/insitubatch}/venv-ray, from
# python-bindings/tests/requirements-ray.txt (re-created when that file or the Python changes;
# nothing is installed when it is current). Prints the venv's python path on success.
# Ray gets a venv of its own: its pins (pydantic, protobuf, ...) are not the test venv's.
# Usage: IB_RAY_PY=$(bash scripts/ray-venv.sh)   (run it, do not source it)
#   IB_RAY_PYTHON=3.12   the pyenv (or PATH) Python minor version to build it on
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${INSITUBATCH_CACHE:-$HOME/.cache/insitubatch}"
venv="$cache/venv-ray"
req="$root/python-bindings/tests/requirements-ray.txt"
v="${IB_RAY_PYTHON:-3.12}"
py="$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/python"$v" 2>/dev/null | sort -V | tail -n1)"
[ -n "$py" ] || py="$(PATH="$(echo "$PATH" | tr ':' '\n' | grep -v '/shims$' | paste -sd:)" command -v "python$v" || true)"
if [ -z "$py" ]; then
    echo "ray-venv: no Python $v found (pyenv or PATH); ray 2.60 has wheels for 3.10-3.13 (IB_RAY_PYTHON)" >&2
    exit 1
fi
want="$( { "$py" -VV; cat "$req"; } | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$venv/.ib-python-req" 2>/dev/null || true)" != "$want" ] || [ ! -x "$venv/bin/python" ]; then
    echo "ray-venv: creating $venv (ray[train] + torch, about 4.5 GB installed)" >&2
    start=$SECONDS
    mkdir -p "$cache"
    rm -rf "$venv"
    "$py" -m venv "$venv"
    "$venv/bin/python" -m pip install -q -r "$req" >&2 || { rm -rf "$venv"; exit 1; }
    "$venv/bin/python" -c 'import ray, torch; print("ray-venv: ray", ray.__version__, "torch", torch.__version__)' >&2
    echo "ray-venv: installed in $((SECONDS - start)) s" >&2
    echo "$want" >"$venv/.ib-python-req"
fi
echo "$venv/bin/python"
