#!/usr/bin/env bash
# A longer soak than CI's: N epochs of train and val with early breaks and set_epoch; prints
# resident memory, open files and threads (Python), or wasm memory, the engine's bytes in use,
# the live JS heap, resident memory and active handles (Node).
#   bash scripts/soak.sh [EPOCHS]          # Python (python-bindings/tests/test_soak.py), default 2000
#   bash scripts/soak.sh --node [EPOCHS]   # Node (js/test/soak.test.js), default 2000; needs the
#                                          # js/pkg/node build and the fixtures of scripts/test-wasm.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --node ]; then
    source scripts/env.sh
    export INSITUBATCH_FIXTURES="${INSITUBATCH_FIXTURES:-$INSITUBATCH_CACHE/fixtures}"
    if [ ! -f "$INSITUBATCH_FIXTURES/manifest.json" ] || [ ! -f js/pkg/node/insitubatch_wasm_bg.wasm ]; then
        echo "no fixtures in $INSITUBATCH_FIXTURES or no js/pkg/node build: run scripts/test-wasm.sh first" >&2
        exit 1
    fi
    IB_SOAK_EPOCHS="${2:-2000}" exec node --test --test-reporter=spec js/test/soak.test.js
fi
IB_SOAK_EPOCHS="${1:-2000}" IB_REFERENCE=0 exec bash scripts/test-python.sh py=3.11,3.14t -s -k soak
