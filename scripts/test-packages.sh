#!/usr/bin/env bash
# The packages as users install them, outside this repo (scripts/release.sh checks the wheels,
# the crates and `npm publish --dry-run`; this script, what a user builds or bundles from them):
#   1. Python: the sdist maturin builds, made into a wheel by pip through maturin's PEP 517
#      backend (without build isolation: see below), installed with its dependencies (from
#      PyPI) into a clean venv in a temp dir and used from a script run there
#      (tests/packages/use_wheel.py). Checked again only when its inputs changed since it
#      last passed;
#   2. npm: `npm pack` of js/ (with the js/pkg wasm builds) installed into a clean folder
#      beside the pinned typescript, vite, webpack, webpack-cli and playwright-core of
#      tests/packages/js/package-lock.json: a Node script there imports it by name and checks
#      one epoch row by row against the fixture's values (path, file:// and loopback HTTP),
#      and a second epoch on its thread and through `openInWorker`; tsc --noEmit (strict)
#      type-checks examples against the installed index.d.ts as a Node and as a bundler
#      project, and must reject a wrong knob type; the same page (tests/packages/js/web/) is
#      bundled by Vite and by webpack 5, with no settings for the package and no warnings,
#      and headless Chromium reads the same batches with each over loopback HTTP, on the page
#      and through `openInWorker` with no workerUrl, after forced traps too.
#      Needs js/pkg built (scripts/test-wasm.sh --build-only).
# Needs the fixtures (INSITUBATCH_FIXTURES): run after scripts/test-python.sh, as scripts/test.sh does.
#   scripts/test-packages.sh                  # every section
#   scripts/test-packages.sh npm              # some of them: python, npm
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
source scripts/env.sh
source scripts/pyenv.sh
source scripts/tools.sh
ib_test_venv
FIXTURES="${INSITUBATCH_FIXTURES:-$INSITUBATCH_CACHE/fixtures}"
STORE="$FIXTURES/v3_zstd"
SECTIONS=" ${*:-python npm} "
for s in $SECTIONS; do
    case "$s" in python | npm) ;; *) echo "unknown section $s (python, npm)" >&2; exit 2 ;; esac
done
want() { [[ "$SECTIONS" == *" $1 "* ]]; }
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
passed=0

# `npm pack` of js/ installed in a clean folder as a user installs it, then
# tests/packages/js/ run there: Node, tsc (two projects and a must-fail file), Vite and
# webpack builds + Chromium. The app's tools are pinned, with their dependencies, by
# tests/packages/js/package-lock.json (npm ci); npm's cache is $INSITUBATCH_CACHE/npm-cache,
# so a warm run downloads nothing.

# Prints what the npm checks lack (nothing when all is there); installs Debian's chromium.
npm_missing_prereq() {
    node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 19) ? 0 : 1)' 2>/dev/null \
        || { echo "Node >= 20.19 (Vite 7)"; return; }
    command -v npm >/dev/null || { echo "npm"; return; }
    [ -f js/pkg/node/insitubatch_wasm_bg.wasm ] && [ -f js/pkg/web/insitubatch_wasm_bg.wasm ] \
        || { echo "js/pkg (run scripts/test-wasm.sh --build-only)"; return; }
    [ -f "$FIXTURES/manifest.json" ] || { echo "the fixtures in $FIXTURES (tests/fixtures/make_fixtures.py)"; return; }
    ib_tool chromium || echo "chromium"
}

