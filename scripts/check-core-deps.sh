#!/usr/bin/env bash
# The core must stay runtime-agnostic: no tokio, rayon or wasm-bindgen of its own, on any
# target. zarrs (our codec library) depends on rayon unconditionally and, on wasm32, on
# getrandom/uuid with wasm-bindgen; we prune zarrs' own subtree and check everything else.
# (zarrs' rayon runs inline on wasm32 without atomics, and we call its codecs with a
# concurrency target of 1, so all our CPU work still goes through the ThreadPool seam.)
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
for target in x86_64-unknown-linux-gnu wasm32-unknown-unknown; do
    tree="$(cargo tree -p insitubatch-core -e normal --target "$target" --prune zarrs)"
    if bad="$(grep -E '(tokio|rayon|wasm-bindgen) v' <<<"$tree")"; then
        echo "insitubatch-core depends on a runtime on $target:" >&2
        echo "$bad" >&2
        status=1
    fi
done
[ $status = 0 ] && echo "core dependency guard: no tokio, rayon or wasm-bindgen outside zarrs"
exit $status
