#!/usr/bin/env bash
# Warm the slow, idempotent installs in the background while the Rust and wasm phases run:
# scripts/test.sh starts this at nice 19. The CPU-bound ones (the pinned cargo tools of
# scripts/tools.sh, the free-threaded CPython build of scripts/py314t.sh) then take the CPU
# the foreground leaves idle (link steps, single-threaded LTO, test runs, downloads, browser
# waits), and the download-bound ones (chromium, the npm tools, the Python venvs) overlap the
# builds instead of following them. Each installer holds its own lock (flock), so a
# foreground call waits for the one here and finds its work done. A failure here costs
# nothing but time: the foreground call, finding the install missing, does it again and
# reports any error itself.
# Honours the same switches as scripts/test-python.sh (IB_PYTHON_FREE_THREADED=0, ...).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/pyenv.sh
source scripts/tools.sh
start=$SECONDS
ready() { echo "warm: $1 ready at $((SECONDS - start)) s"; }
# Three lanes: the cargo tools in the order the foreground needs them, the 3.14t build, and
# the downloads one after another.
(
    ib_tool cargo-fuzz && ready cargo-fuzz
    ib_tool wasm-bindgen && ready wasm-bindgen
    ib_tool mdbook && ready mdbook
) &
if [ "${IB_PYTHON_FREE_THREADED:-1}" != 0 ]; then
    (bash scripts/py314t.sh >/dev/null && ready py314t) &
fi
(
    ib_tool chromium && ready chromium
    ib_tool npm && ready "npm tools"
    ib_test_venv && ready venv-test && ib_test_python_reqs && ready "venv-test's torch and JAX"
    bash js/examples/edge-inference/setup.sh >/dev/null && ready "edge-inference's onnxruntime-web and venv-onnx"
    [ "${IB_PYTHON_TF:-1}" = 0 ] || { bash scripts/framework-venv.sh tf >/dev/null && ready venv-tf; }
    [ "${IB_ANCHOR:-1}" = 0 ] || { bash bench/setup_anchor.sh >/dev/null && ready venv-anchor; }
    [ "${IB_PYTHON_RAY:-1}" = 0 ] || { bash scripts/framework-venv.sh ray >/dev/null && ready venv-ray; }
) &
wait
echo "warm: done in $((SECONDS - start)) s"
