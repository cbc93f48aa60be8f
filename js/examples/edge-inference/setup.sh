#!/usr/bin/env bash
# The edge-inference example's pinned dependencies for the tests (js/test/edge-inference.test.js)
# and for run.mjs, each installed only when missing or at another pin, behind one lock (so
# scripts/warm.sh may run this in the background and a foreground caller then finds it done):
#   onnxruntime-web, pinned by package.json and package-lock.json here, installed by `npm ci`
#     into $INSITUBATCH_CACHE/tools/edge-npm-HASH (HASH: of those two files; a changed pin
#     installs beside the old one, as scripts/tools.sh `ib_tool npm` does);
#   model.py's Python side (requirements.txt here: onnxscript and onnx for torch.onnx.export,
#     onnxruntime for the reference), in $INSITUBATCH_CACHE/venv-onnx: a venv that sees the
#     test venv's packages (its torch, through a .pth file; scripts/pyenv.sh `ib_test_venv`, or
#     IB_TEST_VENV) and adds only these, re-created when requirements.txt, the test venv's
#     Python or its site-packages change.
# Prints the two paths for the caller to export (stdout; progress on stderr):
#   eval "$(bash js/examples/edge-inference/setup.sh)"
#   IB_ONNXRUNTIME_WEB=.../node_modules/onnxruntime-web   IB_ONNX_PY=.../venv-onnx/bin/python
# With IB_PYTHON_TORCH=0 (no torch in the test venv) there is nothing to export the model with:
# IB_ONNX_PY is left out, said on stderr, and the tests skip (under CI, fail) naming it.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
cd "$HERE/../../.."
source scripts/env.sh
source scripts/pyenv.sh

npm_prefix="$INSITUBATCH_CACHE/tools/edge-npm-$(cat "$HERE/package.json" "$HERE/package-lock.json" | sha256sum | cut -c1-16)"
venv="$INSITUBATCH_CACHE/venv-onnx"
exec 9>"$INSITUBATCH_CACHE/.lock-edge-inference"
flock 9

# The marker is written last: an install cut short is done again (npm ci starts from an empty
# node_modules).
if [ ! -f "$npm_prefix/.ib-installed" ]; then
    echo "edge-inference: installing onnxruntime-web (js/examples/edge-inference/package-lock.json) into $npm_prefix" >&2
    rm -rf "$npm_prefix"
    mkdir -p "$npm_prefix"
    cp "$HERE/package.json" "$HERE/package-lock.json" "$npm_prefix/"
    (cd "$npm_prefix" && npm_config_cache="$INSITUBATCH_CACHE/npm-cache" \
        npm ci --prefer-offline --no-audit --no-fund --loglevel=error >&2)
    touch "$npm_prefix/.ib-installed"
fi
echo "export IB_ONNXRUNTIME_WEB=$npm_prefix/node_modules/onnxruntime-web"

ib_test_venv
# torch: in the test venv itself, or (scripts/pyenv.sh without it) with the Python package's
# test requirements, as scripts/test-python.sh installs them.
if declare -F ib_test_python_reqs >/dev/null; then ib_test_python_reqs; fi
if ! "$IB_PY" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)'; then
    echo "edge-inference: the test venv ($IB_PY) has no torch (IB_PYTHON_TORCH=0?), which model.py exports the model with; IB_ONNX_PY is not set" >&2
    exit 0
fi
# The test venv's site-packages, where the overlay finds torch: a .pth line each, after the
# overlay's own (an IB_TEST_VENV overlay of scripts/overlay-venv.sh lists its shared venv's too).
shared_sites="$("$IB_PY" -c 'import site, sys; print("\n".join(p for p in sys.path if p.endswith("-packages")))')"
want="$( { "$IB_PY" -VV; echo "$shared_sites"; cat "$HERE/requirements.txt"; } | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$venv/.ib-python-req" 2>/dev/null || true)" != "$want" ] || [ ! -x "$venv/bin/python" ]; then
    echo "edge-inference: creating $venv (onnx, onnxscript, onnxruntime over the test venv's torch)" >&2
    rm -rf "$venv"
    # With a pip of its own (ensurepip's bundled wheel, offline): the test venv may have none.
    "$IB_PY" -m venv "$venv"
    site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    echo "$shared_sites" >"$site/ib-test-venv.pth"
    # --no-deps: what these need besides each other is the test venv's.
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --only-binary :all: \
        --require-hashes -r "$HERE/requirements.txt" >&2 || { rm -rf "$venv"; exit 1; }
    "$venv/bin/python" -c 'import torch, onnxscript, onnxruntime; print("edge-inference: torch", torch.__version__, "onnxscript", onnxscript.__version__, "onnxruntime", onnxruntime.__version__)' >&2 \
        || { rm -rf "$venv"; exit 1; }
    echo "$want" >"$venv/.ib-python-req"
fi
echo "export IB_ONNX_PY=$venv/bin/python"
