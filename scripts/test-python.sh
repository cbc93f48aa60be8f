#!/usr/bin/env bash
# The Python package (python-bindings/) built into a wheel and tested under pytest in its
# sessions: a Python version × a framework set, each in a venv that uv makes from its lock
# (scripts/pyenv.sh ib_venv; tools/python/NAME.in says what each holds). Idempotent: what is
# already installed or built is not done again.
#   scripts/test-python.sh [py=V[,V...]] [fw=F[,F...]] [profile=release] [PYTEST ARGS...]
#   scripts/test-python.sh --list        the sessions
#   scripts/test-python.sh --build-only  the test wheel only (scripts/test-widget.sh installs it)
# py= and fw= choose sessions (by default every one, in the order below: what CI runs); fw=none
# is the sessions without a framework. Through the task runner (with the loopback servers the
# store-object tests read): `just test-python py=3.12 fw=tf -k dataset`. profile=release builds
# the extension in release mode. IB_REFERENCE=0 leaves out the reference implementation's venv
# (the parity tests then skip, saying so). Other arguments go to every pytest run.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"

# The sessions: "NAME|PYTHON|FRAMEWORKS|VENV|WHAT". VENV is scripts/pyenv.sh's environment
# (tools/python/VENV.in and .txt); the same abi3 wheel goes into each but 3.14t's.
SESSIONS=(
    "3.11|3.11|torch,jax|test|the suite with torch and JAX installed (their tests fail, not skip, when missing); mypy and stubtest; parity with the reference implementation"
    "3.12-tf|3.12|tf|tf|TensorFlow's tests (test_tf.py and the docs' TensorFlow blocks): one framework per environment"
    "3.12-ray|3.12|ray|ray|Ray Train: examples/ray_train.py, a TorchTrainer on 2 local worker processes (test_ray_train.py)"
    "3.10|3.10|none|py3.10|the suite on the oldest supported Python (reads the stores 3.11's zarr-python wrote)"
    "3.12|3.12|none|py3.12|the suite; zarr-python 3 of 3.12 rewrites the test stores first"
    "3.13|3.13|none|py3.13|the suite; zarr-python 3 of 3.13 rewrites the test stores first; ml_dtypes without JAX"
    "3.14t|3.14t|none|py3.14t|free-threaded CPython, GIL off, its own cp314t wheel (scripts/py314t.sh builds the interpreter)"
)
field() { echo "$1" | cut -d'|' -f"$2"; }
list_sessions() {
    local s
    printf '%-9s %-6s %-10s %-8s %s\n' session py fw venv what
    for s in "${SESSIONS[@]}"; do
        printf '%-9s %-6s %-10s %-8s %s\n' "$(field "$s" 1)" "$(field "$s" 2)" "$(field "$s" 3)" "$(field "$s" 4)" "$(field "$s" 5)"
    done
}
# Whether comma list $1 shares a word with comma list $2.
overlaps() { [[ ",$2," =~ ,($(echo "$1" | tr ',' '|')), ]]; }

want_py="" want_fw="" profile=dev
PYTEST_ARGS=()
for a in "$@"; do
    case "$a" in
        --list) list_sessions; exit 0 ;;
        --build-only) build_only=1 ;;
        py=*) want_py="${a#py=}" ;;
        fw=*) want_fw="${a#fw=}" ;;
        profile=dev | profile=release) profile="${a#profile=}" ;;
        profile=*) echo "test-python: profile is dev or release, not '${a#profile=}'" >&2; exit 2 ;;
        *) PYTEST_ARGS+=("$a") ;;
    esac
