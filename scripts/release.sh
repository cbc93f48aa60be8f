#!/usr/bin/env bash
# The release artifacts, built into dist/ and checked as a user receives them:
#   dist/python/  the abi3 wheel (CPython 3.10+) and the free-threaded cp314t wheel, both
#                 manylinux_2_28 (scripts/pyenv.sh ib_build_wheel: zig against glibc 2.28), and
#                 the sdist. Checked: `auditwheel show` reports manylinux_2_28 or older; `twine
#                 check` passes; the abi3 wheel, installed with its dependencies from PyPI into a
#                 clean venv of Python 3.10 (not the builder's 3.11), reads real batches there
#                 (tests/packages/use_wheel.py), and so does the cp314t wheel in a clean 3.14t venv.
#   dist/npm/     `npm pack` of js/ (with the js/pkg wasm builds); `npm publish --dry-run` of it.
#   dist/crates/  insitubatch-core, -object, -native: `cargo publish --dry-run` in dependency
#                 order (cargo packages each, then builds it against the others' packages and
#                 crates.io, as a user's `cargo add` would), each with its README and LICENSE.
# One version everywhere: CHANGELOG.md's newest (docs-tests test_one_version_everywhere).
#   scripts/release.sh           the release profile: what you publish (the wheels take ~15 min
#                                cold on 2 cores; builds js/pkg and 3.14t when missing)
#   scripts/release.sh --check   CI: the same checks on the dev-profile wheels scripts/test-python.sh
#                                built and tested (the same zig build), after scripts/test-wasm.sh
# Publishing itself (twine upload, npm publish, cargo publish) is left to a person with the tokens.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
START=$SECONDS
source scripts/env.sh
source scripts/pyenv.sh
ib_test_venv   # maturin, zig, auditwheel and twine (tools/python/test.in)
MODE=release
case "${1:-}" in --check) MODE=check ;; "") ;; *) echo "usage: scripts/release.sh [--check]" >&2; exit 2 ;; esac
DIST="$ROOT/dist"
FIXTURES="${INSITUBATCH_FIXTURES:-$INSITUBATCH_CACHE/fixtures}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
BIN="$(dirname "$IB_PY")"
passed=0
rm -rf "$DIST" && mkdir -p "$DIST/python" "$DIST/npm" "$DIST/crates"
version="$(sed -n 's/^## \([0-9][^ ]*\).*/\1/p' CHANGELOG.md | head -n1)"
echo "== release $version ($MODE)"

# -- Python -----------------------------------------------------------------------------------
python_wheels() {
    local py314t
    if [ "$MODE" = check ]; then
        cp "$INSITUBATCH_CACHE"/python-wheels/insitubatch_rs-*.whl "$INSITUBATCH_CACHE"/python-wheels-ft/insitubatch_rs-*.whl \
            "$DIST/python/" || { echo "FAIL: no wheels from scripts/test-python.sh in $INSITUBATCH_CACHE" >&2; return 1; }
    else
        ib_build_wheel "$IB_PY" "$DIST/python" --release
        py314t="$(bash scripts/py314t.sh)"
        ib_build_wheel "$py314t" "$DIST/python" --release
    fi
    (cd python-bindings && "$BIN/maturin" sdist -o "$DIST/python" >/dev/null)
}

