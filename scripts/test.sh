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
#   scripts/test.sh                # every phase, in order (the README's command; CI runs this)
#   scripts/test.sh PHASE...       # only those phases, still in the order below
#   scripts/test.sh test-python -- ARGS   # one phase, ARGS to its script (scripts/test-python.sh:
#                                  # sessions such as py=3.12 fw=tf, pytest arguments)
#   scripts/test.sh --list         # the phases: name and what each runs
# This file holds the one list of phases and their order (PHASES below). The justfile's
# recipes of the same names (`just --list`) call `scripts/test.sh NAME`; `just test` is this
# script with no arguments. A phase run alone gets what it needs from the earlier ones set up
# (the fixtures, the loopback servers); what another phase builds it takes from the cache
# (release-check fails without test-python's wheels; docs skips the blocks whose builds are
# missing, saying so).
set -euo pipefail
cd "$(dirname "$0")/.."

# The phases, in the order a full run takes them: "NAME|TITLE". NAME is the argument (and the
# justfile recipe), run_NAME (with _ for -) below runs it, TITLE heads it and its row of the
# closing time table. Where a test needs the loopback servers, SERVER_PHASES says so.
PHASES=(
    "check|static checks: fmt, clippy (host and wasm32), rustdoc; the benchmark driver's unit test"
    "test-rust|unit, simulation and property tests"
    "examples|the Rust examples on the demo store (examples/: a tokio stream, a candle training loop)"
    "wasm32-core|core for wasm32 (no runtime in its dependency tree)"
    "fixtures|fixtures written by zarr-python"
    "test-e2e|end-to-end tests (loopback HTTP and S3 servers, the cloud-like store)"
    "test-wasm|wasm/JS: Node tests, cross-target parity, headless Chromium"
    "test-www|the dashboard (www/) in headless Chromium (Playwright)"
    "test-python|Python package (insitubatch_rs): pytest in every session, Python version × framework (scripts/test-python.sh --list)"
    "test-widget|the notebook widget in JupyterLab and marimo (Playwright)"
    "test-packages|packages as users install them, outside the repo (sdist, npm tarball in Node, tsc, Vite)"
    "release-check|release artifacts as a user receives them (manylinux_2_28 wheels, twine, npm and cargo publish --dry-run)"
    "docs|the book (docs/): build, link check, every code block (Rust, Python, JS, bash; in a full run, beside the phases from test-widget on)"
    "fuzz|fuzzing: every parser of untrusted bytes (scripts/fuzz.sh; in a full run, beside the phases from test-python on)"
)
# A full run starts these phases before their turn, beside the phases from the one named on,
# which leave CPU idle there: "NAME|FROM". Their turn waits for them and prints their output.
# fuzz: the pytest runs of test-python leave about half of the 2 cores idle; it runs in an idle
# session (IDLE_SESSION), so it takes only that. docs: the phases after test-python left
# 250 of their 700 CPU-s idle in a cold run (2026-12-06; pip and npm downloads, browsers
# starting, single-threaded steps); it shares the CPU with them as any phase does.
BESIDE=("fuzz|test-python" "docs|test-widget")
# The phases whose tests read the loopback servers (tests/servers/start_all.sh). They are
# started before the first of these that runs and stopped after the last.
SERVER_PHASES=" test-e2e test-wasm test-python "

