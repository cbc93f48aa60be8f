#!/usr/bin/env bash
# Run a test command N times on a quiet machine and N times with every core saturated by a
# bounded background load, then print the tally. A test that depends on timing shows up
# here as a failure in one of the two columns.
#
#   scripts/stress-tests.sh                        # scripts/test.sh, 5 quiet + 5 loaded
#   scripts/stress-tests.sh -n 2 -- cargo test -p insitubatch-native --test disk_tier
#
# Options: -n N (runs per mode, default 5), --workers K (busy processes, default: every
# core), --quiet-only, --loaded-only. The load is stress-ng when it is installed, else one
# busy shell loop per worker; either way each worker is started under a hard time limit
# (--max-load-s, default 7200) and killed when this script exits, so a killed script
# cannot leave a core spinning. Each run's output is kept in $INSITUBATCH_CACHE/stress/.
# "Quiet" means no load from this script: the load average before each run is printed so
# a reader can see whether something else was running. The command runs in the caller's
# directory.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/env.sh"

runs=5
workers="$(nproc)"
max_load_s=7200
modes=(quiet loaded)
while [ $# -gt 0 ]; do
    case "$1" in
        -n) runs="${2:?-n needs a number}"; shift 2 ;;
        --workers) workers="${2:?--workers needs a number}"; shift 2 ;;
        --max-load-s) max_load_s="${2:?--max-load-s needs seconds}"; shift 2 ;;
        --quiet-only) modes=(quiet); shift ;;
        --loaded-only) modes=(loaded); shift ;;
        --) shift; break ;;
        -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) break ;;
    esac
done
if [ $# -eq 0 ]; then
    set -- "$ROOT/scripts/test.sh"
fi

LOGS="$INSITUBATCH_CACHE/stress"
mkdir -p "$LOGS"
load_pids=()

# Saturate the cores: `workers` CPU-bound processes, each with its own hard time limit.
start_load() {
    if command -v stress-ng >/dev/null; then
        stress-ng --cpu "$workers" --timeout "${max_load_s}s" --quiet &
        load_pids+=($!)
    else
        local i
        for ((i = 0; i < workers; i++)); do
            timeout "$max_load_s" bash -c 'while :; do :; done' &
            load_pids+=($!)
        done
    fi
}

stop_load() {
    local p
    for p in "${load_pids[@]}"; do
        kill "$p" 2>/dev/null || true
    done
    for p in "${load_pids[@]}"; do
        wait "$p" 2>/dev/null || true
    done
    load_pids=()
}
# The command runs in the background and is waited for, so a signal to this script is
# handled at once (bash defers traps while a foreground child runs): it ends the command
# and the load.
cmd_pid=
stop_all() {
    if [ -n "$cmd_pid" ]; then
        kill "$cmd_pid" 2>/dev/null || true
        wait "$cmd_pid" 2>/dev/null || true
    fi
    stop_load
}
trap stop_all EXIT
trap 'exit 130' INT TERM

declare -A passed failed
echo "command: $*"
# SigIgn is a hex mask with bit N-1 for signal N; SIGINT is 2.
if (( 0x$(awk '/^SigIgn:/ {print $2}' /proc/$$/status 2>/dev/null || echo 0) & 2 )); then
    echo "note: this script started with SIGINT ignored (a background job of a non-interactive"
    echo "      shell?); the command inherits that, and a test of Ctrl-C must not rely on it."
fi
for mode in "${modes[@]}"; do
    passed[$mode]=0
    failed[$mode]=0
    if [ "$mode" = loaded ]; then
        start_load
        echo "== loaded: $workers busy worker(s) ($(command -v stress-ng >/dev/null && echo stress-ng || echo shell loops))"
    else
        echo "== quiet"
    fi
    for ((i = 1; i <= runs; i++)); do
        log="$LOGS/$mode-$i.log"
        load="$(cut -d' ' -f1-3 /proc/loadavg)"
        start=$SECONDS
        # A background command starts with SIGINT and SIGQUIT ignored and stdin from
        # /dev/null; restore both, so it runs as it would in the foreground. (Bash cannot
        # undo an ignore this script inherited; see the note printed above the runs.)
        (trap - INT QUIT; exec "$@") <&0 >"$log" 2>&1 &
        cmd_pid=$!
        rc=0
        wait "$cmd_pid" || rc=$?
        cmd_pid=
        if [ "$rc" -eq 0 ]; then
            passed[$mode]=$((passed[$mode] + 1))
            verdict=pass
        else
            failed[$mode]=$((failed[$mode] + 1))
            verdict="FAIL (see $log)"
        fi
        echo "$mode $i/$runs: $verdict in $((SECONDS - start)) s (load average before: $load)"
    done
    if [ "$mode" = loaded ]; then
        stop_load
    fi
done

echo "== tally: $*"
total_failed=0
for mode in "${modes[@]}"; do
    echo "$mode: ${passed[$mode]}/$runs passed, ${failed[$mode]} failed"
    total_failed=$((total_failed + failed[$mode]))
done
[ "$total_failed" -eq 0 ]
