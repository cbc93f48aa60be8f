#!/usr/bin/env bash
# Build (idempotently) free-threaded CPython 3.14t (`--disable-gil`) from Debian's copy of the
# upstream source tarball, into ${INSITUBATCH_CACHE:-$HOME/.cache/insitubatch}/python-3.14.5t.
# 3.14, not 3.13: pyo3 0.29+ refuses free-threaded CPython below 3.14 (its build script: "PyO3
# does not support the free-threaded build of CPython versions below 3.14"; 3.14 is the first
# release where CPython calls free-threading supported).
# pyenv here has no 3.14t and python.org is not reachable; deb.debian.org is (the apt mirror).
# The tarball's sha256 is pinned below (it is the one Debian's python3.14_3.14.5-1.dsc lists).
# Nothing is downloaded or built when the interpreter there is 3.14.5 free-threaded.
# Prints the interpreter's path on success.
# Usage: IB_PY314T=$(bash scripts/py314t.sh)   (run it, do not source it)
# Cold: about 2.5 min of CPU on 2 cores (no --enable-optimizations, -O1: to keep it short); warm: 0 s.
set -euo pipefail
version=3.14.5
sha256=7e32597b99e5d9a39abed35de4693fa169df3e5850d4c334337ffd6a19a36db6
url="http://deb.debian.org/debian/pool/main/p/python3.14/python3.14_${version}.orig.tar.xz"
cache="${INSITUBATCH_CACHE:-$HOME/.cache/insitubatch}"
prefix="$cache/python-${version}t"
py="$prefix/bin/python3.14t"

# The interpreter is current when it reports this version and a disabled-GIL build.
is_current() {
    [ -x "$py" ] && [ "$("$py" -c 'import sys, sysconfig
print(sys.version.split()[0], sysconfig.get_config_var("Py_GIL_DISABLED"))' 2>/dev/null)" = "$version 1" ]
}

# One builder at a time: scripts/warm.sh may be building it in the background; a second
# caller waits here, then finds it current.
mkdir -p "$cache"
exec 9>"$cache/.lock-py314t"
flock 9

if ! is_current; then
    echo "py314t: building free-threaded CPython $version into $prefix (about 2.5 min of CPU)" >&2
    start=$SECONDS
    work="$(mktemp -d "${TMPDIR:-/tmp}/py314t.XXXXXX")"
    trap 'rm -rf "$work"' EXIT
    curl -fsSL --retry 3 -o "$work/src.tar.xz" "$url"
    if ! echo "$sha256  $work/src.tar.xz" | sha256sum -c --quiet -; then
        echo "py314t: the tarball's sha256 is not $sha256; refusing to build it ($url)" >&2
        exit 1
    fi
    tar -xJf "$work/src.tar.xz" -C "$work"
    rm -rf "$prefix"
    (
        cd "$work/Python-$version"
        # --disable-test-modules: neither CPython's own test suite (158 MB of Lib/test, byte-compiled
        # three times by `make install`) nor its _test* C extensions; nothing here imports them.
        # OPT: -O1 and no -g, for configure's "-g -O3": the build took 107 CPU-s against 236 on
        # 2 cores (2026-12-06, make alone; 131 against 268 with configure and install). The
        # interpreter only runs the 3.14t pytest session (about 15 s), where -O3 would save seconds.
        OPT="-DNDEBUG -fwrapv -O1 -Wall" \
            ./configure -q --disable-gil --disable-test-modules --prefix="$prefix" --with-ensurepip=install >&2
        make -s -j"${IB_PY314T_JOBS:-2}" >"$work/make.log" 2>&1 || { tail -n 40 "$work/make.log" >&2; exit 1; }
        make -s install >"$work/install.log" 2>&1 || { tail -n 40 "$work/install.log" >&2; exit 1; }
    )
    if ! is_current; then
        echo "py314t: $py was built but is not free-threaded CPython $version" >&2
        exit 1
    fi
    # The modules pip, numpy and the tests need; a missing -dev package leaves them out silently.
    "$py" -c 'import ssl, zlib, ctypes, bz2, lzma, sqlite3' >&2 \
        || { echo "py314t: built without a needed module; install its -dev package (libssl, zlib1g, libffi, libbz2, liblzma, libsqlite3) and rerun" >&2; exit 1; }
    echo "py314t: built in $((SECONDS - start)) s" >&2
fi
echo "$py"
