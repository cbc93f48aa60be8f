#!/usr/bin/env bash
# The wasm/JS package: build insitubatch-wasm for wasm32-unknown-unknown (release), run
# wasm-bindgen for Node (js/pkg/node) and browsers (js/pkg/web), then core's unit tests and
# simulations on wasm32 (wasm-bindgen-test-runner in Node), then the Node tests
# (node --test js/test/) over the zarr-python fixtures on the loopback HTTP server, with the
# cross-target parity check against native digests and index.d.ts checked against the
# engine's reports; then wasm-bindgen-test in Chromium and Node (core's storage conformance
# suite against FetchStorage). Installs its tools if missing (scripts/tools.sh). Idempotent.
#   scripts/test-wasm.sh               # build + test
#   scripts/test-wasm.sh --build-only  # build js/pkg only
# The wasm32 builds use target dirs of their own ($INSITUBATCH_CACHE/target-wasm and
# -wasm-threads; override IB_WASM_TARGET_DIR, IB_WASM_THREADS_TARGET_DIR; wasm-opt's cache:
# IB_WASM_OPT_CACHE); the host tests use
# scripts/test.sh's. Starts the servers itself unless INSITUBATCH_HTTP_URL (and
# INSITUBATCH_FIXTURES) are already set.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
START=$SECONDS   # each section header says when it began: where a CI log shows this phase's minutes go
BUILD_ONLY=0
[ "${1:-}" = "--build-only" ] && BUILD_ONLY=1
source scripts/env.sh
ib_prereqs
export PATH="$HOME/.cargo/bin:$PATH"
# Host-side tests (native digests) reuse the native target dir of scripts/test.sh, which is
# warm there; the wasm32 build has its own so it never waits on the native build's lock.
HOST_TARGET_DIR="$CARGO_TARGET_DIR"
export CARGO_TARGET_DIR="${IB_WASM_TARGET_DIR:-$INSITUBATCH_CACHE/target-wasm}"
source scripts/tools.sh

echo "== tools [at $((SECONDS - START)) s]"
# wasm-bindgen-cli (the glue and the test runner), the npm tools (playwright-core, binaryen's
# wasm-opt, typescript), and below Debian's chromium: pinned in scripts/tools.sh, which scripts/warm.sh
# has usually installed in the background by now.
ib_tool wasm-bindgen
ib_tool npm
wasm-bindgen --version
if ! node -e 'process.exit(+process.versions.node.split(".")[0] >= 18 ? 0 : 1)' 2>/dev/null; then
    echo "Node >= 18 is required (global fetch; node --test)" >&2
    exit 1
fi
echo "node $(node --version)"
export IB_PLAYWRIGHT_CORE="$IB_NPM_PREFIX/node_modules/playwright-core"
export IB_TYPESCRIPT="$IB_NPM_PREFIX/node_modules/typescript"
WASM_OPT="$IB_NPM_PREFIX/node_modules/.bin/wasm-opt"

# wasm-opt -Oz, for the browser packages only (what a page downloads; Node loads its module
# from disk, so it is left as wasm-bindgen wrote it). Cached by the input's hash, so an
# unchanged build is not re-optimized (about 40 s each, cold).
OPT_CACHE="${IB_WASM_OPT_CACHE:-$INSITUBATCH_CACHE/wasm-opt}"
mkdir -p "$OPT_CACHE"
FEATURES=(--enable-bulk-memory --enable-mutable-globals --enable-nontrapping-float-to-int
    --enable-sign-ext --enable-reference-types --enable-multivalue)
wasm_opt() {  # FILE [extra wasm-opt flags]: optimize FILE in place
    local f="$1"; shift
    local key; key=$(cat "$f" <(printf '%s ' "$@") | sha256sum | cut -c1-32)
    if [ ! -s "$OPT_CACHE/$key.wasm" ]; then
        nice -n 5 "$WASM_OPT" -Oz "${FEATURES[@]}" "$@" -o "$OPT_CACHE/$key.tmp" "$f"
        mv "$OPT_CACHE/$key.tmp" "$OPT_CACHE/$key.wasm"
    fi
    cp "$OPT_CACHE/$key.wasm" "$f"
    touch "$OPT_CACHE/$key.wasm"
}
echo "== build (wasm32-unknown-unknown, release, LTO): web and web-s3 + node, beside web-threads [at $((SECONDS - START)) s]"
# Release settings for these target dirs only (the workspace profile is shared): size first
# (opt-level s) for what browsers download.
export CARGO_PROFILE_RELEASE_OPT_LEVEL=s CARGO_PROFILE_RELEASE_LTO=true \
    CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 CARGO_PROFILE_RELEASE_DEBUG=false
