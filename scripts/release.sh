#!/usr/bin/env bash
# The release artifacts, built into dist/ and checked as a user receives them:
#   dist/python/  the abi3 wheel (CPython 3.10+) and the free-threaded cp314t wheel, both
#                 manylinux_2_28 (scripts/pyenv.sh ib_build_wheel: zig against glibc 2.28), and
#                 the sdist. Checked: each wheel ships the notebook widget's front end
#                 (scripts/www.sh ib_widget_assets); `auditwheel show` reports manylinux_2_28 or older; `twine
#                 check` passes; the abi3 wheel, installed with its dependencies from PyPI into a
#                 clean venv of Python 3.10 (not the builder's 3.11), reads real batches there
#                 (tests/packages/use_wheel.py), and so does the cp314t wheel in a clean 3.14t venv.
#   dist/npm/     `npm pack` of js/ (with the js/pkg wasm builds); `npm publish --dry-run` of it.
#   dist/crates/  insitubatch-core, -object, -native: `cargo publish --dry-run` in dependency
#                 order (cargo packages each, then builds it against the others' packages and
#                 crates.io, as a user's `cargo add` would), each with its README and LICENSE.
#   dist/sbom/    CycloneDX SBOMs (JSON): each crate's dependency tree (cargo-cyclonedx), the
#                 environment the abi3 wheel installs into (cyclonedx-py; the Rust inside the
#                 wheel is maturin's SBOM in its .dist-info/sboms/, checked to be there), the
#                 npm package (cyclonedx-npm) and the Rust inside its wasm (cargo-cyclonedx for
#                 wasm32), and the JavaScript bundled into the dashboard and the wheel's widget
#                 (www's lockfile, cyclonedx-npm).
#   dist/LICENSES.md  every component of those SBOMs with its license, each held to deny.toml's
#                 allow-list (scripts/licenses.py); a license not on it fails the release.
#   dist/SHA256SUMS   the checksum of every file above (`sha256sum -c SHA256SUMS` in dist/).
# Reproducible: every artifact is built a second time (the wheels repackaged from the same
# build, the sdist, the npm tarball, the crates) and compared byte for byte with the first; a
# difference fails, naming the file, but for the one maturin makes on purpose: the SBOM it
# embeds in a wheel carries a random serial number and the build's time (scripts/same_wheel.py
# checks that nothing else differs; docs/security.md "Releases and dependencies").
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
source scripts/www.sh
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
        ib_widget_assets
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

