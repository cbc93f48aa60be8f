# shellcheck shell=bash
# Source me (after scripts/env.sh): the pinned tools the test scripts install, each by one
# function that installs it only when it is missing or at another version. Each holds its own
# lock (flock), so scripts/warm.sh can install them in the background while the builds run,
# and a foreground caller waits for that install and then finds it done.
#   ib_tool cargo-fuzz | wasm-bindgen | mdbook | cargo-deny | cargo-cyclonedx | npm | just | uv | chromium
# The cargo installs build in one target dir of their own, $INSITUBATCH_CACHE/target-tools (the
# workspace's would make its builds wait on its lock), at opt-level 1: the three tools share
# most of their dependencies (syn, serde, clap ...), which then compile once, and opt-level 1
# compiles faster. Measured on 2 cores (2026-12-06): 397 CPU-s for the three, against 486 in
# temporary dirs at opt-level 3; that wasm-bindgen wrote the glue of our 8.3 MB module in
# 0.98 s, against 1.17 s. The dir keeps about 800 MB, which a version bump builds on.

IB_CARGO_FUZZ_VERSION=0.13.2
IB_CARGO_FUZZ_ROOT="$INSITUBATCH_CACHE/cargo-fuzz-$IB_CARGO_FUZZ_VERSION"
IB_WASM_BINDGEN_VERSION=0.2.130   # must equal the wasm-bindgen crate pinned in wasm/Cargo.toml
IB_MDBOOK_VERSION=0.5.4
IB_MDBOOK="$INSITUBATCH_CACHE/tools/bin/mdbook"
# The supply chain's cargo tools (docs/security.md): cargo-deny checks the dependency policy
# (deny.toml) in scripts/check.sh; cargo-cyclonedx writes the crates' SBOMs in
# scripts/release.sh. Both into $IB_SUPPLY_BIN.
IB_CARGO_DENY_VERSION=0.20.2
IB_CARGO_CYCLONEDX_VERSION=0.5.9
IB_SUPPLY_ROOT="$INSITUBATCH_CACHE/tools/supply"
IB_CARGO_DENY="$IB_SUPPLY_ROOT/bin/cargo-deny"
IB_CARGO_CYCLONEDX="$IB_SUPPLY_ROOT/bin/cargo-cyclonedx"
# The npm tools (playwright-core, binaryen's wasm-opt, typescript: tools/npm/package.json says
# what each is for), pinned with their integrity hashes by tools/npm/package-lock.json and
# installed by `npm ci` into a folder keyed by the hash of that package.json and lockfile:
# a changed pin installs anew beside the old (a run of another checkout keeps its own), and an
# unchanged one never runs npm. Users take them from $IB_NPM_PREFIX/node_modules.
IB_NPM_PREFIX="$INSITUBATCH_CACHE/tools/npm-$(cat "$IB_ROOT/tools/npm/package.json" \
    "$IB_ROOT/tools/npm/package-lock.json" | sha256sum | cut -c1-16)"
# just, the task runner of the justfile (`just --list`; scripts/just runs this one): the
# PyPI wheel rust-just, pinned with its hashes in tools/just/requirements.txt, in a venv keyed
# by that file's hash. The wheel, not `cargo install just`: on a cold machine it is one 2.4 MB
# download that installs in seconds, where `cargo install` compiles just and its dependency
# tree from source on the two cores that a cold CI run needs for its own builds.
IB_JUST_VENV="$INSITUBATCH_CACHE/tools/just-$(sha256sum "$IB_ROOT/tools/just/requirements.txt" | cut -c1-16)"
IB_JUST="$IB_JUST_VENV/bin/just"
# uv, which makes the Python environments (scripts/pyenv.sh) from the locks in tools/python/:
# the PyPI wheel, pinned with its hashes in tools/uv/requirements.txt, installed as just is.
IB_UV_VENV="$INSITUBATCH_CACHE/tools/uv-$(sha256sum "$IB_ROOT/tools/uv/requirements.txt" | cut -c1-16)"
IB_UV="$IB_UV_VENV/bin/uv"

ib_tool() {
    local name="$1" fn
    case "$name" in
        cargo-fuzz | wasm-bindgen | mdbook | cargo-deny | cargo-cyclonedx | npm | just | uv | chromium)
            fn="_ib_tool_${name//-/_}" ;;
        *) echo "ib_tool: unknown tool '$name'" >&2; return 2 ;;
    esac
    mkdir -p "$INSITUBATCH_CACHE"
    ( flock 9 && "$fn" ) 9>"$INSITUBATCH_CACHE/.lock-tool-$name"
}

_ib_cargo_install() {
    CARGO_PROFILE_RELEASE_OPT_LEVEL=1 cargo install -q --target-dir "$INSITUBATCH_CACHE/target-tools" "$@" >&2
}

_ib_tool_cargo_fuzz() {
    [ -x "$IB_CARGO_FUZZ_ROOT/bin/cargo-fuzz" ] && return 0
    echo "installing cargo-fuzz $IB_CARGO_FUZZ_VERSION into $IB_CARGO_FUZZ_ROOT (about 1 min of CPU)" >&2
    _ib_cargo_install cargo-fuzz --version "$IB_CARGO_FUZZ_VERSION" --locked --root "$IB_CARGO_FUZZ_ROOT"
}

