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
# Two lanes: the CPU-bound installs one after another, in the order the foreground needs
# them, and the downloads one after another. One CPU lane, not two: before the wasm phase the
# foreground leaves about 340 CPU-s idle, and wasm-bindgen (about 200 CPU-s) is the one
# install needed there; split with the 3.14t build (about 130 CPU-s, needed by the Python
# phase 15 minutes later), it got half of it and was ready 115 s after the wasm phase began
# waiting for it (a cold run of 274000f, 2026-12-06). Then the 3.14t build; cargo-fuzz and the
# fuzz targets (nightly + ASan: every dependency built once more), which the fuzzing beside
# test-python needs; mdbook last: the book starts with test-widget, and builds it itself if it
# comes first (the lock of scripts/tools.sh makes one of them wait and find it done).
#
# cargo-deny goes first: the static checks, the first phase, end with it (scripts/check.sh),
# so it must be ready within their minutes; cargo-cyclonedx last, as only the release phase,
# near the end, uses it.
(
    ib_tool cargo-deny && ready cargo-deny
    ib_tool wasm-bindgen && ready wasm-bindgen
    ib_venv py3.14t >/dev/null && ready "py314t and venv-py3.14t"
    ib_tool cargo-fuzz && ready cargo-fuzz
    bash scripts/fuzz.sh --build-only && ready "the fuzz targets"
    ib_tool mdbook && ready mdbook
    ib_tool cargo-cyclonedx && ready cargo-cyclonedx
) &
(
    ib_tool chromium && ready chromium
    ib_tool npm && ready "npm tools"
    # The environments of tools/python/ the phases use, the test venv first (the fixtures need it).
    ib_venv test >/dev/null && ready venv-test
    bash js/examples/edge-inference/setup.sh >/dev/null && ready "edge-inference's onnxruntime-web and venv-onnx"
    for env in reference tf ray py3.10 py3.12 py3.13 widget supply; do
        ib_venv "$env" >/dev/null && ready "venv-$env"
    done
) &
wait
echo "warm: done in $((SECONDS - start)) s"
