#!/usr/bin/env bash
# Create (idempotently) the TensorFlow test venv: tensorflow-cpu on Python 3.12 at
# ${INSITUBATCH_CACHE:-$HOME/.cache/insitubatch}/venv-tf, from
# python-bindings/tests/requirements-tf.txt (re-created when that file or the Python changes;
# nothing is installed when it is current). Prints the venv's python path on success.
# TF gets a venv of its own because the anchor supports one framework per environment.
# Usage: IB_TF_PY=$(bash scripts/tf-venv.sh)   (run it, do not source it)
#   IB_TF_PYTHON=3.12   the pyenv (or PATH) Python minor version to build it on
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${INSITUBATCH_CACHE:-$HOME/.cache/insitubatch}"
venv="$cache/venv-tf"
req="$root/python-bindings/tests/requirements-tf.txt"
v="${IB_TF_PYTHON:-3.12}"
py="$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/python"$v" 2>/dev/null | sort -V | tail -n1)"
[ -n "$py" ] || py="$(PATH="$(echo "$PATH" | tr ':' '\n' | grep -v '/shims$' | paste -sd:)" command -v "python$v" || true)"
if [ -z "$py" ]; then
    echo "tf-venv: no Python $v found (pyenv or PATH); TensorFlow 2.21 needs 3.10-3.13 (IB_TF_PYTHON)" >&2
    exit 1
fi
want="$( { "$py" -VV; cat "$req"; } | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$venv/.ib-python-req" 2>/dev/null || true)" != "$want" ] || [ ! -x "$venv/bin/python" ]; then
    echo "tf-venv: creating $venv (tensorflow-cpu, about 1.6 GB installed)" >&2
    start=$SECONDS
    mkdir -p "$cache"
    rm -rf "$venv"
    "$py" -m venv "$venv"
    "$venv/bin/python" -m pip install -q -r "$req" >&2 || { rm -rf "$venv"; exit 1; }
    TF_CPP_MIN_LOG_LEVEL=2 "$venv/bin/python" -c 'import tensorflow as tf; print("tf-venv: tensorflow", tf.__version__)' >&2
    echo "tf-venv: installed in $((SECONDS - start)) s" >&2
    echo "$want" >"$venv/.ib-python-req"
fi
echo "$venv/bin/python"