# The threaded build (nightly + build-std + atomics, wasm-bindgen-rayon → js/pkg/web-threads)
# runs in the background, in its own target dir, beside the web builds: each build ends in a
# single-threaded LTO step, so on 2 cores one build leaves a core idle.
# The exact flags of ../shared/reference/toolchain.md §6: the README's three target features
# alone give a non-shared memory that cannot be posted to the pool's workers.
# The nightly is pinned (ib_nightly in scripts/env.sh): a newer one never slips in.
NIGHTLY="$(ib_nightly)"
if ! rustup component list --toolchain "$NIGHTLY" --installed 2>/dev/null | grep -q '^rust-src'; then
    rustup component add rust-src --toolchain "$NIGHTLY"
fi
THREADS_TARGET_DIR="${IB_WASM_THREADS_TARGET_DIR:-$INSITUBATCH_CACHE/target-wasm-threads}"
# 4 GiB, wasm32's whole space: Chromium and Node allow shared memories that large. The
# engine plans its automatic budget within it (wasm/src/runtime.rs reads IB_WASM_MAX_MEMORY).
export IB_WASM_MAX_MEMORY=4294967296
RUSTFLAGS="-C target-feature=+atomics,+bulk-memory,+mutable-globals -C link-arg=--shared-memory -C link-arg=--max-memory=$IB_WASM_MAX_MEMORY -C link-arg=--import-memory -C link-arg=--export=__wasm_init_tls -C link-arg=--export=__tls_size -C link-arg=--export=__tls_align -C link-arg=--export=__tls_base" \
    CARGO_TARGET_DIR="$THREADS_TARGET_DIR" \
    nice -n 5 cargo "+$NIGHTLY" build -q --release -p insitubatch-wasm --no-default-features --features threads \
    --target wasm32-unknown-unknown -Z build-std=panic_abort,std &
THREADS_BUILD=$!
WEB_OPT=
trap 'kill "$THREADS_BUILD" $WEB_OPT 2>/dev/null || true' EXIT
# Browsers get it without signed S3 (object_store + reqwest + ring: +1.6 MB after wasm-opt,
# +0.98 MB gzipped, over the 2 MB budget), and with it as js/pkg/web-s3 (the entry
# `insitubatch/web-s3`, for pages that read signed buckets), built next in the same target
# dir: cargo keeps both feature sets' artifacts, so a warm run reruns only the crate's last
# step. Node's package is that same module with Node's glue (default features, `s3`). It had
# a build of its own at opt-level 3 until 2026-12-06: 1.02-1.06x faster cold epochs in Node,
# spreads overlapping (docs/lab/benchmarks.md "The Node build"), for a third wasm32 dependency
# tree in every cold run (about 150 s of CI's 2 cores).
nice -n 5 cargo build -q --release -p insitubatch-wasm --target wasm32-unknown-unknown --no-default-features
rm -rf js/pkg/web
wasm-bindgen --target web --out-dir js/pkg/web --remove-producers-section \
    "$CARGO_TARGET_DIR/wasm32-unknown-unknown/release/insitubatch_wasm.wasm"
nice -n 5 cargo build -q --release -p insitubatch-wasm --target wasm32-unknown-unknown
rm -rf js/pkg/web-s3
wasm-bindgen --target web --out-dir js/pkg/web-s3 --remove-producers-section \
    "$CARGO_TARGET_DIR/wasm32-unknown-unknown/release/insitubatch_wasm.wasm"
rm -rf js/pkg/node
wasm-bindgen --target nodejs --out-dir js/pkg/node --remove-producers-section \
    "$CARGO_TARGET_DIR/wasm32-unknown-unknown/release/insitubatch_wasm.wasm"
