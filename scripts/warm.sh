#!/usr/bin/env bash
# Warm the Python phase's slow, idempotent installs in the background while the Rust and wasm
# phases run: scripts/test.sh starts this at nice 19 on a cold machine. The free-threaded
# CPython build (scripts/py314t.sh) then takes the CPU the foreground leaves idle (test runs,
# downloads, browser waits), and the framework venvs' downloads overlap the builds instead of
# following them. Each installer holds its own lock (flock), so a foreground call waits for
# the one here and finds its work done. A failure here costs nothing but time: the
# foreground call, finding the install missing, does it again and reports any error itself.
# Honours the same switches as scripts/test-python.sh (IB_PYTHON_FREE_THREADED=0, ...).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/pyenv.sh
start=$SECONDS
# Two lanes: the CPU-bound build, and the download-bound venvs one after another.
if [ "${IB_PYTHON_FREE_THREADED:-1}" != 0 ]; then
    (bash scripts/py314t.sh >/dev/null && echo "warm: py314t ready at $((SECONDS - start)) s") &
fi
(
    [ "${IB_PYTHON_TF:-1}" = 0 ] || { bash scripts/framework-venv.sh tf >/dev/null && echo "warm: venv-tf ready at $((SECONDS - start)) s"; }
    [ "${IB_ANCHOR:-1}" = 0 ] || { bash bench/setup_anchor.sh >/dev/null && echo "warm: venv-anchor ready at $((SECONDS - start)) s"; }
    [ "${IB_PYTHON_RAY:-1}" = 0 ] || { bash scripts/framework-venv.sh ray >/dev/null && echo "warm: venv-ray ready at $((SECONDS - start)) s"; }
) &
wait
echo "warm: done in $((SECONDS - start)) s"
