# shellcheck shell=bash
# Source me, then call ib_test_venv: creates/refreshes the test venv (python3 = 3.11)
# at ${INSITUBATCH_CACHE:-$HOME/.cache/insitubatch}/venv-test from
# tests/fixtures/requirements.txt (re-installs when its hash changes), exports IB_PY.
# IB_TEST_VENV=DIR uses that venv instead, as is (scripts/overlay-venv.sh makes one that sees
# the shared venv's packages, so two checkouts can test their own builds side by side).

_IB_REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

ib_test_venv() {
    if [ -n "${IB_TEST_VENV:-}" ]; then
        export IB_PY="$IB_TEST_VENV/bin/python"
        return 0
    fi
    local cache="${INSITUBATCH_CACHE:-$HOME/.cache/insitubatch}"
    mkdir -p "$cache"
    # One installer at a time (scripts/warm.sh may be creating it in the background).
    ( flock 9 && _ib_test_venv_create "$cache/venv-test" ) 9>"$cache/.lock-venv-test" || return 1
    export IB_PY="$cache/venv-test/bin/python"
}

_ib_test_venv_create() {
    local venv="$1" req="$_IB_REPO_ROOT/tests/fixtures/requirements.txt" want
    want="$(sha256sum "$req" | cut -d' ' -f1)" || return 1
    [ "$want" = "$(cat "$venv/.req-hash" 2>/dev/null || true)" ] && [ -x "$venv/bin/python" ] && return 0
    rm -rf "$venv"
    python3 -m venv "$venv" || return 1
    "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
    "$venv/bin/python" -m pip install -q -r "$req" || { rm -rf "$venv"; return 1; }
    echo "$want" >"$venv/.req-hash"
}

# After ib_test_venv: the Python package's test and release requirements in the test venv, with torch and
# JAX unless IB_PYTHON_TORCH=0 / IB_PYTHON_JAX=0; keyed on the requirement files' hash.
ib_test_python_reqs() {
    local venv pb="$_IB_REPO_ROOT/python-bindings" reqs want r args=()
    venv="$(dirname "$(dirname "$IB_PY")")"
    reqs=("$pb/requirements-test.txt" "$pb/requirements-release.txt")
    [ "${IB_PYTHON_TORCH:-1}" = 0 ] || reqs+=("$pb/requirements-torch.txt")
    [ "${IB_PYTHON_JAX:-1}" = 0 ] || reqs+=("$pb/requirements-jax.txt")
    want="$(cat "${reqs[@]}" | sha256sum | cut -d' ' -f1)" || return 1
    for r in "${reqs[@]}"; do args+=(-r "$r"); done
    (
        flock 9
        [ "$(cat "$venv/.ib-python-req" 2>/dev/null || true)" = "$want" ] && exit 0
        echo "test-python: installing ${reqs[*]##*/}" >&2
        "$IB_PY" -m pip install -q "${args[@]}" >&2 && echo "$want" >"$venv/.ib-python-req"
    ) 9>"$venv/.lock-reqs"
}

# After ib_test_python_reqs: a wheel of python-bindings for interpreter $1 into folder $2 (more
# maturin arguments after them, e.g. --release). Linked by zig (the test venv's ziglang) against
# glibc 2.28's symbols and checked by maturin to be manylinux_2_28: the host's own toolchain
# would tag it manylinux_2_34 (Debian 12's glibc), which clusters of the RHEL 8 era cannot
# install. The wheels CI tests are these, so what is tested is what ships (scripts/release.sh).
ib_build_wheel() {
    local py="$1" out="$2"
    shift 2
    (cd "$_IB_REPO_ROOT/python-bindings" \
        && CARGO_ZIGBUILD_PYTHON_PATH="$IB_PY" "$(dirname "$IB_PY")/maturin" build -q --zig \
            --compatibility manylinux_2_28 --strip -i "$py" -o "$out" "$@")
}

# The newest interpreter of Python $1 (e.g. 3.10) from pyenv, else from PATH (not pyenv's
# shims); prints nothing when there is none.
ib_python_version() {
    local v="$1" py
    py="$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/python"$v" 2>/dev/null | sort -V | tail -n1)"
    [ -n "$py" ] || py="$(PATH="$(echo "$PATH" | tr ':' '\n' | grep -v '/shims$' | paste -sd:)" command -v "python$v" || true)"
    echo "$py"
}
