# shellcheck shell=bash
# Source me: the cache locations every script shares. Builds live outside the clone so a
# fresh clone (CI) reuses them.
export INSITUBATCH_CACHE="${INSITUBATCH_CACHE:-$HOME/.cache/insitubatch}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$INSITUBATCH_CACHE/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
mkdir -p "$INSITUBATCH_CACHE"

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
