#!/usr/bin/env bash
# Build the Python bindings (python-bindings/) into the test venv and run their pytest suite
# against the zarr-python fixtures. Idempotent: re-runs skip what is already installed/built.
#   IB_PYTHON_TORCH=0   skip installing torch (torch tests are skipped)
#   IB_PYTHON_JAX=0     skip installing jax (jax tests are skipped)
#   IB_PYTHON_RELEASE=1 build the extension in release mode
#   IB_ANCHOR=0         skip building the anchor's venv (the parity tests then skip)
#   IB_PYTHON_TF=0      skip the TensorFlow venv (scripts/framework-venv.sh tf) and its tests
#   IB_PYTHON_VERSIONS="3.10 3.12 3.13" the other Pythons the same abi3 wheel is tested on
#                       (numpy + zarr-python + pytest venvs; "" skips them)
#   IB_PYTHON_RAY=0     skip the Ray Train venv (scripts/framework-venv.sh ray) and its example's test
#   IB_PYTHON_FREE_THREADED=0 skip free-threaded CPython 3.14t (scripts/py314t.sh builds it
#                       from source once, ~10-30 min on 2 cores; cached after that)
#   extra args go to every pytest run
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
source scripts/env.sh
source scripts/pyenv.sh
ib_test_venv
VENV="$(dirname "$(dirname "$IB_PY")")"
PB="$ROOT/python-bindings"

# 1. Test requirements (+ torch, + jax), keyed on the requirement files' hash (scripts/pyenv.sh;
#    scripts/warm.sh has usually installed them in the background).
ib_test_python_reqs

# 2. The extension, keyed on every input of the build (Rust sources, manifests, Python package).
profile=dev
[ "${IB_PYTHON_RELEASE:-0}" = 1 ] && profile=release
build_hash="$( { echo "$profile manylinux_2_28"; declare -f ib_build_wheel; cat Cargo.toml Cargo.lock; \
    find core native python-bindings/src python-bindings/python python-bindings/Cargo.toml python-bindings/pyproject.toml \
        -type f \( -name '*.rs' -o -name '*.toml' -o -name '*.py' -o -name '*.pyi' -o -name py.typed \) -print0 \
        | sort -z | xargs -0 sha256sum; } | sha256sum | cut -d' ' -f1)"
wheels="${IB_TEST_VENV:+$IB_TEST_VENV/wheels}"
wheels="${wheels:-$INSITUBATCH_CACHE/python-wheels}"
if [ "$(cat "$VENV/.ib-python-build" 2>/dev/null || true)" != "$build_hash" ] \
    || ! "$IB_PY" -c 'import insitubatch_rs._native' 2>/dev/null \
    || ! compgen -G "$wheels/insitubatch_rs-*.whl" >/dev/null; then
    echo "test-python: building insitubatch_rs ($profile)"
    rel=()
    [ "$profile" = release ] && rel=(--release)
    # A wheel (not `maturin develop`) so no .so lands in the source tree; built aside, so a
    # failed build leaves the last good wheel in place.
    rm -rf "$wheels.new"
    ib_build_wheel "$IB_PY" "$wheels.new" "${rel[@]}"
    rm -rf "$wheels"
    mv "$wheels.new" "$wheels"
    "$IB_PY" -m pip install -q --no-deps --force-reinstall "$wheels"/insitubatch_rs-*.whl
    echo "$build_hash" >"$VENV/.ib-python-build"
fi

# 3. Fixtures (the generator skips work when they are current).
export INSITUBATCH_FIXTURES="${INSITUBATCH_FIXTURES:-$INSITUBATCH_CACHE/fixtures}"
"$IB_PY" tests/fixtures/make_fixtures.py "$INSITUBATCH_FIXTURES" >/dev/null

# 4. The anchor itself (insitubatch 0.2.0 on Python 3.12, cached venv keyed by its
#    requirements), so test_anchor_parity.py compares against it instead of skipping.
#    IB_ANCHOR=0 leaves it out (the parity tests then skip, saying so).
if [ "${IB_ANCHOR:-1}" != 0 ]; then
    IB_ANCHOR_PY="$(bash "$ROOT/bench/setup_anchor.sh")"
    export IB_ANCHOR_PY
fi

# 5. Tests (run from outside the source tree so the installed package is the one imported).
cd "$PB/tests"
rc=0
# IB_FRAMEWORKS=1: torch and JAX are installed here, so a test missing them fails under CI
# (the other Pythons' venvs below have neither, and their tests skip).
fw=1
[ "${IB_PYTHON_TORCH:-1}" = 0 ] || [ "${IB_PYTHON_JAX:-1}" = 0 ] && fw=0
IB_FRAMEWORKS=$fw "$IB_PY" -m pytest -q -rs -p no:cacheprovider "$@" . || rc=$?