# The nodejs glue is CommonJS inside an ESM ("type": "module") package.
echo '{ "type": "commonjs" }' >js/pkg/node/package.json
# Each package's size as wasm-bindgen wrote it, before wasm-opt.
declare -A RAW
bg_wasm() { echo "js/pkg/$1/insitubatch_wasm_bg.wasm"; }
RAW[web]=$(stat -c %s "$(bg_wasm web)")
RAW[web-s3]=$(stat -c %s "$(bg_wasm web-s3)")
RAW[node]=$(stat -c %s "$(bg_wasm node)")
# The web packages' wasm-opt runs while the threaded build finishes (its LTO step leaves a
# core idle), not after it.
( wasm_opt "$(bg_wasm web)" && wasm_opt "$(bg_wasm web-s3)" ) &
WEB_OPT=$!
wait "$THREADS_BUILD" || { echo "the threaded wasm build (js/pkg/web-threads) failed" >&2; exit 1; }
rm -rf js/pkg/web-threads
wasm-bindgen --target web --out-dir js/pkg/web-threads --remove-producers-section \
    "$THREADS_TARGET_DIR/wasm32-unknown-unknown/release/insitubatch_wasm.wasm"
RAW[web-threads]=$(stat -c %s "$(bg_wasm web-threads)")
# Node's threaded entry (src/node-threads.js) runs the same module: pkg/node-threads is the
# glue alone, its wasm-bindgen-rayon helper swapped for src/node-thread-pool.js, which starts
# the pool's threads as worker_threads (the helper starts Web Workers, browsers only).
rm -rf js/pkg/node-threads
helper="$(cd js/pkg/web-threads && ls snippets/wasm-bindgen-rayon-*/src/workerHelpers.no-bundler.js)"
mkdir -p "js/pkg/node-threads/$(dirname "$helper")"
cp js/pkg/web-threads/insitubatch_wasm.js js/pkg/node-threads/
echo "export { startWorkers } from '../../../../../src/node-thread-pool.js';" >"js/pkg/node-threads/$helper"
echo "== wasm-opt -Oz (npm binaryen $(${WASM_OPT} --version | awk '{print $3}')): web (started above), web-threads [at $((SECONDS - START)) s]"
wasm_opt "$(bg_wasm web-threads)" --enable-threads
wait "$WEB_OPT" || { echo "wasm-opt of js/pkg/web failed" >&2; exit 1; }
declare -A SIZES
for pkg in web web-s3 web-threads node; do
    bg="$(bg_wasm "$pkg")"
    SIZES[$pkg]="$pkg: ${RAW[$pkg]} bytes after wasm-bindgen, $(stat -c %s "$bg") final, $(gzip -9 -c "$bg" | wc -c) gzip -9"
    echo "${SIZES[$pkg]}"
