#!/usr/bin/env bash
# The static checks (CODE_STYLE.md "Checks"): formatting, no import circles, clippy on every
# crate and target the project builds for, and rustdoc, all with warnings as errors.
# scripts/test.sh runs this first; run it alone before a commit. Prints one line per check and exits non-zero if any
# failed (every check runs, so one run shows every problem).
#   scripts/check.sh
# Lint settings: [workspace.lints] in Cargo.toml; core's no-runtime list in core/clippy.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
ib_prereqs
for c in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
done

LOG_DIR="$INSITUBATCH_CACHE/check"
mkdir -p "$LOG_DIR"
failed=()
n=0
# check NAME CMD...: run CMD quietly; one line with the verdict, the output on failure.
check() {
    local name="$1"; shift
    local log="$LOG_DIR/$((++n)).log" start=$SECONDS
    if "$@" >"$log" 2>&1; then
        printf 'check %-44s ok (%d s)\n' "$name" $((SECONDS - start))
    else
        printf 'check %-44s FAILED (%d s)\n' "$name" $((SECONDS - start))
        sed 's/^/    /' "$log"
        failed+=("$name")
    fi
}
W=(-- -D warnings)
WASM=(--target wasm32-unknown-unknown)

check "fmt" cargo fmt --all --check
# No import circles in any crate's module graph (ARCHITECTURE.md, "Core's public API"): the
# strongly connected components of its `crate::`/`super::` paths, tools/modgraph (stdlib
# only, under a second), and that script's own tests on made-up crates.
check "module graph: no import circles" python3 tools/modgraph/modgraph.py
check "module graph: the check's tests" python3 -m unittest discover -s tools/modgraph -p 'test_*.py'
# scripts/test.sh holds the one list of test phases; the justfile names each once more, as a
# recipe that runs it, so that `just --list` shows it. The pinned just parses the justfile (a
# syntax error fails here), and a phase without its recipe fails.
justfile_covers_phases() {
    source scripts/tools.sh
    ib_tool just || return 1
    local recipes name missing=()
    recipes=" $("$IB_JUST" --justfile justfile --summary) " || return 1
    for name in $(bash scripts/test.sh --list | awk '{ print $1 }'); do
        [[ "$recipes" == *" $name "* ]] \
            && "$IB_JUST" --justfile justfile --show "$name" | grep -Eq "scripts/test\.sh $name( |\$)" \
            || missing+=("$name")
    done
    [ ${#missing[@]} -eq 0 ] || { echo "justfile: no recipe runs these phases of scripts/test.sh: ${missing[*]}"; return 1; }
}
check "justfile: a recipe per phase of scripts/test.sh" justfile_covers_phases
# Each Python environment's lock (tools/python/NAME.txt) is what scripts/lock.sh compiles from
# its inputs: the stamp on its first line, recomputed with no network and no uv.
check "Python locks: tools/python/*.txt match their .in files" bash scripts/lock.sh --check
# The facts the user pages state, from their one source (docs-tests/facts.py): the README's
# Status and the book's feature table rendered from docs/features.toml (whose tests exist),
# every figure rendered or cited from a committed rows file and equal to it, the rows
# portable, every public Python name in docs/migration.md. Stdlib only, about a second.
check "docs: rendered facts, cited figures, rows" python3 docs-tests/facts.py --check
# Host: every crate with its tests, benches and examples (core's `testing` feature comes on
# through native's dev-dependency), then core alone, without that feature.
check "clippy (host, all crates)" cargo clippy -q --workspace --all-targets "${W[@]}"
check "clippy (host, core alone)" cargo clippy -q -p insitubatch-core --all-targets "${W[@]}"
# wasm32: the core without the C codecs (scripts/test.sh builds it so), and the wasm crate,
# whose code is wasm32-only, in the Node build (s3) and the browser build (no s3).
check "clippy (wasm32, core, no C codecs)" cargo clippy -q -p insitubatch-core "${WASM[@]}" --no-default-features --all-targets "${W[@]}"
check "clippy (wasm32, core + wasm, Node build)" cargo clippy -q -p insitubatch-core -p insitubatch-wasm "${WASM[@]}" --all-targets "${W[@]}"
check "clippy (wasm32, wasm, browser build)" cargo clippy -q -p insitubatch-wasm "${WASM[@]}" --no-default-features --all-targets "${W[@]}"
# The threaded build (scripts/test-wasm.sh) is nightly + build-std + atomics, and
# wasm-bindgen-rayon refuses to compile without cfg(target_feature = "atomics"). A check needs
# no linking, so stable clippy does it, as for every other check: RUSTC_BOOTSTRAP=1 lets the
# stable compiler honour that unstable target feature (it warns that it is unstable). Its own
# target dir: these RUSTFLAGS would otherwise rebuild every other check's dependencies.
check "clippy (wasm32, wasm, threads feature)" env RUSTC_BOOTSTRAP=1 \
    RUSTFLAGS="-C target-feature=+atomics,+bulk-memory,+mutable-globals" \
    CARGO_TARGET_DIR="$INSITUBATCH_CACHE/target-check-threads" \
    cargo clippy -q -p insitubatch-wasm "${WASM[@]}" --no-default-features --features threads --lib "${W[@]}"
# The files generated from the Rust types (tools/boundary-types: the reports' and options'
# TypeScript and Python types, the dataclasses' fields, the book's option reference) are
# current, and the generator's own tests pass.
check "boundary types: generated files current" cargo test -q -p insitubatch-boundary-types
# rustdoc: broken links and bad doc syntax fail, on the host and for the wasm32 API. All
# features, so the feature-gated public modules (core's `testing`) are documented and linkable.
check "doc (host, all crates)" env RUSTDOCFLAGS="-D warnings" cargo doc -q --no-deps --workspace --all-features
check "doc (wasm32, wasm)" env RUSTDOCFLAGS="-D warnings" cargo doc -q --no-deps -p insitubatch-wasm "${WASM[@]}"

# The dependency policy (deny.toml, docs/security.md "Releases and dependencies"): licenses,
# duplicate versions, banned crates, crates.io as the only source, over Cargo.lock (--locked:
# cargo metadata may fetch a manifest it lacks from crates.io). Not the advisories: their database is a GitHub repository, which CI cannot reach. Last, so that on a
# cold machine scripts/warm.sh has built cargo-deny while the checks above ran.
cargo_deny() {
    source scripts/tools.sh
    ib_tool cargo-deny || return 1
    "$IB_CARGO_DENY" --locked --workspace --log-level error --config deny.toml check bans licenses sources
}
check "cargo-deny: licenses, bans, duplicates, sources" cargo_deny

if [ ${#failed[@]} -gt 0 ]; then
    echo "checks: ${#failed[@]} of $n failed: ${failed[*]}" >&2
    exit 1
fi
echo "checks: all $n passed"
