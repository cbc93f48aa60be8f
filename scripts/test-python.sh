#!/usr/bin/env bash
# Build the Python bindings (python-bindings/) into the test venv and run their pytest suite
# against the zarr-python fixtures. Idempotent: re-runs skip what is already installed/built.
#   IB_PYTHON_TORCH=0   skip installing torch (torch tests are skipped)
#   IB_PYTHON_JAX=0     skip installing jax (jax tests are skipped)
#   IB_PYTHON_RELEASE=1 build the extension in release mode
#   extra args go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
source scripts/env.sh
source scripts/pyenv.sh
ib_test_venv
VENV="$(dirname "$(dirname "$IB_PY")")"
PB="$ROOT/python-bindings"

# 1. Test requirements (+ torch, + jax), keyed on the requirement files' hash.
reqs=("$PB/requirements-test.txt")
[ "${IB_PYTHON_TORCH:-1}" = 0 ] || reqs+=("$PB/requirements-torch.txt")
[ "${IB_PYTHON_JAX:-1}" = 0 ] || reqs+=("$PB/requirements-jax.txt")
want="$(cat "${reqs[@]}" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$VENV/.ib-python-req" 2>/dev/null || true)" != "$want" ]; then
    echo "test-python: installing ${reqs[*]##*/}"
    args=()
    for r in "${reqs[@]}"; do args+=(-r "$r"); done
    "$IB_PY" -m pip install -q "${args[@]}"
    echo "$want" >"$VENV/.ib-python-req"
fi

# 2. The extension, keyed on every input of the build (Rust sources, manifests, Python package).
profile=dev
[ "${IB_PYTHON_RELEASE:-0}" = 1 ] && profile=release
build_hash="$( { echo "$profile"; cat Cargo.toml Cargo.lock; \
    find core native python-bindings/src python-bindings/python python-bindings/Cargo.toml python-bindings/pyproject.toml \
        -type f \( -name '*.rs' -o -name '*.toml' -o -name '*.py' -o -name '*.pyi' -o -name py.typed \) -print0 \
        | sort -z | xargs -0 sha256sum; } | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$VENV/.ib-python-build" 2>/dev/null || true)" != "$build_hash" ] \
    || ! "$IB_PY" -c 'import insitubatch_rs._native' 2>/dev/null; then
    echo "test-python: building insitubatch_rs ($profile)"
    wheels="$INSITUBATCH_CACHE/python-wheels"
    rm -rf "$wheels"
    rel=()
    [ "$profile" = release ] && rel=(--release)
    # A wheel (not `maturin develop`) so no .so lands in the source tree.
    (cd "$PB" && "$VENV/bin/maturin" build -q "${rel[@]}" --strip -i "$IB_PY" -o "$wheels")
    "$IB_PY" -m pip install -q --no-deps --force-reinstall "$wheels"/insitubatch_rs-*.whl
    echo "$build_hash" >"$VENV/.ib-python-build"
fi

# 3. Fixtures (the generator skips work when they are current).
export INSITUBATCH_FIXTURES="${INSITUBATCH_FIXTURES:-$INSITUBATCH_CACHE/fixtures}"
"$IB_PY" tests/fixtures/make_fixtures.py "$INSITUBATCH_FIXTURES" >/dev/null

# 4. Tests (run from outside the source tree so the installed package is the one imported).
cd "$PB/tests"
exec "$IB_PY" -m pytest -q -p no:cacheprovider "$@" .