# 5b. Types: mypy over the package (pyproject.toml [tool.mypy]) and stubtest, which checks
#     _native.pyi against the compiled extension installed above. mypy (pinned in
#     requirements-typing.txt) goes into a folder of its own keyed by that file and this
#     Python, beside the test venv, so the venv's own key stays as it is.
typing_key="$(cat "$PB/requirements-typing.txt" <("$IB_PY" -VV) | sha256sum | cut -c1-16)"
TYPING="$INSITUBATCH_CACHE/typing-$typing_key"
if [ ! -f "$TYPING/.complete" ]; then
    rm -rf "$TYPING"
    "$IB_PY" -m pip install -q --no-deps --target "$TYPING" -r "$PB/requirements-typing.txt"
    touch "$TYPING/.complete"
fi
echo "== test-python: types (mypy over the package; stubtest: _native.pyi against the extension)"
(cd "$PB" && PYTHONPATH="$TYPING" "$IB_PY" -m mypy --cache-dir "$INSITUBATCH_CACHE/mypy-cache") \
    || { echo "test-python: mypy found errors (above)" >&2; rc=1; }
PYTHONPATH="$TYPING" "$IB_PY" -m mypy.stubtest --mypy-config-file "$PB/pyproject.toml" insitubatch_rs._native \
    || { echo "test-python: _native.pyi differs from the compiled extension (above)" >&2; rc=1; }

# 6. The same abi3 wheel on the other supported Pythons, each in its own cached venv from
#    tests/requirements-py<v>.txt (no torch/JAX: those tests skip). Where that venv has
#    zarr-python 3, it rewrites the test stores with its own zarr first.
other_python() {
    local v="$1" py venv want fix zarr_v
    shift
    py="$(ib_python_version "$v")"
    if [ -z "$py" ]; then
        echo "test-python: no Python $v found (pyenv or PATH); install it, or leave it out with IB_PYTHON_VERSIONS" >&2
        return 1
    fi
    venv="$INSITUBATCH_CACHE/venv-py$v"
    want="$( { "$py" -VV; cat "$PB/tests/requirements-py$v.txt"; } | sha256sum | cut -d' ' -f1)"
    if [ "$(cat "$venv/.ib-python-req" 2>/dev/null || true)" != "$want" ] || [ ! -x "$venv/bin/python" ]; then
        echo "test-python: creating $venv"
        rm -rf "$venv" "$INSITUBATCH_CACHE/fixtures-py$v"
        "$py" -m venv "$venv" || return 1
        "$venv/bin/python" -m pip install -q -r "$PB/tests/requirements-py$v.txt" || { rm -rf "$venv"; return 1; }
        echo "$want" >"$venv/.ib-python-req"
    fi
    if [ "$(cat "$venv/.ib-python-build" 2>/dev/null || true)" != "$build_hash" ] \
        || ! "$venv/bin/python" -c 'import insitubatch_rs._native' 2>/dev/null; then
        "$venv/bin/python" -m pip install -q --no-deps --force-reinstall "$wheels"/insitubatch_rs-*.whl \
            || return 1
        echo "$build_hash" >"$venv/.ib-python-build"
    fi
    fix="$INSITUBATCH_FIXTURES"
    zarr_v="$("$venv/bin/python" -c 'import zarr; print(zarr.__version__)' 2>/dev/null || true)"
    if [ "${zarr_v%%.*}" = 3 ]; then
        fix="$INSITUBATCH_CACHE/fixtures-py$v"
        "$venv/bin/python" "$ROOT/tests/fixtures/make_fixtures.py" "$fix" >/dev/null || return 1
    fi
    echo "== test-python: $("$venv/bin/python" -V), stores written by zarr-python $(python_zarr "$fix")"
    INSITUBATCH_FIXTURES="$fix" "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider "$@" .
}
# 7. TensorFlow in a venv of its own (scripts/framework-venv.sh tf: tensorflow-cpu on Python 3.12, cached
#    and keyed by tests/requirements-tf.txt), with the same wheel, running the TF tests only.
#    IB_EXPECT_TF=1 there: a TensorFlow that fails to import is a failure, not a skip. Extra
#    args that select none of them (pytest's exit 5) are not a failure.
# The python of framework NAME's venv (scripts/framework-venv.sh), with this run's wheel in it.
framework_python() {
    local py venv
    py="$(bash "$ROOT/scripts/framework-venv.sh" "$1")" || return 1
    venv="$(dirname "$(dirname "$py")")"
    if [ "$(cat "$venv/.ib-python-build" 2>/dev/null || true)" != "$build_hash" ] \
        || ! "$py" -c 'import insitubatch_rs._native' 2>/dev/null; then
        "$py" -m pip install -q --no-deps --force-reinstall "$wheels"/insitubatch_rs-*.whl >&2 || return 1
        echo "$build_hash" >"$venv/.ib-python-build"
    fi
    echo "$py"
}
tf_tests() {
    local py
    py="$(framework_python tf)" || return 1
    echo "== test-python: TensorFlow $("$py" -c 'import importlib.metadata as m; print(m.version("tensorflow-cpu"))') on $("$py" -V)"
    local code=0
    IB_EXPECT_TF=1 TF_CPP_MIN_LOG_LEVEL=2 "$py" -m pytest -q -rs -p no:cacheprovider "$@" \
        test_tf.py test_readme.py::test_docs_tensorflow_block test_migration.py::test_readme_framework_hand_off_tf || code=$?
    [ "$code" = 0 ] || [ "$code" = 5 ]
}
if [ "${IB_PYTHON_TF:-1}" != 0 ]; then
    tf_tests "$@" || rc=1
