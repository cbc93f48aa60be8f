# shellcheck shell=bash
# Source me: the cache locations every script shares. Builds live outside the clone so a
# fresh clone (CI) reuses them.
# The repository root, for the files the functions below read (scripts source this file from
# the root, scripts/stress-tests.sh from anywhere).
IB_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export INSITUBATCH_CACHE="${INSITUBATCH_CACHE:-$HOME/.cache/insitubatch}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$INSITUBATCH_CACHE/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
mkdir -p "$INSITUBATCH_CACHE"
# The most one Node test file may take (Node 20 applies --test-timeout to each file's run): a
# hang fails, naming the file, instead of blocking the run. The slowest file takes a few
# minutes here; this is a bound on hangs, not on performance.
export IB_NODE_TEST_TIMEOUT_MS="${IB_NODE_TEST_TIMEOUT_MS:-1200000}"
# Node test files run two at a time (Node's default is one fewer than the cores: one here).
# Most of a file's time is a browser, a server or a worker waiting, so two overlap on 2 cores;
# each file starts its own servers (port 0) and browsers (a fresh profile each), and none
# writes outside its own temporary folder, so files share nothing but the read-only fixtures.
export IB_NODE_TEST_CONCURRENCY="${IB_NODE_TEST_CONCURRENCY:-2}"

# Whether CI is set (as in .ci/run): there a missing prerequisite fails instead of skipping.
# The same rule as tests/src/lib.rs `under_ci` and js/test-support/helpers.js `UNDER_CI`.
ib_under_ci() {
    local ci
    ci="$(printf '%s' "${CI:-}" | tr '[:upper:]' '[:lower:]' | tr -d '[:space:]')"
    [ -n "$ci" ] && [ "$ci" != 0 ] && [ "$ci" != false ]
}

# Install what the build needs, skipping what is already present.
ib_prereqs() {
    if ! command -v cargo >/dev/null; then
        echo "cargo is required (https://rustup.rs)" >&2
        return 1
    fi
    local missing=()
    command -v clang >/dev/null || missing+=(clang)     # zstd-sys for wasm32
    command -v llvm-ar >/dev/null || missing+=(llvm)
    python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
    if [ ${#missing[@]} -gt 0 ]; then
        if [ "$(id -u)" = 0 ]; then
            apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
        else
            sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
        fi
    fi
    # The stable of rust-toolchain.toml, installed here when missing rather than implicitly by
    # the first rustup call below (which would take rustup's default profile and components).
    local stable
    stable="$(_ib_toolchain_field "$IB_ROOT/rust-toolchain.toml" channel)"
    _ib_has_toolchain "$stable" || ib_install_toolchain "$IB_ROOT/rust-toolchain.toml"
    rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown
}

# _ib_toolchain_field FILE KEY: a key of a rust-toolchain.toml's [toolchain], as one word: a
# string without its quotes, a list in rustup's comma-separated form (["a", "b"] -> a,b).
# Enough for this repository's two files, which keep each key on one line.
_ib_toolchain_field() {
    sed -n "s/^$2 *= *//p" "$1" | tr -d '"[] '
}

# _ib_has_toolchain NAME: whether rustup has NAME installed (NAME as a toolchain file or `+`
# names it: 1.95.0, nightly, nightly-2026-05-20). Asks `rustup toolchain list`, which installs
# nothing, where `rustc +NAME -V` may install NAME when it is missing (rustup's auto-install).
_ib_has_toolchain() {
    local host
    host="$(RUSTUP_AUTO_INSTALL=0 rustup show 2>/dev/null | sed -n 's/^Default host: *//p' || true)"
    rustup toolchain list 2>/dev/null | awk '{ print $1 }' | grep -qxF "$1-$host"
}

# ib_install_toolchain FILE: install the toolchain a rust-toolchain.toml names, with its
# profile, components and targets.
ib_install_toolchain() {
    local f="$1" args=() v
    v="$(_ib_toolchain_field "$f" profile)" && [ -n "$v" ] && args+=(--profile "$v")
    v="$(_ib_toolchain_field "$f" components)" && [ -n "$v" ] && args+=(--component "$v")
    v="$(_ib_toolchain_field "$f" targets)" && [ -n "$v" ] && args+=(--target "$v")
    echo "installing Rust $(_ib_toolchain_field "$f" channel) (${f#"$IB_ROOT"/})" >&2
    # One rustup install at a time: scripts/warm.sh's fuzz build may want the nightly while a
    # phase installs it (a second install of the same toolchain then finds it there).
    mkdir -p "$INSITUBATCH_CACHE"
    ( flock 9 && rustup toolchain install "$(_ib_toolchain_field "$f" channel)" "${args[@]}" >&2 ) \
        9>"$INSITUBATCH_CACHE/.lock-rustup"
}

# The one nightly of the repository (the threaded wasm build, cargo-fuzz), pinned in
# tools/nightly/rust-toolchain.toml by its channel and its commit (the `ib-nightly-commit:`
# line). Prints the toolchain name to run `cargo +NAME` with: the machine's `nightly` when it
# is that commit (so a machine that has it installs nothing), else the dated channel,
# installed from that file if missing, and checked to be that commit.
ib_nightly() {
    local file="$IB_ROOT/tools/nightly/rust-toolchain.toml" commit dated
    dated="$(_ib_toolchain_field "$file" channel)"
    commit="$(sed -n 's/^# ib-nightly-commit: *\([0-9a-f]\{7,\}\).*/\1/p' "$file")"
    if [ -z "$dated" ] || [ -z "$commit" ]; then
        echo "ib_nightly: no channel or no '# ib-nightly-commit:' line in $file" >&2
        return 1
    fi
    if _ib_has_toolchain nightly && rustc +nightly -V 2>/dev/null | grep -q "($commit "; then
        echo nightly
        return
    fi
    _ib_has_toolchain "$dated" || ib_install_toolchain "$file"
    if ! rustc "+$dated" -V | grep -q "($commit "; then
        echo "ib_nightly: $dated is not commit $commit; update the pin in tools/nightly/rust-toolchain.toml" >&2
        return 1
    fi
    echo "$dated"
}
