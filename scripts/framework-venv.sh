#!/usr/bin/env bash
# Create (idempotently) a framework's test venv on Python 3.12 at
# ${INSITUBATCH_CACHE:-$HOME/.cache/insitubatch}/venv-NAME, from
# python-bindings/tests/requirements-NAME.txt (re-created when that file or the Python
# changes; nothing is installed when it is current). Prints the venv's python path.
#   tf:  tensorflow-cpu. Its own venv because the anchor supports one framework per environment.
#   ray: ray[train] + torch. Its own venv: Ray's pins (pydantic, protobuf, ...) are not the test venv's.
# Usage: IB_TF_PY=$(bash scripts/framework-venv.sh tf)   (run it, do not source it)
#   IB_FRAMEWORK_PYTHON=3.12   the pyenv (or PATH) Python minor version to build it on
set -euo pipefail
name="${1:?usage: framework-venv.sh tf|ray}"
case "$name" in
    tf)  what="tensorflow-cpu, about 1.6 GB installed"; needs="TensorFlow 2.21 needs 3.10-3.13"
         check='import tensorflow as tf; print("tf-venv: tensorflow", tf.__version__)' ;;
    ray) what="ray[train] + torch, about 4.5 GB installed"; needs="ray 2.60 has wheels for 3.10-3.13"
         check='import ray, torch; print("ray-venv: ray", ray.__version__, "torch", torch.__version__)' ;;
    *)   echo "framework-venv: unknown framework '$name' (tf or ray)" >&2; exit 2 ;;
esac
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${INSITUBATCH_CACHE:-$HOME/.cache/insitubatch}"
venv="$cache/venv-$name"
req="$root/python-bindings/tests/requirements-$name.txt"
v="${IB_FRAMEWORK_PYTHON:-3.12}"
py="$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/python"$v" 2>/dev/null | sort -V | tail -n1)"
[ -n "$py" ] || py="$(PATH="$(echo "$PATH" | tr ':' '\n' | grep -v '/shims$' | paste -sd:)" command -v "python$v" || true)"
if [ -z "$py" ]; then
    echo "$name-venv: no Python $v found (pyenv or PATH); $needs (IB_FRAMEWORK_PYTHON)" >&2
    exit 1
fi
want="$( { "$py" -VV; cat "$req"; } | sha256sum | cut -d' ' -f1)"
# One installer per venv at a time: scripts/warm.sh may be creating it in the background; a
# second caller waits here, then finds it current.
mkdir -p "$cache"
exec 9>"$cache/.lock-venv-$name"
flock 9
if [ "$(cat "$venv/.ib-python-req" 2>/dev/null || true)" != "$want" ] || [ ! -x "$venv/bin/python" ]; then
    echo "$name-venv: creating $venv ($what)" >&2
    start=$SECONDS
    mkdir -p "$cache"
    rm -rf "$venv"
    "$py" -m venv "$venv"
    "$venv/bin/python" -m pip install -q -r "$req" >&2 || { rm -rf "$venv"; exit 1; }
    TF_CPP_MIN_LOG_LEVEL=2 "$venv/bin/python" -c "$check" >&2
    echo "$name-venv: installed in $((SECONDS - start)) s" >&2
    echo "$want" >"$venv/.ib-python-req"
fi
echo "$venv/bin/python"