fi

# 8. Ray Train in a venv of its own (scripts/framework-venv.sh ray: ray[train] + torch on Python 3.12,
#    cached and keyed by tests/requirements-ray.txt), with the same abi3 wheel: runs
#    examples/ray_train.py (a TorchTrainer, 2 CPU workers as local processes) through
#    test_ray_train.py. IB_EXPECT_RAY=1 there: a Ray that fails to import is a failure.
ray_tests() {
    local py code=0
    py="$(framework_python ray)" || return 1
    echo "== test-python: Ray $("$py" -c 'import ray; print(ray.__version__)') on $("$py" -V)"
    IB_EXPECT_RAY=1 "$py" -m pytest -q -rs -p no:cacheprovider "$@" test_ray_train.py || code=$?
    [ "$code" = 0 ] || [ "$code" = 5 ]
}
if [ "${IB_PYTHON_RAY:-1}" != 0 ]; then
    ray_tests "$@" || rc=1
fi

# 9. Free-threaded CPython 3.14t (scripts/py314t.sh: built from source once, then cached), which
#    cannot load the abi3 wheel: a cp314t wheel of its own (maturin picks a version-specific
#    build for it from the same abi3 features), rebuilt when the build inputs change, in a venv
#    keyed by tests/requirements-py3.14t.txt. The suite runs with PYTHON_GIL=0 and
#    IB_EXPECT_FREE_THREADED=1, so an extension that turned the GIL back on fails
#    test_threads.py; torch/JAX/zarr-python are not there (those tests skip).
free_threaded_tests() {
    local py venv want ft_wheels rel=()
    [ "$profile" = release ] && rel=(--release)
    py="$(bash "$ROOT/scripts/py314t.sh")" || return 1
    venv="$INSITUBATCH_CACHE/venv-py3.14t"
    want="$( { "$py" -VV; cat "$PB/tests/requirements-py3.14t.txt"; } | sha256sum | cut -d' ' -f1)"
    if [ "$(cat "$venv/.ib-python-req" 2>/dev/null || true)" != "$want" ] || [ ! -x "$venv/bin/python" ]; then
        echo "test-python: creating $venv"
        rm -rf "$venv"
        "$py" -m venv "$venv" || return 1
        "$venv/bin/python" -m pip install -q -r "$PB/tests/requirements-py3.14t.txt" || { rm -rf "$venv"; return 1; }
        echo "$want" >"$venv/.ib-python-req"
    fi
    ft_wheels="$wheels-ft"
    if [ "$(cat "$venv/.ib-python-build" 2>/dev/null || true)" != "$build_hash" ] \
        || ! PYTHON_GIL=0 "$venv/bin/python" -c 'import insitubatch_rs._native' 2>/dev/null; then
        echo "test-python: building insitubatch_rs ($profile) for $("$venv/bin/python" -V) (free-threaded)"
        rm -rf "$ft_wheels.new"
        ib_build_wheel "$venv/bin/python" "$ft_wheels.new" "${rel[@]}" || return 1
        rm -rf "$ft_wheels"
        mv "$ft_wheels.new" "$ft_wheels"
        "$venv/bin/python" -m pip install -q --no-deps --force-reinstall "$ft_wheels"/insitubatch_rs-*cp314t*.whl \
            || return 1
        echo "$build_hash" >"$venv/.ib-python-build"
    fi
    echo "== test-python: $("$venv/bin/python" -VV | head -n1), GIL off (PYTHON_GIL=0)"
    PYTHON_GIL=0 IB_EXPECT_FREE_THREADED=1 "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider "$@" .
}
python_zarr() { "$IB_PY" -c 'import json, sys; print(json.load(open(sys.argv[1] + "/manifest.json"))["zarr_python"])' "$1"; }
for v in ${IB_PYTHON_VERSIONS-3.10 3.12 3.13}; do
    other_python "$v" "$@" || rc=1
done
# Last: on a cold machine scripts/warm.sh may still be building 3.14t in the background.
if [ "${IB_PYTHON_FREE_THREADED:-1}" != 0 ]; then
    free_threaded_tests "$@" || rc=1
fi
exit "$rc"