# Arguments after `--` go to the one phase named before it, where that phase takes any.
ARG_PHASES=(test-python)
PHASE_ARGS=()
for i in $(seq 1 $#); do
    if [ "${!i}" = -- ]; then
        PHASE_ARGS=("${@:i+1}")
        set -- "${@:1:i-1}"
        if [ $# -ne 1 ] || [[ " ${ARG_PHASES[*]} " != *" $1 "* ]]; then
            echo "scripts/test.sh: arguments after -- go to one phase that takes them (${ARG_PHASES[*]}), named alone before it" >&2
            exit 2
        fi
        break
    fi
done
if [ "${1:-}" = "--list" ]; then
    for p in "${PHASES[@]}"; do printf '%-14s %s\n' "${p%%|*}" "${p#*|}"; done
    exit 0
fi
# Which phases to run: all, or the named ones (in PHASES' order, whatever order they came in).
SELECTED=()
for p in "${PHASES[@]}"; do
    name="${p%%|*}"
    if [ $# -eq 0 ] || [[ " $* " == *" $name "* ]]; then SELECTED+=("$p"); fi
done
for a in "$@"; do
    if [[ " $(printf '%s ' "${PHASES[@]%%|*}") " != *" $a "* ]]; then
        echo "scripts/test.sh: no phase '$a'; the phases are: ${PHASES[*]%%|*}" >&2
        exit 2
    fi
done
ALL=0
[ $# -eq 0 ] && ALL=1

source scripts/env.sh
ib_prereqs
source scripts/pyenv.sh
source tests/servers/start_all.sh
export INSITUBATCH_FIXTURES="${INSITUBATCH_FIXTURES:-$INSITUBATCH_CACHE/fixtures}"
# This run's test output, for the closing count: a file of its own, so a phase run beside a
# full one (another checkout, the same cache) cannot change the full run's count. Kept as
# last-test.log when the run ends.
LOG="$(mktemp "$INSITUBATCH_CACHE/test-log.XXXXXX")"

WARM_PID=""
declare -A BESIDE_PID=()  # NAME -> the pid (and session) of a phase started beside (BESIDE)
on_exit() {
    local pid
    for pid in $WARM_PID "${BESIDE_PID[@]}"; do kill -- "-$pid" 2>/dev/null || true; done
    ib_stop_servers
    mv -f "$LOG" "$INSITUBATCH_CACHE/last-test.log" 2>/dev/null || true
}
trap on_exit EXIT
# A full run: the Python phase's slow installs (free-threaded CPython, the framework venvs)
# and the pinned tools, warmed in the background at nice 19 while the builds run
# (scripts/warm.sh; nothing to do when warm). Its own session, so a run that stops early stops
# it too (its process group). Linux's autogroup scheduler gives each session an equal share of
# the CPU and applies nice only within a session, so a new session at nice 19 still took half
# of the 2 cores from the builds (the cold static checks took 811 s; 478-557 s since): its
# autogroup gets nice 19 too (sched(7); no such file without autogroup).
# Not for a few phases: it would start installs they do not need.
# "${IDLE_SESSION[@]}" CMD...: CMD in a session of its own at nice 19 whose autogroup is at
# nice 19 too, so it takes only the CPU the phases leave idle. Started with & as a simple
# command, its pid ($!) is its session's (setsid(1) does not fork then).
IDLE_SESSION=(setsid bash -c 'echo 19 >/proc/self/autogroup 2>/dev/null; exec nice -n 19 "$@"' _)
if [ "$ALL" = 1 ]; then
    "${IDLE_SESSION[@]}" bash scripts/warm.sh >"$INSITUBATCH_CACHE/warm.log" 2>&1 &
    WARM_PID=$!
fi

# Run a test command, keep its output for the final count.
t() { "$@" 2>&1 | tee -a "$LOG"; }

# The fixtures and the servers, each set up once however many phases want them.
FIXTURES_READY=0
need_fixtures() {
    [ "$FIXTURES_READY" = 1 ] && return 0
    ib_test_venv
    "$IB_PY" tests/fixtures/make_fixtures.py "$INSITUBATCH_FIXTURES"
    FIXTURES_READY=1
}
SERVERS_UP=0
# ib_start_servers and ib_stop_servers set and clear their own EXIT trap; this script's
# (which also stops warm.sh and keeps the log) is put back after each.
start_servers() {
    need_fixtures
    ib_start_servers "$INSITUBATCH_FIXTURES"
    trap on_exit EXIT
    SERVERS_UP=1
}
stop_servers() {
    ib_stop_servers
    trap on_exit EXIT
    SERVERS_UP=0
}

# The phases' bodies.
# bench/test_run.py, scripts/test_licenses.py and test_same_wheel.py: stdlib only, about a second each
# (bench/README.md; the release's license check, docs/security.md).
run_check() { bash scripts/check.sh; python3 -m unittest bench/test_run.py scripts/test_licenses.py scripts/test_same_wheel.py; }
run_test_rust() {
    t cargo test -p insitubatch-core -p insitubatch-native
    # core's criterion benches, each run once as a test: they keep compiling and running.
    t cargo test -q -p insitubatch-core --features testing --bench engine
}
run_examples() {
    t cargo run -q -p insitubatch-examples --example stream
    t cargo run -q -p insitubatch-examples --example train
}
# `cargo check`, not a build: test-wasm compiles core for wasm32 in both feature sets (its
# tests with the C codecs, the browser build without them), so a build here compiled every
# dependency once more, in a target dir no later phase reads.
run_wasm32_core() {
    cargo check -q -p insitubatch-core --target wasm32-unknown-unknown
    cargo check -q -p insitubatch-core --target wasm32-unknown-unknown --no-default-features
    bash scripts/check-core-deps.sh
}
run_fixtures() { need_fixtures; }
# Seeds its corpora from the fixtures when they are there (scripts/fuzz.sh). In a full run
# scripts/warm.sh builds the fuzz targets in the background, and the fuzzing itself starts with
# the Python phase (BESIDE); this phase, the last, waits for it and reports it. Run alone, it
# fuzzes here. Beside, it runs IB_FUZZ_SECONDS_BESIDE per target: 60 by default, where alone it
# runs 30, since on the idle CPU left to it a fuzzer executes fewer inputs per second than alone
# (the counts measured are in docs/reliability.md, fuzzing, "CI time").
run_fuzz() {
    if [ -n "${BESIDE_PID[fuzz]:-}" ]; then finish_beside fuzz; return; fi
    t bash scripts/fuzz.sh "${IB_FUZZ_SECONDS:-30}"
}
start_fuzz_beside() { start_beside fuzz "${IDLE_SESSION[@]}" bash scripts/fuzz.sh "${IB_FUZZ_SECONDS_BESIDE:-60}"; }
run_test_e2e() { t cargo test -p insitubatch-tests; }
run_test_wasm() { t bash scripts/test-wasm.sh; }
run_test_www() { t bash scripts/test-www.sh; }
run_test_python() { t bash scripts/test-python.sh "$@"; }
run_test_widget() { t bash scripts/test-widget.sh; }
run_test_packages() { t bash scripts/test-packages.sh; }
run_release_check() { t bash scripts/release.sh --check; }
run_docs() {
    if [ -n "${BESIDE_PID[docs]:-}" ]; then finish_beside docs; return; fi
    t bash scripts/test-docs.sh
}
start_docs_beside() { start_beside docs setsid bash scripts/test-docs.sh; }

# start_beside NAME CMD...: phase NAME's command CMD in the background, its output in
# $INSITUBATCH_CACHE/NAME.log. CMD starts a session of its own (setsid, IDLE_SESSION), which
# on_exit stops with all its processes if the run stops early.
start_beside() {
    local name="$1"
    shift
    "$@" >"$INSITUBATCH_CACHE/$name.log" 2>&1 &
    BESIDE_PID[$name]=$!
}
# finish_beside NAME: wait for it and put its output into the run's log; its exit status.
finish_beside() {
    local rc=0
    wait "${BESIDE_PID[$1]}" || rc=$?
    unset "BESIDE_PID[$1]"
    t cat "$INSITUBATCH_CACHE/$1.log"
    return "$rc"
}

# Each phase's wall time, listed at the end: where a run's minutes go.
TIMES=()
PHASE_NAME=""
PHASE_START=$SECONDS
phase() {
    [ -n "$PHASE_NAME" ] && TIMES+=("$(printf '%5d s  %s' $((SECONDS - PHASE_START)) "$PHASE_NAME")")
    PHASE_NAME="$1"
    PHASE_START=$SECONDS
    [ -n "$1" ] && echo "== $1"
    return 0
}

for i in "${!SELECTED[@]}"; do
    name="${SELECTED[$i]%%|*}"
    phase "${SELECTED[$i]#*|}"
    if [[ "$SERVER_PHASES" == *" $name "* ]] && [ "$SERVERS_UP" = 0 ]; then start_servers; fi
    if [ "$ALL" = 1 ]; then
        for b in "${BESIDE[@]}"; do
            [ "${b#*|}" = "$name" ] && "start_${b%%|*}_beside"
        done
    fi
    "run_${name//-/_}" "${PHASE_ARGS[@]}"
    # The servers go as soon as no later phase of this run needs them.
    if [ "$SERVERS_UP" = 1 ]; then
        later=0
        for q in "${SELECTED[@]:$((i + 1))}"; do
            [[ "$SERVER_PHASES" == *" ${q%%|*} "* ]] && later=1
        done
        [ "$later" = 1 ] || stop_servers
    fi
done

phase ""
if [ -n "$WARM_PID" ]; then
    wait "$WARM_PID" 2>/dev/null || true
    WARM_PID=""
    cat "$INSITUBATCH_CACHE/warm.log"
fi
echo "== phases (wall time; $((SECONDS / 60)) min in all)"
printf '%s\n' "${TIMES[@]}"

# One closing line over every runner above (a run of phases with no test runner, such as
# `scripts/test.sh check`, has none).
awk -v all="$ALL" '/^test result:/ { p += $4; f += $6; next }
     /^ℹ pass [0-9]+/ { p += $3 } /^ℹ fail [0-9]+/ { f += $3 }
     /^=* *[0-9]+ (passed|failed)/ { for (i = 2; i <= NF; i++) { if ($i ~ /^passed/) p += $(i - 1); if ($i ~ /^failed/) f += $(i - 1) } }
     END { if (all || p + f > 0) printf "%d passed, %d failed\n", p, f; exit (f > 0) }' "$LOG"
