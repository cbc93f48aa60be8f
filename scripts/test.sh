#!/usr/bin/env bash
# First the static checks (scripts/check.sh: fmt, clippy, rustdoc; a failure stops the run).
# Then every test: Rust unit, simulation and property tests; the core built for wasm32 with its
# dependency guard; end-to-end tests over zarr-python fixtures on file://, a real HTTP
# server and an S3-compatible server (moto) on loopback; the wasm build in Node and headless
# Chromium with native/wasm parity; the Python package under pytest with real torch and JAX
# (and real TensorFlow in a venv of its own); the notebook widget in a real JupyterLab and
# marimo in headless Chromium; the packages installed outside the repo, and the release artifacts
# checked as users receive them (scripts/release.sh --check); the book in docs/
# built, link-checked, and every code block in it run (scripts/test-docs.sh); libFuzzer on
# every parser of untrusted bytes (scripts/fuzz.sh; IB_FUZZ_SECONDS per target).
# Installs what it needs first.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
ib_prereqs
LOG="$INSITUBATCH_CACHE/last-test.log"
: >"$LOG"

# The Python phase's slow installs (free-threaded CPython, the framework venvs), warmed in the
# background at nice 19 while the builds run (scripts/warm.sh; nothing to do when warm). Its
# own process group, so a run that stops early stops it too.
setsid nice -n 19 bash scripts/warm.sh >"$INSITUBATCH_CACHE/warm.log" 2>&1 &
WARM_PID=$!
trap 'kill -- "-$WARM_PID" 2>/dev/null || true' EXIT
# Run a test command, keep its output for the final count.
t() { "$@" 2>&1 | tee -a "$LOG"; }
# Each phase's wall time, listed at the end: where a run's minutes go.
PHASES=()
PHASE_NAME=""
PHASE_START=$SECONDS
phase() {
    [ -n "$PHASE_NAME" ] && PHASES+=("$(printf '%5d s  %s' $((SECONDS - PHASE_START)) "$PHASE_NAME")")
    PHASE_NAME="$1"
    PHASE_START=$SECONDS
    [ -n "$1" ] && echo "== $1"
    return 0
}

phase "static checks: fmt, clippy (host and wasm32), rustdoc"
bash scripts/check.sh

phase "unit, simulation and property tests"
t cargo test -p insitubatch-core -p insitubatch-native

phase "the Rust examples on the demo store (examples/: a tokio stream, a candle training loop)"
t cargo run -q -p insitubatch-examples --example stream
t cargo run -q -p insitubatch-examples --example train

phase "core for wasm32 (no runtime in its dependency tree)"
cargo build -q -p insitubatch-core --target wasm32-unknown-unknown
cargo build -q -p insitubatch-core --target wasm32-unknown-unknown --no-default-features
bash scripts/check-core-deps.sh

phase "fixtures written by zarr-python, and loopback servers"
source scripts/pyenv.sh
ib_test_venv
export INSITUBATCH_FIXTURES="$INSITUBATCH_CACHE/fixtures"
"$IB_PY" tests/fixtures/make_fixtures.py "$INSITUBATCH_FIXTURES"

phase "fuzzing: every parser of untrusted bytes, ${IB_FUZZ_SECONDS:-30} s per target (scripts/fuzz.sh)"
t bash scripts/fuzz.sh "${IB_FUZZ_SECONDS:-30}"
source tests/servers/start_all.sh
ib_start_servers "$INSITUBATCH_FIXTURES"

phase "end-to-end tests"
t cargo test -p insitubatch-tests

phase "wasm/JS: Node tests, cross-target parity, headless Chromium"
t bash scripts/test-wasm.sh
t bash scripts/test-www.sh   # the dashboard in headless Chromium (Playwright)

phase "Python package (insitubatch_rs): pytest, with real torch (store objects read the servers)"
t bash scripts/test-python.sh
t bash scripts/test-widget.sh   # the notebook widget in JupyterLab (Playwright)
ib_stop_servers

phase "packages as users install them, outside the repo (sdist, npm tarball in Node, tsc, Vite)"
t bash scripts/test-packages.sh
phase "release artifacts as a user receives them (manylinux_2_28 wheels, twine, npm and cargo publish --dry-run)"
t bash scripts/release.sh --check

phase "the book (docs/): build, link check, every code block (Rust, Python, JS, bash)"
t bash scripts/test-docs.sh

phase ""
wait "$WARM_PID" 2>/dev/null || true
cat "$INSITUBATCH_CACHE/warm.log"
echo "== phases (wall time; $((SECONDS / 60)) min in all)"
printf '%s\n' "${PHASES[@]}"

# One closing line over every runner above.
awk '/^test result:/ { p += $4; f += $6; next }
     /^ℹ pass [0-9]+/ { p += $3 } /^ℹ fail [0-9]+/ { f += $3 }
     /^=* *[0-9]+ (passed|failed)/ { for (i = 2; i <= NF; i++) { if ($i ~ /^passed/) p += $(i - 1); if ($i ~ /^failed/) f += $(i - 1) } }
     END { printf "%d passed, %d failed\n", p, f; exit (f > 0) }' "$LOG"
