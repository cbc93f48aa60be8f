# shellcheck shell=bash
# Source me: the Python environments of the scripts, made by the pinned uv
# (tools/uv/requirements.txt, `ib_tool uv`) from the locks in tools/python/. Environment NAME is
# tools/python/NAME.in (what it is for, its Python on a `# python:` line, its direct
# dependencies) and NAME.txt, the lock scripts/lock.sh compiles from it (every version pinned
# with its hashes); its venv is $INSITUBATCH_CACHE/venv-NAME.
#   ib_venv NAME       creates venv-NAME, or brings it to the lock (`uv pip sync`: only what
#                      changed is installed or removed); prints its python. Keyed by the lock and
#                      the interpreter: nothing runs when both are as last time.
#   ib_test_venv       ib_venv test, exported as IB_PY: the fixtures, the loopback servers, the
#                      pytest suite with torch and JAX, maturin, mypy and the release tools.
#                      IB_TEST_VENV=DIR uses that venv instead, as is (scripts/overlay-venv.sh
#                      makes one that sees the shared venv's packages, so two checkouts can test
#                      their own builds side by side).
#   ib_python_version V  the interpreter of Python V (3.10 ... 3.13 from pyenv, else PATH;
#                      3.14t built by scripts/py314t.sh)
#   ib_uv ARGS         the pinned uv, with the project's settings (below)
# uv's cache is $INSITUBATCH_CACHE/uv, with CI's other caches. uv links the venvs' files to it
# (hard links: the same file system), so a package costs its disk once however many venvs and
# the cache hold it; what only the cache holds is bounded by ib_uv_cache_trim.

_IB_REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/env.sh
[ -n "${IB_ROOT:-}" ] || source "$_IB_REPO_ROOT/scripts/env.sh"
# shellcheck source=scripts/tools.sh
source "$_IB_REPO_ROOT/scripts/tools.sh"

ib_uv() {
    ib_tool uv || return 1
    # No user or system uv.toml changes what is installed; no interpreter is downloaded (uv's
    # managed Pythons come from GitHub: the interpreters are pyenv's and scripts/py314t.sh's).
    UV_CACHE_DIR="$INSITUBATCH_CACHE/uv" UV_NO_CONFIG=1 UV_PYTHON_DOWNLOADS=never \
        UV_NO_PROGRESS=1 "$IB_UV" "$@"
}

ib_test_venv() {
    if [ -n "${IB_TEST_VENV:-}" ]; then
        export IB_PY="$IB_TEST_VENV/bin/python"
        return 0
    fi
    IB_PY="$(ib_venv test)" || return 1
    export IB_PY
}

ib_venv() {
    local name="$1" dir="$_IB_REPO_ROOT/tools/python" v py
    # `# python: X.Y.Z[t]`: the venv's Python is the newest X.Y[t] here; Z is the oldest patch
    # release the lock is for (scripts/lock.sh).
    if [ ! -f "$dir/$name.txt" ] || ! v="$(sed -n 's/^# python: *//p' "$dir/$name.in" 2>/dev/null)" || [ -z "$v" ]; then
        echo "ib_venv: no environment '$name'; the environments are those of tools/python/*.in with a '# python:' line:" \
            "$(grep -l '^# python: ' "$dir"/*.in | xargs -n1 basename | sed 's/\.in$//' | tr '\n' ' ')" >&2
        return 2
    fi
    v="$(echo "${v%t}" | cut -d. -f1,2)${v##*[0-9]}"
    py="$(ib_python_version "$v")" || return 1
    if [ -z "$py" ]; then
        echo "ib_venv: no Python $v found for environment '$name' (pyenv or PATH); install it (tools/python/$name.in)" >&2
        return 1
    fi
    mkdir -p "$INSITUBATCH_CACHE"
    # One installer per venv at a time (scripts/warm.sh may be making it in the background): a
    # second caller waits here, then finds it current.
    ( flock 9 && _ib_venv_sync "$name" "$py" ) 9>"$INSITUBATCH_CACHE/.lock-venv-$name" >&2 || return 1
    echo "$INSITUBATCH_CACHE/venv-$name/bin/python"
}

