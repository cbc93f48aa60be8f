#!/usr/bin/env bash
# The packages as users install them, outside this repo:
#   1. crates: `cargo package` of the crates.io set (insitubatch-core, -object, -native), each
#      with its README and LICENSE;
#   2. Python: the wheel scripts/test-python.sh built, and the sdist maturin builds, each
#      installed with its dependencies (from PyPI) into a clean venv in a temp dir and used
#      from a script run there (tests/packages/use_wheel.py). The sdist compiles the extension
#      (minutes), so it is rebuilt only when its inputs changed since it last passed.
# Needs the fixtures (INSITUBATCH_FIXTURES) and the test venv's wheel: run after
# scripts/test-python.sh, as scripts/test.sh does.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
source scripts/env.sh
source scripts/pyenv.sh
ib_test_venv
FIXTURES="${INSITUBATCH_FIXTURES:-$INSITUBATCH_CACHE/fixtures}"
STORE="$FIXTURES/v3_zstd"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
passed=0

echo "== crates: cargo package (insitubatch-core, -object, -native)"
cargo package -q --no-verify --allow-dirty -p insitubatch-core -p insitubatch-object -p insitubatch-native
for c in insitubatch-core insitubatch-object insitubatch-native; do
    crate="$CARGO_TARGET_DIR/package/$c-0.1.0.crate"
    listing="$(tar tzf "$crate")"
    for f in Cargo.toml README.md LICENSE src/lib.rs; do
        grep -qx "$c-0.1.0/$f" <<<"$listing" || { echo "FAIL: $crate lacks $f" >&2; exit 1; }
    done
    passed=$((passed + 1))
done

# A clean venv in the temp dir, the package installed from $1 with its dependencies, and the
# user script run from there (not from the repo, so only the install can be imported).
use_python_package() {
    local what="$1" venv="$WORK/venv-$2"
    "$IB_PY" -m venv "$venv"
    "$venv/bin/python" -m pip install -q "$what"
    (cd "$WORK" && cp "$ROOT/tests/packages/use_wheel.py" . && "$venv/bin/python" use_wheel.py "$STORE")
    passed=$((passed + 1))
}

echo "== Python: the wheel in a clean venv"
wheel="$(ls "$INSITUBATCH_CACHE"/python-wheels/insitubatch_rs-*.whl | head -n1)"
use_python_package "$wheel" wheel

echo "== Python: the sdist in a clean venv (compiles the extension)"
sdist_dir="$INSITUBATCH_CACHE/python-sdist"
sdist_hash="$( { find core native object python-bindings/src python-bindings/python -type f -print0 | sort -z | xargs -0 sha256sum; \
    cat Cargo.toml Cargo.lock python-bindings/Cargo.toml python-bindings/pyproject.toml; } | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$sdist_dir/.passed" 2>/dev/null || true)" = "$sdist_hash" ]; then
    echo "sdist: unchanged since it last passed (skipped: $sdist_dir/.passed)"
else
    rm -rf "$sdist_dir" && mkdir -p "$sdist_dir"
    (cd python-bindings && "$(dirname "$IB_PY")/maturin" sdist -o "$sdist_dir")
    sdist="$(ls "$sdist_dir"/insitubatch_rs-*.tar.gz)"
    # pip builds it through maturin's PEP 517 backend, as for a user, but in the dev profile:
    # the dependencies are then the ones CARGO_TARGET_DIR (scripts/env.sh) already holds, and
    # only our three crates compile (a release build from scratch takes 15 minutes here).
    MATURIN_PEP517_ARGS="--profile dev" use_python_package "$sdist" sdist
    echo "$sdist_hash" >"$sdist_dir/.passed"
fi
echo "test result: ok. $passed passed; 0 failed (packages)"