# Wheel $1 ships the notebook widget's front end (scripts/www.sh ib_widget_assets).
check_widget() {
    local whl="$1" f listing
    listing="$("$BIN/python" -m zipfile -l "$whl")"
    for f in widget.js insitubatch_wasm_bg.wasm; do
        grep -q "insitubatch_rs/_widget/$f " <<<"$listing" \
            || { echo "FAIL: $(basename "$whl") lacks insitubatch_rs/_widget/$f: the widget would not load (scripts/www.sh ib_widget_assets)" >&2; return 1; }
    done
    echo "widget: $(basename "$whl") ships insitubatch_rs/_widget/"
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
    for whl in "$DIST"/python/*.whl; do check_manylinux "$whl" && check_widget "$whl"; done
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

# -- reproducible -----------------------------------------------------------------------------
# Build each artifact again into $WORK/again and compare. The wheels are packaged again from
# the same compiled extension (maturin finds the build fresh; a build from an empty target dir
# takes the release's 15 minutes twice, see docs/security.md for that comparison); the sdist,
# the npm tarball and the crates are packed again from the tree. maturin, npm and cargo write
# fixed timestamps and a fixed order into their archives, so nothing here depends on the clock.
reproducible() {
    local again="$WORK/again" f c
    rm -rf "$again" && mkdir -p "$again/python" "$again/npm" "$again/crates"
    if [ "$MODE" = check ]; then
        ib_build_wheel "$IB_PY" "$again/python"
    else
        ib_build_wheel "$IB_PY" "$again/python" --release
        ib_build_wheel "$(bash scripts/py314t.sh)" "$again/python" --release
    fi
    (cd python-bindings && "$BIN/maturin" sdist -o "$again/python" >/dev/null)
    (cd js && npm pack --silent --pack-destination "$again/npm" >/dev/null)
    cargo package -q --allow-dirty --no-verify "${CRATES[@]/#/-p}" 2>/dev/null
    for c in "${CRATES[@]}"; do
        f="$CARGO_TARGET_DIR/package/$c-$version.crate"
        [ -f "$f" ] || f="$CARGO_TARGET_DIR/package/tmp-crate/$c-$version.crate"
        cp "$f" "$again/crates/"
    done
    local differ=() stamped=()
    for f in "$again"/*/*; do
        local first="$DIST/${f#"$again"/}"
        # In --check the cp314t wheel is test-python's, not rebuilt here: only what was built twice.
        [ -f "$first" ] || { [ "$MODE" = check ] && continue; differ+=("${f#"$again"/} (no first build)"); continue; }
        cmp -s "$f" "$first" && continue
        # A wheel: maturin stamps its embedded SBOM with a random serial number and the time
        # (and RECORD hashes that file); anything else that differs fails.
        if [[ "$f" == *.whl ]] && python3 scripts/same_wheel.py "$first" "$f" >/dev/null; then
            stamped+=("$(basename "$f")")
        else
            differ+=("${f#"$again"/}")
        fi
    done
    [ ${#differ[@]} -eq 0 ] || { echo "FAIL: not reproducible, the second build differs: ${differ[*]}" >&2; return 1; }
    local but=""
    [ ${#stamped[@]} -eq 0 ] || but=" but for the serial number and timestamp of the SBOM maturin embeds in ${stamped[*]}"
    echo "reproducible: $(cd "$again" && find . -type f | wc -l) artifacts built twice, byte for byte the same$but"
    passed=$((passed + 1))
}

# -- supply chain -----------------------------------------------------------------------------
# cargo-cyclonedx over the workspace for target $1 (more arguments: features): it writes
# NAME.cdx.json beside each member's Cargo.toml; kept are those of the members named in $KEEP
# ("member:file" words), moved to $SBOM/file, and the rest are removed.
cyclonedx_rust() {
    local target="$1" member dir
    shift
    "$IB_CARGO_CYCLONEDX" cyclonedx -q --format json --spec-version 1.5 --target "$target" "$@"
    while read -r member dir; do
        local keep="" w
        for w in $KEEP; do [ "${w%%:*}" = "$member" ] && keep="${w#*:}"; done
        if [ -n "$keep" ]; then mv "$dir/$member.cdx.json" "$SBOM/$keep"; else rm -f "$dir/$member.cdx.json"; fi
    done < <(cargo metadata --format-version 1 --no-deps | python3 -c \
        'import json, os, sys; [print(p["name"], os.path.dirname(p["manifest_path"])) for p in json.load(sys.stdin)["packages"]]')
}

supply_chain() {
    local supply c whl
    SBOM="$DIST/sbom"
    mkdir -p "$SBOM"
    source scripts/tools.sh
    ib_tool cargo-cyclonedx && ib_tool npm
    supply="$(dirname "$(ib_venv supply)")"
    # The three crates with every feature, and the wasm crate compiled into the npm package,
    # for wasm32 with the features of its builds (s3: Node and web-s3; threads: web-threads;
    # `schema` is the declarations generator's only).
    KEEP="$(for c in "${CRATES[@]}"; do printf '%s:%s.cdx.json ' "$c" "$c"; done)" \
        cyclonedx_rust x86_64-unknown-linux-gnu --all-features
    KEEP="insitubatch-wasm:insitubatch-npm-wasm.cdx.json" cyclonedx_rust wasm32-unknown-unknown --features s3,threads
    # The environment a user's `pip install` of the abi3 wheel makes (the wheel and numpy),
    # from the clean venv python_checks installed it into; the wheel's own Rust SBOM is there.
    "$supply/cyclonedx-py" environment --sv 1.5 --of JSON --output-reproducible --pyproject python-bindings/pyproject.toml \
        -o "$SBOM/insitubatch-rs-wheel.cdx.json" "$WORK/venv-abi3/bin/python" >/dev/null
    for whl in "$DIST"/python/*.whl; do
        python3 -c 'import sys, zipfile; sys.exit(not any("/sboms/" in n and n.endswith(".json") for n in zipfile.ZipFile(sys.argv[1]).namelist()))' \
            "$whl" || { echo "FAIL: $(basename "$whl") carries no SBOM of its Rust in .dist-info/sboms/" >&2; return 1; }
    done
    # The npm package as packed (it has no dependencies of its own: the lockfile npm writes for
    # it, offline, is what cyclonedx-npm reads), and the production dependencies the dashboard
    # and the wheel's widget bundle (www's lockfile).
    local cdx_npm=("$IB_NPM_PREFIX/node_modules/.bin/cyclonedx-npm" --package-lock-only --output-reproducible
        --spec-version 1.5 --output-format JSON)
    mkdir -p "$WORK/npm-sbom" && tar xzf "$DIST/npm/insitubatch-$version.tgz" -C "$WORK/npm-sbom"
    (cd "$WORK/npm-sbom/package" && npm install --package-lock-only --ignore-scripts --offline --no-audit --no-fund \
        --loglevel=error >/dev/null && "${cdx_npm[@]}" --output-file "$SBOM/insitubatch-npm.cdx.json" >/dev/null)
    (cd www && "${cdx_npm[@]}" --omit dev --output-file "$SBOM/www-bundled.cdx.json" >/dev/null)
    "$supply/python" scripts/licenses.py --allow deny.toml --report "$DIST/LICENSES.md" "$SBOM"/*.cdx.json
    (cd "$DIST" && find . -type f ! -name SHA256SUMS -printf '%P\n' | sort | xargs sha256sum >SHA256SUMS \
        && sha256sum --quiet -c SHA256SUMS)
    echo "SHA256SUMS: $(wc -l <"$DIST/SHA256SUMS") files; SBOMs: $(cd "$SBOM" && ls | tr '\n' ' ')"
    passed=$((passed + 3))
}

echo "== Python: wheels (manylinux_2_28) and the sdist"
"$IB_PY" tests/fixtures/make_fixtures.py "$FIXTURES" >/dev/null   # the stores use_wheel.py reads; skipped when current
python_wheels
python_checks
echo "== npm: the package tarball"
npm_package
echo "== crates: cargo publish --dry-run (${CRATES[*]})"
crates
echo "== reproducible: each artifact built again, compared byte for byte"
reproducible
echo "== supply chain: SBOMs, the license report, SHA256SUMS"
supply_chain
echo "dist/: $(cd "$DIST" && find . -type f | sort | tr '\n' ' ')"
if grep -q 'example.invalid' Cargo.toml python-bindings/pyproject.toml; then
    echo "note: the repository address is a placeholder (example.invalid): set it in Cargo.toml and"
    echo "      python-bindings/pyproject.toml before publishing these"
fi
echo "== scripts/release.sh took $((SECONDS - START)) s"
echo "test result: ok. $passed passed; 0 failed (release $MODE)"