_ib_venv_sync() {
    local name="$1" py="$2" lock="$_IB_REPO_ROOT/tools/python/$1.txt" venv="$INSITUBATCH_CACHE/venv-$1"
    local interp want start=$SECONDS
    interp="$("$py" -c 'import sys; print(sys.executable, sys.version.replace("\n", " "))')" || return 1
    want="$( { echo "$interp"; cat "$lock"; } | sha256sum | cut -c1-64)"
    [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.ib-lock" 2>/dev/null || true)" = "$want" ] && return 0
    # A venv of another interpreter (or none, or one made before uv) is made anew; one of this
    # interpreter is synced in place.
    if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.ib-interpreter" 2>/dev/null || true)" != "$interp" ]; then
        echo "venv-$name: creating $venv ($py)"
        rm -rf "$venv"
        ib_uv venv -q --python "$py" "$venv" || return 1
        echo "$interp" >"$venv/.ib-interpreter"
    fi
    # The marker goes first and comes back last: a sync cut short is done again. The wheel a
    # test script installed on top is gone after a sync; its marker with it.
    rm -f "$venv/.ib-lock" "$venv/.ib-python-build"
    echo "venv-$name: installing tools/python/$name.txt"
    # --compile-bytecode, as pip does: CI may run with PYTHONDONTWRITEBYTECODE=1, and without
    # .pyc files every Python start would compile torch's modules again.
    ib_uv pip sync -q --python "$venv/bin/python" --require-hashes --no-build --strict --compile-bytecode "$lock" \
        || return 1
    echo "$want" >"$venv/.ib-lock"
    echo "venv-$name: ready in $((SECONDS - start)) s"
    ib_uv_cache_trim
}

# What uv's cache holds that no venv uses (files with one link: a venv's files are hard links
# into it) is what a lock no longer pins, or a venv that was removed. Past this many bytes the
# cache is emptied (`uv cache clean`; the venvs keep their files): the next venv made from an
# unchanged lock then downloads again, the only cost. So the cache stays at the venvs' own size
# plus at most this. A file counts once its links have not changed for 30 minutes (-cmin), so
# what another venv's install (warm.sh runs two at once) has unpacked and not yet linked does not.
IB_UV_CACHE_SPARE_BYTES="${IB_UV_CACHE_SPARE_BYTES:-3000000000}"
ib_uv_cache_trim() {
    local cache="$INSITUBATCH_CACHE/uv" spare
    [ -d "$cache" ] || return 0
    spare="$(find "$cache" -type f -links 1 -cmin +30 -printf '%s\n' 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')"
    [ "$spare" -le "$IB_UV_CACHE_SPARE_BYTES" ] && return 0
    echo "uv cache: $((spare / 1000000)) MB in no venv (over $((IB_UV_CACHE_SPARE_BYTES / 1000000)) MB): emptying $cache" >&2
    ib_uv cache clean -q
}

# A wheel of python-bindings for interpreter $1 into folder $2 (more maturin arguments after
# them, e.g. --release), with the test venv's maturin. Linked by zig (the test venv's ziglang)
# against glibc 2.28's symbols and checked by maturin to be manylinux_2_28: the host's own
# toolchain would tag it manylinux_2_34 (Debian 12's glibc), which clusters of the RHEL 8 era
# cannot install. The wheels CI tests are these, so what is tested is what ships
# (scripts/release.sh).
ib_build_wheel() {
    local py="$1" out="$2"
    shift 2
    (cd "$_IB_REPO_ROOT/python-bindings" \
        && CARGO_ZIGBUILD_PYTHON_PATH="$IB_PY" "$(dirname "$IB_PY")/maturin" build -q --zig \
            --compatibility manylinux_2_28 --strip -i "$py" -o "$out" "$@")
}

# Where scripts/test-python.sh keeps the abi3 wheel it builds and tests; scripts/test-widget.sh
# installs the same one (`scripts/test-python.sh --build-only` makes it current).
ib_test_wheels() {
    local w="${IB_TEST_VENV:+$IB_TEST_VENV/wheels}"
    echo "${w:-$INSITUBATCH_CACHE/python-wheels}"
}

# Install wheel file(s) into the venv of python $1, replacing what is there, without their
# dependencies (the lock has them). --no-cache: a wheel built here is not kept in uv's cache
# (each build would add a copy); copied, not linked, from uv's temporary one.
ib_install_wheel() {
    local py="$1"
    shift
    ib_uv pip install -q --python "$py" --no-deps --reinstall --no-cache --link-mode copy "$@"
}

# The interpreter of Python $1: 3.14t is built by scripts/py314t.sh; 3.10 ... 3.13 are the
# newest of pyenv's, else PATH's (not pyenv's shims). Prints nothing when there is none.
ib_python_version() {
    local v="$1" py
    if [ "$v" = 3.14t ]; then
        bash "$_IB_REPO_ROOT/scripts/py314t.sh"
        return
    fi
    py="$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/python"$v" 2>/dev/null | sort -V | tail -n1)"
    [ -n "$py" ] || py="$(PATH="$(echo "$PATH" | tr ':' '\n' | grep -v '/shims$' | paste -sd:)" command -v "python$v" || true)"
    echo "$py"
}
