#!/usr/bin/env bash
# Make a venv at DIR that sees the shared test venv's packages (torch, JAX, zarr, ...) but
# installs its own insitubatch_rs, so a second checkout (a git worktree) can build and test
# its own wheel without replacing the shared one:
#   bash scripts/overlay-venv.sh /tmp/my-venv && IB_TEST_VENV=/tmp/my-venv bash scripts/test-python.sh py=3.11
# (session 3.11 only: the other sessions' venvs are the shared ones, which take this checkout's
# wheel when they run).
set -euo pipefail
dir="${1:?usage: overlay-venv.sh DIR}"
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/pyenv.sh
ib_test_venv
base="$(dirname "$(dirname "$IB_PY")")"
[ -x "$dir/bin/python" ] || "$IB_PY" -m venv --without-pip "$dir"
site_of() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
# A .pth line appends the shared venv's site-packages after the overlay's own, so the
# overlay's insitubatch_rs (installed into its own site-packages) is the one imported.
site_of "$IB_PY" >"$(site_of "$dir/bin/python")/ib-shared-venv.pth"
ln -sf "$base/bin/maturin" "$dir/bin/maturin"
# The overlay has no pip of its own: `python -m pip` finds the shared venv's pip (tools/python/test.in)
# through the .pth line and installs into the overlay (pip leaves the shared copy alone:
# "outside environment"); scripts/test-python.sh installs its wheel there with uv.
echo "$dir"
