#!/usr/bin/env bash
# The edge-inference example's pinned dependencies for the tests (js/test/edge-inference.test.js)
# and for run.mjs, each installed only when missing or at another pin, behind one lock (so
# scripts/warm.sh may run this in the background and a foreground caller then finds it done):
#   onnxruntime-web, pinned by package.json and package-lock.json here, installed by `npm ci`
#     into $INSITUBATCH_CACHE/tools/edge-npm-HASH (HASH: of those two files; a changed pin
#     installs beside the old one, as scripts/tools.sh `ib_tool npm` does);
#   model.py's Python side (torch to export the model, onnxscript and onnx for torch.onnx.export,
#     onnxruntime for the reference): the venv `onnx`, made by uv from its lock
#     (tools/python/onnx.in and onnx.txt; scripts/pyenv.sh `ib_venv onnx`).
# Prints the two paths for the caller to export (stdout; progress on stderr):
#   eval "$(bash js/examples/edge-inference/setup.sh)"
#   IB_ONNXRUNTIME_WEB=.../node_modules/onnxruntime-web   IB_ONNX_PY=.../venv-onnx/bin/python
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
cd "$HERE/../../.."
source scripts/env.sh
source scripts/pyenv.sh

npm_prefix="$INSITUBATCH_CACHE/tools/edge-npm-$(cat "$HERE/package.json" "$HERE/package-lock.json" | sha256sum | cut -c1-16)"
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

onnx_py="$(ib_venv onnx)"
echo "export IB_ONNX_PY=$onnx_py"
