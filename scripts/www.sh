#!/usr/bin/env bash
# Serve the dashboard (www/) with Vite's dev server: COOP/COEP on every response (the page is
# cross-origin isolated) and a Zarr store served same-origin at /store (no CORS needed).
# Builds what is missing first: js/pkg (scripts/test-wasm.sh --build-only), the CLI and its
# demo store (~/.cache/insitubatch/demo), and www/node_modules (npm ci, pinned by the lock).
#   scripts/www.sh                        # the demo store; open the printed URL, "Demo store"
#   scripts/www.sh --store /data/x.zarr   # serve a local .zarr directory at /store instead
#   scripts/www.sh -- --port 8080         # anything after -- goes to vite
# Remote stores need no serving: type their https:// (or public s3://) URL into the page;
# their server must send CORS headers and, because the page is isolated, CORP or CORS.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/env.sh

# js/pkg with the dashboard's exports (explore.rs); rebuilt when missing, or older than the
# engine's sources (the describe parity test compares it with a CLI built from them).
ib_www_pkg() {
    local wasm=js/pkg/web/insitubatch_wasm_bg.wasm
    if ! grep -qs openExplorer js/pkg/web/insitubatch_wasm.js \
        || [ -n "$(find core/src core/Cargo.toml wasm/src wasm/Cargo.toml Cargo.lock -newer "$wasm" 2>/dev/null | head -1)" ]; then
        bash scripts/test-wasm.sh --build-only
    fi
}

# www/node_modules as pinned by www/package-lock.json; npm's cache lives under the cache dir.
ib_www_npm() {
    export npm_config_cache="$INSITUBATCH_CACHE/npm-cache"
    if ! cmp -s www/package-lock.json www/node_modules/.ib-lock 2>/dev/null; then
        (cd www && npm ci --no-audit --no-fund --loglevel=error)
        cp www/package-lock.json www/node_modules/.ib-lock
    fi
}

# The notebook widget's front end, which every wheel ships in insitubatch_rs/_widget/:
# www/src/widget.js bundled by esbuild (Vite's, from www/node_modules) with the one-thread web
# engine (js/pkg/web). Every wheel build calls this first (scripts/test-python.sh,
# scripts/release.sh, scripts/test-widget.sh), so what a wheel holds never depends on which
# scripts ran before it: a wheel built before the widget's test once lacked the widget, and
# the release check's second build, made after it, differed from the first.
ib_widget_assets() {
    local assets=python-bindings/python/insitubatch_rs/_widget
    ib_www_pkg
    ib_www_npm
    mkdir -p "$assets"
    www/node_modules/.bin/esbuild www/src/widget.js --bundle --format=esm --platform=browser --minify \
        --external:'node:*' --log-level=warning --outfile="$assets/widget.js"
    cp js/pkg/web/insitubatch_wasm_bg.wasm "$assets/"
    echo "widget assets: $(du -cb "$assets"/* | tail -1 | cut -f1) bytes ($(ls "$assets" | tr '\n' ' '))"
}

# The demo store, written once by the CLI (`$1`: the insitubatch binary). Prints its path.
ib_www_demo_store() {
    local store
    store="$INSITUBATCH_CACHE/demo/era5_demo.zarr"
    if [ ! -f "$store/.complete" ]; then
        "$1" demo --batch-size 64 >&2
    fi
    echo "$store"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    STORE=""
    while [ $# -gt 0 ]; do
        case "$1" in
            --store) STORE="$(realpath "$2")"; shift 2 ;;
            --) shift; break ;;
            *) echo "unknown argument $1 (use --store DIR, or -- VITE_ARGS)" >&2; exit 2 ;;
        esac
    done
    ib_prereqs
    ib_www_pkg
    ib_www_npm
    if [ -z "$STORE" ]; then
        cargo build --release -q -p insitubatch-native --bin insitubatch
        STORE="$(ib_www_demo_store "$CARGO_TARGET_DIR/release/insitubatch")"
    fi
    [ -d "$STORE" ] || { echo "no such store directory: $STORE" >&2; exit 1; }
    echo "serving $STORE at /store; open the URL below and press \"Demo store\" (or add ?demo)"
    cd www
    IB_STORE_DIR="$STORE" exec npx vite "$@"
fi
