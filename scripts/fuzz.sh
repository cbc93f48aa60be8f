#!/usr/bin/env bash
# Fuzz every parser of untrusted bytes (fuzz/fuzz_targets: Zarr v2/v3 metadata, shard
# indexes, every codec chain, the cache log, split manifests, resume checkpoints, the disk
# tier's chunk files, StandardScaler files) for SECONDS each (default 30;
# as many targets at once as there are cores, IB_FUZZ_JOBS),
# under libFuzzer with AddressSanitizer, -rss_limit_mb=512 (which also fails any single
# allocation over 512 MiB) and a 10 s per-input timeout. ASan's quarantine of freed memory
# is held to 64 MiB (its default, 256 MiB, counts toward the RSS limit and with the heap's
# fragmentation pushed reference_set's replay of its grown corpus past 512 MB with no input
# over 16 MB: a limit on the harness, not on what an input may cost). Prints one line per target with its
# executions and exits non-zero on any crash, panic, leak, timeout or over-limit allocation;
# the input that did it is kept under $INSITUBATCH_CACHE/fuzz/artifacts/TARGET/ (reproduce
# with `scripts/fuzz.sh --repro FILE TARGET`).
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#   scripts/fuzz.sh --build-only          # build the targets, run none
#   scripts/fuzz.sh --repro FILE TARGET   # run one input
# Toolchain: the repo's pinned nightly (ib_nightly, scripts/env.sh) and cargo-fuzz
# (scripts/tools.sh) installed once into $INSITUBATCH_CACHE. Corpora live in
# $INSITUBATCH_CACHE/fuzz/corpus/TARGET, so every run (CI's too) starts from what earlier
# runs found; they are seeded from each target's built-in seeds and, when
# $INSITUBATCH_FIXTURES holds the zarr-python fixtures, from their metadata and chunks.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/tools.sh

FUZZ_HOME="$INSITUBATCH_CACHE/fuzz"
FUZZ_TARGET_DIR="$INSITUBATCH_CACHE/target-fuzz"
TRIPLE=x86_64-unknown-linux-gnu
ALL_TARGETS=(zarr_v3_metadata zarr_v2_metadata shard_index decode_tile cache_log split_manifest checkpoint chunk_file scaler_file reference_set icechunk_repository)

ib_prereqs
# libfuzzer-sys compiles libFuzzer (C++) with the cc crate.
if ! command -v c++ >/dev/null; then
    if [ "$(id -u)" = 0 ]; then SUDO=(); else SUDO=(sudo); fi
    "${SUDO[@]}" apt-get update -qq && "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ >/dev/null
fi
NIGHTLY=$(ib_nightly)
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=64"
ib_tool cargo-fuzz
export PATH="$IB_CARGO_FUZZ_ROOT/bin:$PATH"
# The AddressSanitizer runtime ships with the nightly's x86_64 Linux std: nothing else to add.

build() {
    local start=$SECONDS
    (cd fuzz && cargo "+$NIGHTLY" fuzz build --target-dir "$FUZZ_TARGET_DIR" "$@")
    echo "fuzz: build took $((SECONDS - start)) s" >&2
}
bin() { echo "$FUZZ_TARGET_DIR/$TRIPLE/release/$1"; }

if [ "${1:-}" = "--repro" ]; then
    build "$3"
    exec "$(bin "$3")" -rss_limit_mb=512 "$2"
fi
# Build every target, run none (scripts/warm.sh, ahead of the fuzz phase).
if [ "${1:-}" = "--build-only" ]; then
    build
    exit 0
fi

SECONDS_EACH="${1:-30}"
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=("${ALL_TARGETS[@]}")
build

