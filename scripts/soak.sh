#!/usr/bin/env bash
# A longer soak than CI's (python-bindings/tests/test_soak.py): N epochs (default 2000) of
# zip(train, val) with early breaks; prints resident memory, open files and threads.
#   bash scripts/soak.sh [EPOCHS]
set -euo pipefail
cd "$(dirname "$0")/.."
IB_SOAK_EPOCHS="${1:-2000}" IB_PYTHON_VERSIONS= IB_ANCHOR=0 exec bash scripts/test-python.sh -s -k soak