done
# A word that names no session is a mistake, not an empty selection.
all_py="$(for s in "${SESSIONS[@]}"; do field "$s" 2; done | sort -uV | paste -sd,)"
all_fw="$(for s in "${SESSIONS[@]}"; do field "$s" 3; done | tr ',' '\n' | sort -u | paste -sd,)"
for v in ${want_py//,/ }; do
    overlaps "$v" "$all_py" || { echo "test-python: no session has py=$v; the Pythons: $all_py (scripts/test-python.sh --list)" >&2; exit 2; }
done
for f in ${want_fw//,/ }; do
    overlaps "$f" "$all_fw" || { echo "test-python: no session has fw=$f; the frameworks: $all_fw (scripts/test-python.sh --list)" >&2; exit 2; }
done
SELECTED=()
for s in "${SESSIONS[@]}"; do
    { [ -z "$want_py" ] || overlaps "$want_py" "$(field "$s" 2)"; } \
        && { [ -z "$want_fw" ] || overlaps "$want_fw" "$(field "$s" 3)"; } \
        && SELECTED+=("$(field "$s" 1)")
done
if [ ${#SELECTED[@]} -eq 0 ]; then
    echo "test-python: no session has py=$want_py and fw=$want_fw; the sessions:" >&2
    list_sessions >&2
    exit 2
fi
if [ -n "${build_only:-}" ]; then
    echo "== test-python: the test wheel ($profile build; --build-only)"
else
    echo "== test-python: sessions ${SELECTED[*]} ($profile build)"
fi

source scripts/env.sh
source scripts/pyenv.sh
# 1. The test venv (venv-test): the fixtures, maturin and zig build the wheel whichever sessions run.
ib_test_venv
VENV="$(dirname "$(dirname "$IB_PY")")"
PB="$ROOT/python-bindings"

# 2. The extension, keyed on every input of the build (Rust sources, manifests, Python package,
# the widget's front end: scripts/www.sh ib_widget_assets, which every wheel ships).
source scripts/www.sh
ib_widget_assets
# The checkout's path too: maturin's SBOM names the crates' source folders, so a wheel built in
# another checkout sharing this cache (a worktree beside CI's clone) is not this one's.
build_hash="$( { echo "$profile manylinux_2_28 $ROOT"; declare -f ib_build_wheel; cat Cargo.toml Cargo.lock; \
    find core native python-bindings/src python-bindings/python python-bindings/Cargo.toml python-bindings/pyproject.toml \
        -type f \( -name '*.rs' -o -name '*.toml' -o -name '*.py' -o -name '*.pyi' -o -name py.typed -o -path '*/_widget/*' \) -print0 \
        | sort -z | xargs -0 sha256sum; } | sha256sum | cut -d' ' -f1)"
wheels="$(ib_test_wheels)"
rel=()
[ "$profile" = release ] && rel=(--release)
if [ "$(cat "$VENV/.ib-python-build" 2>/dev/null || true)" != "$build_hash" ] \
    || ! "$IB_PY" -c 'import insitubatch_rs._native' 2>/dev/null \
    || ! compgen -G "$wheels/insitubatch_rs-*.whl" >/dev/null; then
    echo "test-python: building insitubatch_rs ($profile)"
    # A wheel (not `maturin develop`) so no .so lands in the source tree; built aside, so a
    # failed build leaves the last good wheel in place.
    rm -rf "$wheels.new"
    ib_build_wheel "$IB_PY" "$wheels.new" "${rel[@]}"
    rm -rf "$wheels"
    mv "$wheels.new" "$wheels"
    ib_install_wheel "$IB_PY" "$wheels"/insitubatch_rs-*.whl
    echo "$build_hash" >"$VENV/.ib-python-build"
fi
[ -n "${build_only:-}" ] && exit 0

# 3. Fixtures (the generator skips work when they are current).
export INSITUBATCH_FIXTURES="${INSITUBATCH_FIXTURES:-$INSITUBATCH_CACHE/fixtures}"
"$IB_PY" tests/fixtures/make_fixtures.py "$INSITUBATCH_FIXTURES" >/dev/null
# The NetCDF4 files and kerchunk references (tests/fixtures/make_virtual.py) are the test venv's:
# the sessions that write their own zarr fixtures read these.
export INSITUBATCH_VIRTUAL_FIXTURES="$INSITUBATCH_FIXTURES/virtual"
python_zarr() { "$IB_PY" -c 'import json, sys; print(json.load(open(sys.argv[1] + "/manifest.json"))["zarr_python"])' "$1"; }

# The python of environment $1 (scripts/pyenv.sh ib_venv) with wheel(s) $2... installed, which
# are reinstalled when the build changed (or the venv was synced to a changed lock).
session_python() {
    local py venv gil=()
    py="$(ib_venv "$1")" || return 1
    [ "$1" = py3.14t ] && gil=(PYTHON_GIL=0)
    shift
    venv="$(dirname "$(dirname "$py")")"
    if [ "$(cat "$venv/.ib-python-build" 2>/dev/null || true)" != "$build_hash" ] \
        || ! env "${gil[@]}" "$py" -c 'import insitubatch_rs._native' 2>/dev/null; then
        ib_install_wheel "$py" "$@" >&2 || return 1
        echo "$build_hash" >"$venv/.ib-python-build"
    fi
    echo "$py"
}
# pytest's exit 5 (the arguments selected no test here) is not a failure.
pytest_in() {
    local code=0
    "$@" || code=$?
    [ "$code" = 0 ] || [ "$code" = 5 ]
}

cd "$PB/tests"   # pytest runs from outside the source tree: the installed package is the one imported
# Session 3.11 (session_main): the test venv, with torch and JAX (IB_FRAMEWORKS=1: a test
# missing them fails); the reference implementation (insitubatch 0.2.0, venv-reference) for the
# parity tests; then the types: mypy over the package (pyproject.toml [tool.mypy]) and stubtest,
# which checks _native.pyi against the compiled extension installed above.
session_main() {
    local rc=0
    if [ "${IB_REFERENCE:-1}" != 0 ]; then
        IB_REFERENCE_PY="$(ib_venv reference)" || return 1
        export IB_REFERENCE_PY
    fi
    echo "== test-python: $("$IB_PY" -V), $("$IB_PY" -c 'import importlib.metadata as m; print("torch", m.version("torch"), "and JAX", m.version("jax"))')"
    IB_FRAMEWORKS=1 "$IB_PY" -m pytest -q -rs -p no:cacheprovider "${PYTEST_ARGS[@]}" . || rc=1
    echo "== test-python: types (mypy over the package; stubtest: _native.pyi against the extension)"
    (cd "$PB" && "$IB_PY" -m mypy --cache-dir "$INSITUBATCH_CACHE/mypy-cache") \
        || { echo "test-python: mypy found errors (above)" >&2; rc=1; }
    "$IB_PY" -m mypy.stubtest --mypy-config-file "$PB/pyproject.toml" insitubatch_rs._native \
        || { echo "test-python: _native.pyi differs from the compiled extension (above)" >&2; rc=1; }
    return "$rc"
}
# Sessions 3.10, 3.12, 3.13: the same abi3 wheel with no framework (those tests skip). Where the
# venv has zarr-python 3, it rewrites the test stores with its own zarr first.
other_python() {
    local v="$1" py fix zarr_v
    py="$(session_python "py$v" "$wheels"/insitubatch_rs-*.whl)" || return 1
    fix="$INSITUBATCH_FIXTURES"
    zarr_v="$("$py" -c 'import zarr; print(zarr.__version__)' 2>/dev/null || true)"
    if [ "${zarr_v%%.*}" = 3 ]; then
        fix="$INSITUBATCH_CACHE/fixtures-py$v"
        "$py" "$ROOT/tests/fixtures/make_fixtures.py" "$fix" >/dev/null || return 1
    fi
    echo "== test-python: $("$py" -V), stores written by zarr-python $(python_zarr "$fix")"
    INSITUBATCH_FIXTURES="$fix" "$py" -m pytest -q -rs -p no:cacheprovider "${PYTEST_ARGS[@]}" .
}
# Session 3.12-tf: TensorFlow's tests only. IB_EXPECT_TF=1: a TensorFlow that fails to import is
# a failure, not a skip.
session_tf() {
    local py
    py="$(session_python tf "$wheels"/insitubatch_rs-*.whl)" || return 1
    echo "== test-python: TensorFlow $("$py" -c 'import importlib.metadata as m; print(m.version("tensorflow-cpu"))') on $("$py" -V)"
    IB_EXPECT_TF=1 TF_CPP_MIN_LOG_LEVEL=2 pytest_in "$py" -m pytest -q -rs -p no:cacheprovider "${PYTEST_ARGS[@]}" \
        test_tf.py test_readme.py::test_docs_tensorflow_block test_migration.py::test_readme_framework_hand_off_tf
}
# Session 3.12-ray: examples/ray_train.py through test_ray_train.py. IB_EXPECT_RAY=1: a Ray that
# fails to import is a failure.
session_ray() {
    local py
    py="$(session_python ray "$wheels"/insitubatch_rs-*.whl)" || return 1
    echo "== test-python: Ray $("$py" -c 'import ray; print(ray.__version__)') on $("$py" -V)"
    IB_EXPECT_RAY=1 pytest_in "$py" -m pytest -q -rs -p no:cacheprovider "${PYTEST_ARGS[@]}" test_ray_train.py
}
# Session 3.14t: free-threaded CPython 3.14t cannot load the abi3 wheel: a cp314t wheel of its
# own (maturin picks a version-specific build for it from the same abi3 features), rebuilt when
# the build inputs change. The suite runs with PYTHON_GIL=0 and IB_EXPECT_FREE_THREADED=1, so an
# extension that turned the GIL back on fails test_threads.py; torch/JAX/zarr-python are not
# there (those tests skip).
session_free_threaded() {
    local py ft_wheels="$wheels-ft"
    py="$(ib_venv py3.14t)" || return 1
    if [ "$(cat "$ft_wheels/.ib-python-build" 2>/dev/null || true)" != "$build_hash" ]; then
        echo "test-python: building insitubatch_rs ($profile) for $("$py" -V) (free-threaded)"
        rm -rf "$ft_wheels.new"
        ib_build_wheel "$py" "$ft_wheels.new" "${rel[@]}" || return 1
        echo "$build_hash" >"$ft_wheels.new/.ib-python-build"
        rm -rf "$ft_wheels"
        mv "$ft_wheels.new" "$ft_wheels"
    fi
    py="$(session_python py3.14t "$ft_wheels"/insitubatch_rs-*cp314t*.whl)" || return 1
    echo "== test-python: $("$py" -VV | head -n1), GIL off (PYTHON_GIL=0)"
    PYTHON_GIL=0 IB_EXPECT_FREE_THREADED=1 "$py" -m pytest -q -rs -p no:cacheprovider "${PYTEST_ARGS[@]}" .
}

rc=0
failed=()
for s in "${SELECTED[@]}"; do
    case "$s" in
        3.11) session_main ;;
        3.12-tf) session_tf ;;
        3.12-ray) session_ray ;;
        3.14t) session_free_threaded ;;
        *) other_python "$s" ;;
    esac || { rc=1; failed+=("$s"); }
done
[ "$rc" = 0 ] || echo "test-python: sessions failed: ${failed[*]} (rerun one: scripts/test-python.sh py=... fw=...)" >&2
exit "$rc"