# `npm pack` of js/ into $WORK; fails unless the tarball lists what users need. Prints its path.
npm_pack_checked() {
    local tgz listing f
    tgz="$WORK/$(cd js && npm pack --silent --pack-destination "$WORK")"
    listing="$(tar tzf "$tgz")"
    echo "npm pack: $(basename "$tgz"), $(du -k "$tgz" | cut -f1) KiB, $(wc -l <<<"$listing") files" >&2
    # Among them what the checks below do not load: the license, the threaded build and web-s3.
    for f in package.json LICENSE README.md index.d.ts src/index.js src/web.js src/web-engine.js src/worker.js src/worker-core.js \
        src/worker-web.js src/worker-node.js src/web-threads.js src/fetch-worker.js \
        src/web-engine-core.js src/web-s3.js src/web-s3-engine.js src/worker-web-s3.js \
        src/node-threads.js src/node-thread-pool.js src/node-thread.js threads.d.ts pkg/node-threads/insitubatch_wasm.js \
        pkg/node/package.json pkg/web/insitubatch_wasm_bg.wasm pkg/web-threads/insitubatch_wasm_bg.wasm \
        pkg/web-s3/insitubatch_wasm_bg.wasm; do
        grep -qx "package/$f" <<<"$listing" || { echo "FAIL: $tgz lacks $f" >&2; return 1; }
    done
    echo "$tgz"
}

# In the app folder (the cwd): tsc on the Node project (example.ts and example-node.ts clean,
# type-error.ts exactly its one marked error, so a broken setup cannot pass) and the bundler
# project (example.ts, example-web.ts), then the Vite and webpack builds of web/main.js, each
# of which must say nothing but what it built (a warning fails). The local bins, never
# `npx NAME` (which would fetch a package so named).
npm_app_types_and_build() {
    local out want="type-error.ts(6,3): error TS2322: Type 'string' is not assignable to type 'number'."
    echo "tsc --noEmit (strict): example.ts, example-node.ts and type-error.ts as a Node project (@types/node)"
    if out="$(node_modules/.bin/tsc -p tsconfig.json)"; then
        echo "FAIL: tsc accepted type-error.ts (batchSize: '32')" >&2; return 1
    fi
    [ "$out" = "$want" ] || { echo "FAIL: tsc, want only: $want; got:" >&2; echo "$out" >&2; return 1; }
    echo "tsc: example.ts and example-node.ts clean; type-error.ts refused as expected (TS2322, batchSize: '32')"
    echo "tsc --noEmit (strict): example.ts and example-web.ts as a bundler project (DOM)"
    node_modules/.bin/tsc -p tsconfig.web.json
    out="$(node_modules/.bin/vite build --logLevel warn 2>&1)" || { echo "$out" >&2; echo "FAIL: vite build" >&2; return 1; }
    [ -z "$out" ] || { echo "$out" >&2; echo "FAIL: vite build warned" >&2; return 1; }
    echo "vite build: $(cd dist && find . -type f | sort | tr '\n' ' ')"
    out="$(node_modules/.bin/webpack --stats errors-warnings 2>&1)" || { echo "$out" >&2; echo "FAIL: webpack build" >&2; return 1; }
    grep -q "compiled successfully" <<<"$out" || { echo "$out" >&2; echo "FAIL: webpack build warned" >&2; return 1; }
    echo "webpack build: $(cd dist-webpack && find . -type f | sort | tr '\n' ' ')"
}

