#!/usr/bin/env bash
# The notebook widget (insitubatch_rs.widgets.Preview) in a real JupyterLab and in marimo
# (`marimo run`), driven by playwright-core in Debian's headless Chromium (node --test www/test-widget/).
#   1. the widget's front end: www/src/widget.js bundled by esbuild (Vite's, from
#      www/node_modules) with the one-thread web engine (js/pkg/web) into
#      python-bindings/python/insitubatch_rs/_widget/, which the wheel ships;
#   2. a venv with JupyterLab, anywidget and marimo (scripts/pyenv.sh `ib_venv widget`: uv, from
#      tools/python/widget.txt) and the wheel scripts/test-python.sh builds from this tree and
#      tests (`--build-only`: rebuilt when an input changes);
#   3. the test: in each of JupyterLab and marimo, a notebook per store (a local path read
#      through the kernel; the same store served by tests/servers/http_server.py, fetched by
#      the browser), each batch image's pixels checked against the source values
#      (zarr-python) through the colour map.
# Screenshots go to $INSITUBATCH_CACHE/widget-artifacts/ (docs/img/ takes them from there).
#   scripts/test-widget.sh --build-only   # steps 1 and 2 only
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
START=$SECONDS
source scripts/www.sh
source scripts/pyenv.sh
ib_prereqs

echo "== widget: wasm package, npm packages, front-end bundle"
ib_widget_assets

echo "== widget: JupyterLab venv and the insitubatch_rs wheel (scripts/test-python.sh's)"
# The wheel test-python builds and tests (its dev profile; it ships the widget's front end):
# one build of the extension per change, not a second one here.
bash scripts/test-python.sh --build-only
ib_test_venv   # IB_PY, which installs wheels
WIDGET_PY="$(ib_venv widget)"
VENV="$(dirname "$(dirname "$WIDGET_PY")")"
WHEELS="$(ib_test_wheels)"
wheel_hash="$(sha256sum "$WHEELS"/insitubatch_rs-*abi3*.whl | sha256sum | cut -d' ' -f1)"
# (A sync of the venv to a changed lock removes the wheel: the import check sees that.)
if [ "$(cat "$VENV/.ib-build" 2>/dev/null || true)" != "$wheel_hash" ] \
    || ! "$WIDGET_PY" -c 'import insitubatch_rs._native' 2>/dev/null; then
    ib_install_wheel "$WIDGET_PY" "$WHEELS"/insitubatch_rs-*abi3*.whl
    echo "$wheel_hash" >"$VENV/.ib-build"
fi
whl=("$WHEELS"/insitubatch_rs-*.whl)
echo "wheel: $(basename "${whl[0]}") $(stat -c %s "${whl[0]}") bytes; widget files in it:"
"$VENV/bin/python" -m zipfile -l "${whl[0]}" | grep _widget/
if [ "${1:-}" = "--build-only" ]; then
    echo "built the widget in $((SECONDS - START)) s"
    exit 0
fi

echo "== widget: demo store, JupyterLab and marimo + headless Chromium (node --test www/test-widget/)"
source scripts/tools.sh
ib_tool chromium
cargo build -q -p insitubatch-native --bin insitubatch
FULL="$(ib_www_demo_store "$CARGO_TARGET_DIR/debug/insitubatch")"
SMALL="$INSITUBATCH_CACHE/www-demo-48.zarr"
node www/test-support/crop-store.mjs "$FULL" "$SMALL" 48
ART="$INSITUBATCH_CACHE/widget-artifacts"
rm -rf "$ART"
rc=0
IB_WIDGET_STORE="$SMALL" IB_WIDGET_PY="$VENV/bin/python" IB_SOURCE_PY="$IB_PY" IB_ARTIFACTS="$ART" \
    IB_HTTP_SERVER="$ROOT/tests/servers/http_server.py" \
    node --test --test-reporter=spec --test-timeout="$IB_NODE_TEST_TIMEOUT_MS" www/test-widget/ || rc=$?
echo "== widget: screenshots in $ART: $(cd "$ART" 2>/dev/null && ls | tr '\n' ' ')"
echo "== scripts/test-widget.sh took $((SECONDS - START)) s"
exit $rc
