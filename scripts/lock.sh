#!/usr/bin/env bash
# The locks of the Python environments: tools/python/NAME.txt, compiled by the pinned uv
# (`uv pip compile --generate-hashes`) from NAME.in, the shared .in files it includes (`-r`),
# and frameworks.in as constraints, for NAME's Python (its `# python: X.Y.Z` line) on x86_64
# manylinux_2_28; every version pinned with the hashes of all its files. scripts/pyenv.sh makes
# venv-NAME from NAME.txt and nothing else.
# A relock keeps the pins: uv takes the lock it replaces as its preferences, so a changed input
# moves only what that change needs (a new lock starts from the newest allowed versions).
# The first line of each lock is this script's stamp: the sha256 of the inputs it was compiled
# from (those files and the compile options) and of the lock's own body. --check recomputes both
# with no network and no uv, so an input edited without relocking, or a lock edited by hand,
# fails scripts/check.sh.
#   scripts/lock.sh [NAME...]                        relock (every environment, or those named)
#   scripts/lock.sh --upgrade-package PKG [NAME...]  relock, moving PKG to its newest allowed version
#   scripts/lock.sh --check [NAME...]                the stamps only: exit 1 naming each stale lock
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=tools/python
# What a lock is compiled with besides its files; part of the stamp, so changing it here makes
# every lock stale until relocked.
PLATFORM=x86_64-manylinux_2_28

# The environments: the .in files with a `# python:` line (the others are shared inputs).
envs() { grep -l '^# python: ' "$DIR"/*.in | sed "s|^$DIR/||; s|\.in\$||"; }
python_of() { sed -n 's/^# python: *//p' "$DIR/$1.in"; }
# The .in files environment NAME reads: its own, those it includes (`-r`, recursively) and the
# constraints; each once, in a stable order.
inputs_of() {
    local todo=("$1.in") seen=(frameworks.in) f
    while [ ${#todo[@]} -gt 0 ]; do
        f="${todo[0]}"
        todo=("${todo[@]:1}")
        [[ " ${seen[*]} " == *" $f "* ]] && continue
        [ -f "$DIR/$f" ] || { echo "lock: $DIR/$f (included from $1.in) does not exist" >&2; return 1; }
        seen+=("$f")
        mapfile -t -O "${#todo[@]}" todo < <(sed -n 's/^-r *//p' "$DIR/$f")
    done
    printf '%s\n' "${seen[@]}" | sort -u
}
# The compile options of NAME: its `# python:` version, the oldest patch release the lock is for
# (a package may need 3.11.5 or later); 3.14.5t resolves as 3.14.5, since no requirement marker
# tells the free-threaded build apart.
options_of() { local v; v="$(python_of "$1")"; echo "--python-version ${v%t} --python-platform $PLATFORM"; }
inputs_hash() {
    local f
    { options_of "$1"; for f in $(inputs_of "$1"); do echo "== $f"; cat "$DIR/$f"; done; } | sha256sum | cut -c1-64
}
# The lock's body: every line after the stamp.
stamp_of() { echo "# scripts/lock.sh: inputs $(inputs_hash "$1") body $(tail -n +2 "$DIR/$1.txt" | sha256sum | cut -c1-64)"; }

MODE=lock
UPGRADE=()
NAMES=()
while [ $# -gt 0 ]; do
    case "$1" in
        --check) MODE=check ;;
        --upgrade-package) UPGRADE+=(--upgrade-package "${2:?--upgrade-package needs a package name}"); shift ;;
        -*) echo "usage: scripts/lock.sh [--check | --upgrade-package PKG] [NAME...]" >&2; exit 2 ;;
        *) NAMES+=("$1") ;;
    esac
    shift
done
ALL="$(envs | tr '\n' ' ')"
[ ${#NAMES[@]} -gt 0 ] || read -ra NAMES <<<"$ALL"
for n in "${NAMES[@]}"; do
    [[ " $ALL" == *" $n "* ]] || { echo "lock: no environment '$n' ($DIR/$n.in with a '# python:' line); the environments: $ALL" >&2; exit 2; }
done

if [ "$MODE" = check ]; then
    stale=()
    for n in "${NAMES[@]}"; do
        if [ ! -f "$DIR/$n.txt" ]; then
            echo "lock: $DIR/$n.txt is missing"
            stale+=("$n")
        elif [ "$(head -n1 "$DIR/$n.txt")" != "$(stamp_of "$n")" ]; then
            echo "lock: $DIR/$n.txt is not what scripts/lock.sh compiles from $(inputs_of "$n" | tr '\n' ' ')(an input changed, or the lock was edited)"
            stale+=("$n")
        fi
    done
    [ ${#stale[@]} -eq 0 ] || { echo "lock: relock with: scripts/lock.sh ${stale[*]}"; exit 1; }
    echo "lock: ${#NAMES[@]} locks match their inputs"
    exit 0
fi

source scripts/env.sh
source scripts/pyenv.sh
for n in "${NAMES[@]}"; do
    out="$DIR/$n.txt"
    tmp="$(mktemp "${TMPDIR:-/tmp}/lock-$n.XXXXXX")"
    # uv reads the output file's pins as its preferences: start from the current lock.
    [ -f "$out" ] && cp "$out" "$tmp"
    # shellcheck disable=SC2046 # options_of is words
    ib_uv pip compile -q "$DIR/$n.in" -c "$DIR/frameworks.in" $(options_of "$n") \
        --generate-hashes --custom-compile-command "scripts/lock.sh $n" "${UPGRADE[@]}" -o "$tmp" \
        || { rm -f "$tmp"; exit 1; }
    { echo "# scripts/lock.sh: inputs $(inputs_hash "$n") body $(sha256sum <"$tmp" | cut -c1-64)"; cat "$tmp"; } >"$out"
    rm -f "$tmp"
    echo "lock: $out ($(grep -c '^[a-zA-Z0-9]' "$out") packages)"
done