_ib_tool_wasm_bindgen() {
    local have
    have="$(PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH" wasm-bindgen --version 2>/dev/null || true)"
    [ "$have" = "wasm-bindgen $IB_WASM_BINDGEN_VERSION" ] && return 0
    echo "installing wasm-bindgen-cli $IB_WASM_BINDGEN_VERSION (about 3.5 min of CPU; --locked fails for this version)" >&2
    # No default features: they give the test runner's HTTP client TLS (ureq + rustls + ring),
    # and it only talks to chromedriver on loopback. 203 CPU-s against 226 (2026-12-06).
    _ib_cargo_install wasm-bindgen-cli --version "$IB_WASM_BINDGEN_VERSION" --no-default-features
}

_ib_tool_mdbook() {
    [ "$("$IB_MDBOOK" --version 2>/dev/null || true)" = "mdbook v$IB_MDBOOK_VERSION" ] && return 0
    echo "installing mdbook $IB_MDBOOK_VERSION into $(dirname "$(dirname "$IB_MDBOOK")") (about 2 min of CPU)" >&2
    _ib_cargo_install mdbook --version "$IB_MDBOOK_VERSION" --locked \
        --no-default-features --features search --root "$(dirname "$(dirname "$IB_MDBOOK")")"
}

_ib_tool_cargo_deny() {
    [ "$("$IB_CARGO_DENY" --version 2>/dev/null || true)" = "cargo-deny $IB_CARGO_DENY_VERSION" ] && return 0
    echo "installing cargo-deny $IB_CARGO_DENY_VERSION into $IB_SUPPLY_ROOT" >&2
    # Its manifest asks for fat LTO and one codegen unit (a smaller binary for its releases):
    # minutes of single-threaded linking here for a tool that runs for seconds.
    CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
        _ib_cargo_install cargo-deny --version "$IB_CARGO_DENY_VERSION" --locked --root "$IB_SUPPLY_ROOT"
}

_ib_tool_cargo_cyclonedx() {
    # Its version is the subcommand's (the binary alone answers only `cargo-cyclonedx cyclonedx`).
    [ "$("$IB_CARGO_CYCLONEDX" cyclonedx --version 2>/dev/null || true)" = "cargo-cyclonedx-cyclonedx $IB_CARGO_CYCLONEDX_VERSION" ] \
        && return 0
    echo "installing cargo-cyclonedx $IB_CARGO_CYCLONEDX_VERSION into $IB_SUPPLY_ROOT" >&2
    _ib_cargo_install cargo-cyclonedx --version "$IB_CARGO_CYCLONEDX_VERSION" --locked --root "$IB_SUPPLY_ROOT"
}

_ib_tool_npm() {
    # The marker is written last: an install cut short is done again (npm ci starts from an
    # empty node_modules).
    [ -f "$IB_NPM_PREFIX/.ib-installed" ] && return 0
    echo "installing the npm tools of tools/npm/package-lock.json into $IB_NPM_PREFIX" >&2
    rm -rf "$IB_NPM_PREFIX"
    mkdir -p "$IB_NPM_PREFIX"
    cp "$IB_ROOT/tools/npm/package.json" "$IB_ROOT/tools/npm/package-lock.json" "$IB_NPM_PREFIX/"
    # npm's cache is the one the other npm installs share; --prefer-offline takes what it
    # holds without asking the registry again (the lockfile's hashes still check it).
    # --omit=optional: cyclonedx-npm's optional XML and schema validators (libxmljs2, whose
    # install compiles libxml2 when its prebuilt binary cannot be fetched: 5 minutes here, for
    # an XML output this project does not write).
    (cd "$IB_NPM_PREFIX" && npm_config_cache="$INSITUBATCH_CACHE/npm-cache" \
        npm ci --omit=optional --prefer-offline --no-audit --no-fund --loglevel=error >&2) || return 1
    touch "$IB_NPM_PREFIX/.ib-installed"
}

_ib_tool_just() { _ib_wheel_tool just "$IB_JUST_VENV" rust-just; }
_ib_tool_uv() { _ib_wheel_tool uv "$IB_UV_VENV" uv; }

# _ib_wheel_tool NAME VENV PACKAGE: the wheel pinned with its hashes in tools/NAME/requirements.txt,
# installed into VENV (named by that file's hash) with --require-hashes; its command is
# VENV/bin/NAME. The marker is written last: an install cut short is done again.
_ib_wheel_tool() {
    local name="$1" venv="$2" package="$3" req="$IB_ROOT/tools/$1/requirements.txt"
    [ -f "$venv/.ib-installed" ] && [ -x "$venv/bin/$name" ] && return 0
    echo "installing $name ($(sed -n "s/^$package==\([^ ]*\).*/\1/p" "$req"), tools/$name/requirements.txt) into $venv" >&2
    # A venv needs Debian's python3-venv, which ib_prereqs installs.
    python3 -c 'import venv, ensurepip' 2>/dev/null || ib_prereqs || return 1
    rm -rf "$venv"
    python3 -m venv "$venv" \
        && "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
            --only-binary :all: --require-hashes -r "$req" >&2 \
        || { rm -rf "$venv"; return 1; }
    touch "$venv/.ib-installed"
}

# Debian's chromium and chromium-driver (playwright-core and wasm-bindgen-test drive them).
_ib_tool_chromium() {
    command -v chromium >/dev/null && command -v chromedriver >/dev/null && return 0
    echo "installing chromium and chromium-driver (Debian)" >&2
    local apt_get=(apt-get)
    [ "$(id -u)" = 0 ] || apt_get=(sudo apt-get)
    "${apt_get[@]}" update -qq >&2 \
        && DEBIAN_FRONTEND=noninteractive "${apt_get[@]}" install -y -qq chromium chromium-driver >/dev/null
}
