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
    local venv="$cache/venv-test"
    local req="$_IB_REPO_ROOT/tests/fixtures/requirements.txt"
    local want have
    want="$(sha256sum "$req" | cut -d' ' -f1)" || return 1
    have="$(cat "$venv/.req-hash" 2>/dev/null || true)"
    if [ "$want" != "$have" ] || [ ! -x "$venv/bin/python" ]; then
        mkdir -p "$cache"
        rm -rf "$venv"
        python3 -m venv "$venv" || return 1
        "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
        "$venv/bin/python" -m pip install -q -r "$req" || { rm -rf "$venv"; return 1; }
        echo "$want" >"$venv/.req-hash"
    fi
    export IB_PY="$venv/bin/python"
}