# seed TARGET DIR: the target's built-in seeds, then fixture files that fit it.
seed() {
    local t="$1" dir="$2" fx="${INSITUBATCH_FIXTURES:-}"
    IB_FUZZ_SEEDS="$dir" "$(bin "$t")" >/dev/null 2>&1
    [ -n "$fx" ] && [ -d "$fx" ] || return 0
    local f i=0
    case "$t" in
        zarr_v3_metadata)
            find "$fx" -name zarr.json -size -64k | while read -r f; do cp "$f" "$dir/fx-$((i++))"; done ;;
        zarr_v2_metadata)
            find "$fx" \( -name .zarray -o -name .zmetadata \) -size -64k | while read -r f; do
                if [ -f "$(dirname "$f")/.zattrs" ] && [ "$(basename "$f")" = .zarray ]; then
                    { cat "$f"; printf '\0'; cat "$(dirname "$f")/.zattrs"; } >"$dir/fx-$((i++))"
                else
                    cp "$f" "$dir/fx-$((i++))"
                fi
            done ;;
        reference_set)
            # The virtual fixtures' kerchunk sets (tests/fixtures/make_virtual.py).
            find "$fx/virtual" -name '*.json' ! -name manifest.json -size -64k 2>/dev/null | while read -r f; do
                cp "$f" "$dir/fx-$((i++))"
            done ;;
        decode_tile)
            # A selector byte for an array with the same compressor, then a real chunk of
            # another shape: reaches the decoders and the size check (see chain_metadata).
            local store sel
            for store in v3_zstd:0 v3_gzip:2 v3_blosc:5 v2_zlib:11 v2_blosc:12; do
                sel="${store#*:}"
                find "$fx/${store%%:*}" -type f ! -name '.z*' ! -name zarr.json -size -64k 2>/dev/null | head -n 3 | while read -r f; do
                    { printf "\\x$(printf %02x "$sel")"; cat "$f"; } >"$dir/fx-${store%%:*}-$((i++))"
                done
            done ;;
    esac
}

# fuzz_one TARGET: fuzz it for SECONDS_EACH; its summary line goes to $FUZZ_HOME/TARGET.line.
fuzz_one() {
    local t="$1" corpus="$FUZZ_HOME/corpus/$1" artifacts="$FUZZ_HOME/artifacts/$1"
    local log="$FUZZ_HOME/$1.log" rc=0 execs rss line
    mkdir -p "$corpus" "$artifacts"
    [ -n "$(ls -A "$corpus")" ] || seed "$t" "$corpus"
    echo "fuzz: $t for ${SECONDS_EACH}s (corpus $(ls "$corpus" | wc -l) inputs)" >&2
    "$(bin "$t")" "$corpus" -max_total_time="$SECONDS_EACH" -rss_limit_mb=512 -timeout=10 \
        -print_final_stats=1 -artifact_prefix="$artifacts/" >"$log" 2>&1 || rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -n 1)
    line=$(printf 'fuzz %-18s %12s execs in %4ss, peak RSS %4s MB, corpus %5s' "$t" "${execs:-?}" \
        "$SECONDS_EACH" "${rss:-?}" "$(ls "$corpus" | wc -l)")
    if [ "$rc" -ne 0 ]; then
        line="$line  FAILED (rc $rc; see $log, input in $artifacts)"
        grep -E "ERROR|panicked|SUMMARY|^Test unit written" "$log" | head -n 20 | sed 's/^/    /' >&2
    fi
    echo "$line" >"$FUZZ_HOME/$t.line"
}

# Each fuzzer is one process on one core: run as many at once as there are cores.
JOBS="${IB_FUZZ_JOBS:-$(nproc)}"
for t in "${TARGETS[@]}"; do
    rm -f "$FUZZ_HOME/$t.line"
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
    fuzz_one "$t" &
done
wait
failed=()
for t in "${TARGETS[@]}"; do
    line="$(cat "$FUZZ_HOME/$t.line" 2>/dev/null || echo "fuzz $t: no result (the run itself failed)")"
    echo "$line"
    [[ "$line" == *FAILED* || "$line" == *"no result"* ]] && failed+=("$t")
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: ${#failed[@]} of ${#TARGETS[@]} targets failed: ${failed[*]}" >&2
    exit 1
fi
echo "fuzz: all ${#TARGETS[@]} targets ran clean (0 crashes)"
