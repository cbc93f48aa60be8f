#!/usr/bin/env bash
# The book (docs/, mdBook; docs/testing-docs.md says how it is tested): build it with a pinned
# mdbook, check every relative link and anchor of the built HTML, then run every code block:
# Rust blocks and the generated reference pages (cargo test -p insitubatch-examples: examples/docs.rs, examples/tests/reference.rs), Python, JS
# and bash blocks (pytest over extracted snippets, docs-tests/test_snippets.py). Needs what
# scripts/test.sh builds before it: the Python package in the test venv (scripts/test-python.sh)
# and the Node wasm build (scripts/test-wasm.sh); missing ones skip loudly, and fail under CI.
# Starts its own loopback server. Idempotent. The other generated files are checked here too: the
# Python API page, and the blocks docs-tests/facts.py renders (the feature list, the figures from
# bench/rows); the generated types and the option reference are checked by scripts/check.sh.
#   scripts/test-docs.sh            # everything
#   scripts/test-docs.sh --build    # the book and its links only; prints where it is
set -euo pipefail
cd "$(dirname "$0")/.."
START=$SECONDS
source scripts/env.sh

echo "== docs: mdbook (pinned in scripts/tools.sh, in the cache)"
source scripts/tools.sh
ib_tool mdbook
MDBOOK="$IB_MDBOOK"

echo "== docs: build the book and check its links"
BOOK="$INSITUBATCH_CACHE/book"
rm -rf "$BOOK"
"$MDBOOK" build docs --dest-dir "$BOOK"
python3 docs-tests/linkcheck.py "$BOOK"
# The facts the pages state, against their one source (also in scripts/check.sh): the
# feature list and its tests, every figure against its committed rows, portable rows.
python3 docs-tests/facts.py --check
if [ "${1:-}" = "--build" ]; then
    echo "the book: $BOOK/index.html"
    exit 0
fi

echo "== docs: the CLI and the demo store the examples read"
cargo build -q -p insitubatch-native --bin insitubatch
export IB_DOCS_CLI="$CARGO_TARGET_DIR/debug/insitubatch"
DEMO="$INSITUBATCH_CACHE/demo/era5_demo.zarr"
# Written once, here, before the tests that read it run in parallel.
[ -f "$DEMO/.complete" ] || "$IB_DOCS_CLI" demo --var t2m >/dev/null

echo "== docs: Rust blocks (doc-tests) and the reference pages against the report types"
cargo test -q -p insitubatch-examples --doc
cargo test -q -p insitubatch-examples --test reference

echo "== docs: Python, JS and bash blocks (pytest over extracted snippets)"
source scripts/pyenv.sh
ib_test_venv
"$IB_PY" -m pytest -q -p no:cacheprovider -rs docs-tests/test_snippets.py docs-tests/test_python_api.py \
    docs-tests/test_security_page.py
echo "== scripts/test-docs.sh took $((SECONDS - START)) s"
