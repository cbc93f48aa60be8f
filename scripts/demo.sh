#!/usr/bin/env bash
# The main job: build the CLI and run `insitubatch demo` on the embedded ERA5-like store
# (written by our own code into ~/.cache/insitubatch/demo on first use).
# Extra arguments go to `insitubatch demo` (e.g. --url file:///data/era5.zarr --batch-size 64).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
ib_prereqs
cargo build --release -q -p insitubatch-native --bin insitubatch
"$CARGO_TARGET_DIR/release/insitubatch" demo "$@"
# Where the CLI is: the README's next steps use it by name.
echo "the CLI: $CARGO_TARGET_DIR/release/insitubatch (on your PATH with: cargo install --locked --path native)"
