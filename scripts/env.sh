# shellcheck shell=bash
# Source me: the cache locations every script shares. Builds live outside the clone so a
# fresh clone (CI) reuses them.
export INSITUBATCH_CACHE="${INSITUBATCH_CACHE:-$HOME/.cache/insitubatch}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$INSITUBATCH_CACHE/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
mkdir -p "$INSITUBATCH_CACHE"
# The most one Node test file may take (Node 20 applies --test-timeout to each file's run): a
# hang fails, naming the file, instead of blocking the run. The slowest file takes a few
# minutes here; this is a bound on hangs, not on performance.
export IB_NODE_TEST_TIMEOUT_MS="${IB_NODE_TEST_TIMEOUT_MS:-1200000}"

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
    rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown
}

# The one nightly the threaded wasm build uses, pinned by its commit (rustc 1.97.0-nightly
# e50aa6fba 2026-05-19, ../shared/reference/toolchain.md). Prints the toolchain name: the
# machine's `nightly` when it is that commit, else the dated toolchain, installed if missing.
IB_NIGHTLY_COMMIT=e50aa6fba
IB_NIGHTLY_DATED=nightly-2026-05-20
ib_nightly() {
    if rustc +nightly -V 2>/dev/null | grep -q "$IB_NIGHTLY_COMMIT"; then
        echo nightly
        return
    fi
    if ! rustc "+$IB_NIGHTLY_DATED" -V >/dev/null 2>&1; then
        rustup toolchain install "$IB_NIGHTLY_DATED" --profile minimal --target wasm32-unknown-unknown >&2
    fi
    if ! rustc "+$IB_NIGHTLY_DATED" -V | grep -q "$IB_NIGHTLY_COMMIT"; then
        echo "ib_nightly: $IB_NIGHTLY_DATED is not commit $IB_NIGHTLY_COMMIT; update the pin in scripts/env.sh" >&2
        return 1
    fi
    echo "$IB_NIGHTLY_DATED"
}