done
ls -t "$OPT_CACHE"/*.wasm | tail -n +11 | xargs -r rm -f   # keep the newest few
# The issue's budget: under 2 MB gzipped, for what browsers download by default (web-s3 is
# opt-in, for pages that read signed S3; its size is printed above and below).
GZ_LIMIT=2000000
for pkg in web web-threads; do
    gz=$(gzip -9 -c "js/pkg/$pkg/insitubatch_wasm_bg.wasm" | wc -c)
    [ "$gz" -lt "$GZ_LIMIT" ] || { echo "js/pkg/$pkg: $gz bytes gzipped, over the 2 MB budget" >&2; exit 1; }
done
if [ "$BUILD_ONLY" = 1 ]; then
    echo "built js/pkg in $((SECONDS - START)) s"
    exit 0
fi

echo "== host unit tests and native digests (parity reference) [at $((SECONDS - START)) s]"
STARTED_SERVERS=0
if [ -z "${INSITUBATCH_HTTP_URL:-}" ]; then
    source scripts/pyenv.sh
    ib_test_venv
    export INSITUBATCH_FIXTURES="$INSITUBATCH_CACHE/fixtures"
    "$IB_PY" tests/fixtures/make_fixtures.py "$INSITUBATCH_FIXTURES" >/dev/null
    source tests/servers/start_all.sh
    ib_start_servers "$INSITUBATCH_FIXTURES"
    STARTED_SERVERS=1
fi
: "${INSITUBATCH_FIXTURES:?INSITUBATCH_HTTP_URL is set but INSITUBATCH_FIXTURES is not}"
DIGESTS="$(mktemp -t ib-native-digests.XXXXXX.json)"
export INSITUBATCH_NATIVE_DIGESTS="$DIGESTS"
HOSTLOG="$INSITUBATCH_CACHE/last-test-wasm-host.log"
if ! CARGO_TARGET_DIR="$HOST_TARGET_DIR" cargo test -p insitubatch-wasm >"$HOSTLOG" 2>&1; then
    cat "$HOSTLOG" >&2; echo "host tests of insitubatch-wasm failed" >&2; exit 1
fi
grep -E '^test result' "$HOSTLOG"
[ -s "$DIGESTS" ] || { echo "native digests were not written ($HOSTLOG)" >&2; exit 1; }
# Core's storage conformance fixture, where the HTTP server serves it, for the suite run
# against FetchStorage under Node (wasm/tests/node.rs).
CARGO_TARGET_DIR="$HOST_TARGET_DIR" cargo run -q -p insitubatch-tests --example write_storage_fixture -- \
    "$INSITUBATCH_FIXTURES/storage-conformance"

# The cloud-like store js/test/cloud.test.js starts (tests/servers/cloud_store).
CARGO_TARGET_DIR="$HOST_TARGET_DIR" cargo build -q -p insitubatch-tests --bin cloud-store
export INSITUBATCH_CLOUD_STORE_BIN="$HOST_TARGET_DIR/debug/cloud-store"

# Chromium for js/test/browser.test.js (playwright-core) and wasm/tests/browser.rs (chromedriver).
ib_tool chromium
# The edge-inference example's onnxruntime-web and its Python exporter and reference, for
# js/test/edge-inference.test.js (js/examples/edge-inference/setup.sh: nothing to do when current).
EDGE_ENV="$(bash js/examples/edge-inference/setup.sh)" || { echo "js/examples/edge-inference/setup.sh failed" >&2; exit 1; }
eval "$EDGE_ENV"

rc=0
echo "== core's unit tests and simulations on wasm32 (wasm-bindgen-test in Node) [at $((SECONDS - START)) s]"
# The same tests as on the host (their modules use wasm_bindgen_test as `test` on wasm32):
# a 32-bit usize, one thread, no clock in std. --lib: the doctests are host-only.
CORELOG="$INSITUBATCH_CACHE/last-test-wasm-core.log"
if CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner \
    nice -n 5 cargo test -p insitubatch-core --target wasm32-unknown-unknown --lib >"$CORELOG" 2>&1; then
    grep -E '^test result' "$CORELOG"
else
    cat "$CORELOG" >&2; echo "core's tests on wasm32 failed" >&2; rc=1
fi

echo "== Node tests (wasm over HTTP: $INSITUBATCH_HTTP_URL; worker_threads; headless Chromium via playwright-core) [at $((SECONDS - START)) s]"
IB_REQUIRE_THREADS=1 node --test --test-reporter=spec --test-timeout="$IB_NODE_TEST_TIMEOUT_MS" \
    --test-concurrency="$IB_NODE_TEST_CONCURRENCY" js/test/ || rc=$?
rm -f "$DIGESTS"

echo "== wasm-bindgen-test: a page and a dedicated worker in headless Chromium, and Node (+ storage conformance) [at $((SECONDS - START)) s]"
CHROMEDRIVER_BIN="$(command -v chromedriver || true)"
if [ -n "$CHROMEDRIVER_BIN" ] && command -v chromium >/dev/null; then
    BROWSERLOG="$INSITUBATCH_CACHE/last-test-wasm-browser.log"
    # The browser profile of each of these runs (a 100 MB org.chromium.Chromium.scoped_dir.*,
    # two per run) was left in /tmp after it: they get a TMPDIR of their own, removed after.
    BROWSER_TMP="$(mktemp -d)"
    if TMPDIR="$BROWSER_TMP" CHROMEDRIVER="$CHROMEDRIVER_BIN" CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner \
        cargo test -p insitubatch-wasm --no-default-features --target wasm32-unknown-unknown \
        --test browser --test worker --test node >"$BROWSERLOG" 2>&1; then
        grep -E '^(Running|test result)' "$BROWSERLOG"
    else
        cat "$BROWSERLOG" >&2; echo "browser test failed" >&2; rc=1
    fi
    rm -rf "$BROWSER_TMP"
else
    echo "chromium/chromedriver could not be installed" >&2
    rc=1
fi
[ "$STARTED_SERVERS" = 1 ] && ib_stop_servers
echo "== .wasm sizes [at $((SECONDS - START)) s]"
for pkg in web web-s3 web-threads node; do echo "${SIZES[$pkg]}"; done
echo "== scripts/test-wasm.sh took $((SECONDS - START)) s"
exit $rc
