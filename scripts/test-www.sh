#!/usr/bin/env bash
# The dashboard (www/): build js/pkg if it lacks the dashboard's exports, install the pinned
# npm packages (Vite, playwright-core, ...), write the demo store with the CLI and crop it to
# 48 samples (5 MB) so a cold run stays fast, build the page, then drive it in Debian's
# headless Chromium (node --test www/test/). The tests also write an ERA5-sized store once
# (www/test-support/era5-store.mjs: 721 × 1440 float32, 33 MB chunks, 9 MB on disk) into
# $INSITUBATCH_CACHE. Screenshots, each view at 1280×800 and 390×844 among them, go to
# $INSITUBATCH_CACHE/www-artifacts/. Idempotent; needs no servers from scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
START=$SECONDS
source scripts/www.sh
ib_prereqs

echo "== www: wasm package, npm packages, CLI"
ib_www_pkg
ib_www_npm
source scripts/tools.sh
ib_tool chromium
# The debug CLI is what scripts/test.sh's cargo test has just built; this is a no-op then.
cargo build -q -p insitubatch-native --bin insitubatch
CLI="$CARGO_TARGET_DIR/debug/insitubatch"

echo "== www: demo store (written by the CLI, cropped to 48 samples)"
FULL="$(ib_www_demo_store "$CLI")"
SMALL="$INSITUBATCH_CACHE/www-demo-48.zarr"
node www/test-support/crop-store.mjs "$FULL" "$SMALL" 48
du -sh "$SMALL"

echo "== www: build (vite)"
(cd www && npx vite build --logLevel warn)

echo "== www: Playwright + headless Chromium (node --test www/test/)"
ART="$INSITUBATCH_CACHE/www-artifacts"
rm -rf "$ART"
rc=0
IB_WWW_STORE="$SMALL" IB_CLI="$CLI" IB_ARTIFACTS="$ART" \
    node --test --test-reporter=spec --test-timeout="$IB_NODE_TEST_TIMEOUT_MS" www/test/ || rc=$?
echo "== www: screenshots in $ART: $(cd "$ART" 2>/dev/null && ls | tr '\n' ' ')"
echo "== scripts/test-www.sh took $((SECONDS - START)) s"
exit $rc