# The wheel's platform tag per auditwheel, which reads the symbols it links: manylinux_2_X, X ≤ 28.
check_manylinux() {
    local whl="$1" tag
    tag="$("$BIN/auditwheel" show "$whl" | tr -d '\n' | grep -o 'consistent with the following platform tag: "[^"]*"' | cut -d'"' -f2)"
    [[ "$tag" =~ ^manylinux_2_([0-9]+)_x86_64$ ]] && [ "${BASH_REMATCH[1]}" -le 28 ] \
        || { echo "FAIL: auditwheel show: $(basename "$whl") is '$tag', want manylinux_2_28 or older" >&2; return 1; }
    echo "auditwheel: $(basename "$whl"): $tag"
}

# A clean venv of interpreter $1 outside the repo, the wheel installed from $2 with its
# dependencies from PyPI, and tests/packages/use_wheel.py run there on a fixture store.
use_in_clean_venv() {
    local py="$1" whl="$2" venv="$WORK/venv-$3"
    "$py" -m venv "$venv"
    "$venv/bin/python" -m pip install -q "$whl"
    cp tests/packages/use_wheel.py "$WORK/"
    (cd "$WORK" && PYTHON_GIL=0 "$venv/bin/python" use_wheel.py "$FIXTURES/v3_zstd")
    echo "installed and used with $("$venv/bin/python" -V)"
}

python_checks() {
    local whl py310
    for whl in "$DIST"/python/*.whl; do check_manylinux "$whl"; done
    "$BIN/twine" check --strict "$DIST"/python/*
    py310="$(ib_python_version 3.10)"
    [ -n "$py310" ] || { echo "FAIL: no Python 3.10 (pyenv or PATH) to install the abi3 wheel into" >&2; return 1; }
    use_in_clean_venv "$py310" "$(ls "$DIST"/python/insitubatch_rs-*-abi3-*.whl)" abi3
    use_in_clean_venv "$(bash scripts/py314t.sh)" "$(ls "$DIST"/python/insitubatch_rs-*-cp314t-*.whl)" cp314t
    passed=$((passed + 4))
}

# -- npm --------------------------------------------------------------------------------------
npm_package() {
    local tgz
    [ "$MODE" = check ] || bash scripts/test-wasm.sh --build-only
    export npm_config_cache="$INSITUBATCH_CACHE/npm-cache"
    tgz="$(cd js && npm pack --silent --pack-destination "$DIST/npm")"
    [ "$tgz" = "insitubatch-$version.tgz" ] || { echo "FAIL: npm pack wrote $tgz, want insitubatch-$version.tgz" >&2; return 1; }
    # --dry-run reports what would be published and checks the manifest; it uploads nothing.
    (cd "$WORK" && npm publish --dry-run --loglevel=warn "$DIST/npm/$tgz")
    passed=$((passed + 1))
}

# -- crates -----------------------------------------------------------------------------------
CRATES=(insitubatch-core insitubatch-object insitubatch-native)
crates() {
    local c crate listing f
    # Publishing several packages at once, cargo packs them into package/tmp-crate/; one alone
    # goes to package/. Old files removed first, so a stale one is never checked. Cargo also
    # unpacks them into a local registry under $CARGO_HOME/registry/src, and treats what it
    # built from a registry as unchanging (same name and version): without removing the
    # unpacked copy and the fingerprints, a later run verifies native against an earlier
    # run's core. The workspace's own builds of these crates are rebuilt once for it.
    for c in "${CRATES[@]}"; do
        rm -f "$CARGO_TARGET_DIR"/package/{,tmp-crate/}"$c-$version.crate"
        rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"$c-$version" "$CARGO_TARGET_DIR"/debug/.fingerprint/"$c"-*
    done
    # Cargo builds a packaged crate with its own manifest's profile (the default: full debug
    # info), not the workspace's. With the workspace's debug setting, native's dependencies
    # are the units the debug CLI (`cargo build -p insitubatch-native --bin insitubatch`, which
    # scripts/test-www.sh runs earlier) left in the same target dir, and only our crates (plus
    # what core and object alone enable differently) compile: this phase took 74 s in a cold
    # CI run instead of 253 (2026-12-06).
    local debug
    debug="$(sed -n '/^\[profile\.dev\]/,/^\[/s/^debug = "\(.*\)"$/\1/p' Cargo.toml)"
    [ -n "$debug" ] || { echo "FAIL: no debug = \"...\" under [profile.dev] in Cargo.toml" >&2; return 1; }
    CARGO_PROFILE_DEV_DEBUG="$debug" cargo publish --dry-run --allow-dirty "${CRATES[@]/#/-p}"
    for c in "${CRATES[@]}"; do
        crate="$CARGO_TARGET_DIR/package/tmp-crate/$c-$version.crate"
        [[ -f $crate ]] || crate="$CARGO_TARGET_DIR/package/$c-$version.crate"
        listing="$(tar tzf "$crate")"
        for f in Cargo.toml README.md LICENSE src/lib.rs; do
            grep -qx "$c-$version/$f" <<<"$listing" || { echo "FAIL: $crate lacks $f" >&2; return 1; }
        done
        cp "$crate" "$DIST/crates/"
        passed=$((passed + 1))
    done
}

echo "== Python: wheels (manylinux_2_28) and the sdist"
"$IB_PY" tests/fixtures/make_fixtures.py "$FIXTURES" >/dev/null   # the stores use_wheel.py reads; skipped when current
python_wheels
python_checks
echo "== npm: the package tarball"
npm_package
echo "== crates: cargo publish --dry-run (${CRATES[*]})"
crates
echo "dist/: $(cd "$DIST" && find . -type f | sort | tr '\n' ' ')"
if grep -q 'example.invalid' Cargo.toml python-bindings/pyproject.toml; then
    echo "note: the repository address is a placeholder (example.invalid): set it in Cargo.toml and"
    echo "      python-bindings/pyproject.toml before publishing these"
fi
echo "== scripts/release.sh took $((SECONDS - START)) s"
echo "test result: ok. $passed passed; 0 failed (release $MODE)"
