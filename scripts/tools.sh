# shellcheck shell=bash
# Source me (after scripts/env.sh): the pinned tools the test scripts install, each by one
# function that installs it only when it is missing or at another version. Each holds its own
# lock (flock), so scripts/warm.sh can install them in the background while the builds run,
# and a foreground caller waits for that install and then finds it done.
#   ib_tool cargo-fuzz | wasm-bindgen | mdbook | npm | chromium
# The cargo installs build in a temporary target dir of their own (`env -u CARGO_TARGET_DIR`):
# the shared one would make the workspace's builds wait on its lock.

IB_CARGO_FUZZ_VERSION=0.13.2
IB_CARGO_FUZZ_ROOT="$INSITUBATCH_CACHE/cargo-fuzz-$IB_CARGO_FUZZ_VERSION"
IB_WASM_BINDGEN_VERSION=0.2.130   # must equal the wasm-bindgen crate pinned in wasm/Cargo.toml
IB_MDBOOK_VERSION=0.5.4
IB_MDBOOK="$INSITUBATCH_CACHE/tools/bin/mdbook"
# playwright-core drives Debian's chromium for the browser tests; binaryen's wasm-opt (apt's
# 108 breaks the glue); typescript's compiler API checks index.d.ts (js/test/types.test.js).
IB_NPM_PREFIX="$INSITUBATCH_CACHE/npm"
IB_NPM_TOOLS=(playwright-core@1.65.1 binaryen@132.0.0 typescript@6.0.3)

ib_tool() {
    local name="$1" fn
    case "$name" in
        cargo-fuzz | wasm-bindgen | mdbook | npm | chromium) fn="_ib_tool_${name//-/_}" ;;
        *) echo "ib_tool: unknown tool '$name'" >&2; return 2 ;;
    esac
    mkdir -p "$INSITUBATCH_CACHE"
    ( flock 9 && "$fn" ) 9>"$INSITUBATCH_CACHE/.lock-tool-$name"
}

_ib_tool_cargo_fuzz() {
    [ -x "$IB_CARGO_FUZZ_ROOT/bin/cargo-fuzz" ] && return 0
    echo "installing cargo-fuzz $IB_CARGO_FUZZ_VERSION into $IB_CARGO_FUZZ_ROOT (about 2 min on 2 cores)" >&2
    env -u CARGO_TARGET_DIR cargo install -q cargo-fuzz --version "$IB_CARGO_FUZZ_VERSION" --locked \
        --root "$IB_CARGO_FUZZ_ROOT" >&2
}

_ib_tool_wasm_bindgen() {
    local have
    have="$(PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH" wasm-bindgen --version 2>/dev/null || true)"
    [ "$have" = "wasm-bindgen $IB_WASM_BINDGEN_VERSION" ] && return 0
    echo "installing wasm-bindgen-cli $IB_WASM_BINDGEN_VERSION (6-11 min on 2 cores; --locked fails for this version)" >&2
    env -u CARGO_TARGET_DIR cargo install -q wasm-bindgen-cli --version "$IB_WASM_BINDGEN_VERSION" >&2
}

_ib_tool_mdbook() {
    [ "$("$IB_MDBOOK" --version 2>/dev/null || true)" = "mdbook v$IB_MDBOOK_VERSION" ] && return 0
    echo "installing mdbook $IB_MDBOOK_VERSION into $(dirname "$(dirname "$IB_MDBOOK")") (a few minutes on 2 cores)" >&2
    env -u CARGO_TARGET_DIR cargo install -q mdbook --version "$IB_MDBOOK_VERSION" --locked \
        --no-default-features --features search --root "$(dirname "$(dirname "$IB_MDBOOK")")" >&2
}

_ib_tool_npm() {
    local p have missing=()
    for p in "${IB_NPM_TOOLS[@]}"; do
        have=$(node -p "require('$IB_NPM_PREFIX/node_modules/${p%@*}/package.json').version" 2>/dev/null || true)
        [ "$have" = "${p##*@}" ] || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "installing ${missing[*]} into $IB_NPM_PREFIX" >&2
    mkdir -p "$IB_NPM_PREFIX"
    [ -f "$IB_NPM_PREFIX/package.json" ] || echo '{ "private": true }' >"$IB_NPM_PREFIX/package.json"
    npm install -s --no-audit --no-fund --prefix "$IB_NPM_PREFIX" "${IB_NPM_TOOLS[@]}" >&2
}

# Debian's chromium and chromium-driver (playwright-core and wasm-bindgen-test drive them).
_ib_tool_chromium() {
    command -v chromium >/dev/null && command -v chromedriver >/dev/null && return 0
    echo "installing chromium and chromium-driver (Debian)" >&2
    local apt_get=(apt-get)
    [ "$(id -u)" = 0 ] || apt_get=(sudo apt-get)
    "${apt_get[@]}" update -qq >&2 \
        && DEBIAN_FRONTEND=noninteractive "${apt_get[@]}" install -y -qq chromium chromium-driver >/dev/null
}
