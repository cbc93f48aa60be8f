#!/usr/bin/env bash
# Warm the slow, idempotent installs in the background while the Rust and wasm phases run:
# scripts/test.sh starts this at nice 19. The CPU-bound ones (the pinned cargo tools of
# scripts/tools.sh, the free-threaded CPython build of scripts/py314t.sh) then take the CPU
# the foreground leaves idle (link steps, single-threaded LTO, test runs, downloads, browser
# waits), and the download-bound ones (chromium, the npm tools, the Python venvs of
# scripts/pyenv.sh) overlap the builds instead of following them. Each installer holds its own
# lock (flock), so a foreground call waits for the one here and finds its work done. A failure
# here costs nothing but time: the foreground call, finding the install missing, does it again
# and reports any error itself.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/pyenv.sh
source scripts/tools.sh
start=$SECONDS
ready() { echo "warm: $1 ready at $((SECONDS - start)) s"; }
# Three lanes: the cargo tools in the order the foreground needs them (wasm-bindgen for the
# wasm phase; cargo-fuzz for the fuzz build at the end of the next lane; mdbook for the book),
# the 3.14t build and then the fuzz targets, and the downloads one after another.
(
    ib_tool wasm-bindgen && ready wasm-bindgen
    ib_tool cargo-fuzz && ready cargo-fuzz
    ib_tool mdbook && ready mdbook
) &
# The fuzz targets (nightly + ASan: every dependency built once more) after 3.14t, which the
# Python phase needs sooner: the fuzz phase runs last (scripts/test.sh).
(
    ib_venv py3.14t >/dev/null && ready "py314t and venv-py3.14t"
    bash scripts/fuzz.sh --build-only && ready "the fuzz targets"
) &
(
    ib_tool chromium && ready chromium
    ib_tool npm && ready "npm tools"
    # The environments of tools/python/ the phases use, the test venv first (the fixtures need it).
    ib_venv test >/dev/null && ready venv-test
    bash js/examples/edge-inference/setup.sh >/dev/null && ready "edge-inference's onnxruntime-web and venv-onnx"
    for env in reference tf ray py3.10 py3.12 py3.13 widget; do
        ib_venv "$env" >/dev/null && ready "venv-$env"
    done
) &
wait
echo "warm: done in $((SECONDS - start)) s"