ib_npm_package_checks() {
    local missing app="$WORK/npm-app" tgz
    missing="$(npm_missing_prereq)"
    if [ -n "$missing" ]; then
        if ib_under_ci; then echo "FAIL: npm package checks need $missing (CI is set)" >&2; exit 1; fi
        echo "npm: SKIPPED, $missing is missing"
        return
    fi
    export npm_config_cache="$INSITUBATCH_CACHE/npm-cache"
    tgz="$(npm_pack_checked)"
    mkdir -p "$app"
    cp tests/packages/js/package.json tests/packages/js/package-lock.json "$app/"
    # The tools exactly as locked, then the tarball beside them (not saved: the lock stays as is).
    (cd "$app" && npm ci --prefer-offline --no-audit --no-fund --loglevel=error \
        && npm install --prefer-offline --no-audit --no-fund --loglevel=error --no-save "$tgz")
    cp -r tests/packages/js/use-package.mjs tests/packages/js/*.ts tests/packages/js/tsconfig*.json \
        tests/packages/js/webpack.config.js tests/packages/js/web/. "$app/"
    (cd "$app" && npm_app_types_and_build)
    passed=$((passed + 4))
    IB_PY="$IB_PY" node tests/packages/js/check.mjs "$app" "$FIXTURES"
    passed=$((passed + 5))
}

# A clean venv in the temp dir, the package installed from $1 with its dependencies, and the
# user script run from there (not from the repo, so only the install can be imported).
use_python_package() {
    local what="$1" venv="$WORK/venv-$2"
    "$IB_PY" -m venv "$venv"
    "$venv/bin/python" -m pip install -q "$what"
    (cd "$WORK" && cp "$ROOT/tests/packages/use_wheel.py" . && "$venv/bin/python" use_wheel.py "$STORE")
    passed=$((passed + 1))
}

if want python; then
    echo "== Python: the sdist in a clean venv (compiles the extension)"
    sdist_dir="$INSITUBATCH_CACHE/python-sdist"
    sdist_hash="$( { echo "dev zig manylinux_2_28"; find core native object python-bindings/src python-bindings/python -type f -print0 | sort -z | xargs -0 sha256sum; \
        cat Cargo.toml Cargo.lock python-bindings/Cargo.toml python-bindings/pyproject.toml; } | sha256sum | cut -d' ' -f1)"
    if [ "$(cat "$sdist_dir/.passed" 2>/dev/null || true)" = "$sdist_hash" ]; then
        echo "sdist: unchanged since it last passed (skipped: $sdist_dir/.passed)"
    else
        rm -rf "$sdist_dir" && mkdir -p "$sdist_dir"
        (cd python-bindings && "$(dirname "$IB_PY")/maturin" sdist -o "$sdist_dir")
        sdist="$(ls "$sdist_dir"/insitubatch_rs-*.tar.gz)"
        # The sdist built into a wheel by maturin's PEP 517 backend, as pip does for a user,
        # in the dev profile and with the zig linker of the tested wheels (scripts/pyenv.sh
        # ib_build_wheel), but without build isolation: the backend is then the test venv's
        # maturin, the one that built those wheels. The zig linker wrapper maturin writes names
        # maturin's own path, and cargo hashes the linker into every crate's fingerprint: from
        # pip's isolated build env (a new /tmp/pip-build-env-* each time) all ~290 crates
        # compiled again (345 CPU-s; 216 s of the cold CI run of 2026-12-06), and
        # CARGO_TARGET_DIR's builds were then stale for the next wheel build. Now cargo finds
        # them fresh: it keys a workspace's crates by their path within the workspace, so ours
        # too when the tested wheel was built from these sources (24 s, measured the same day).
        # It still looks up every source file the last build read, so a file missing from the
        # sdist makes it compile, and fail, here. Then the wheel is installed as a user's pip
        # would. (The backend runs `maturin` from PATH: the test venv's first. --no-cache-dir:
        # pip would keep the wheel and take it next time instead of building.)
        PATH="$(dirname "$IB_PY"):$PATH" MATURIN_PEP517_ARGS="--profile dev --zig --compatibility manylinux_2_28" \
            CARGO_ZIGBUILD_PYTHON_PATH="$IB_PY" "$IB_PY" -m pip wheel -q --no-cache-dir --no-build-isolation --no-deps \
            -w "$sdist_dir/wheel" "$sdist"
        use_python_package "$(ls "$sdist_dir"/wheel/insitubatch_rs-*.whl)" sdist
        echo "$sdist_hash" >"$sdist_dir/.passed"
    fi
fi
if want npm; then
    echo "== npm: the packed js/ package installed in a clean folder (Node, tsc, Vite and webpack + Chromium)"
    ib_npm_package_checks
fi
echo "test result: ok. $passed passed; 0 failed (packages)"
