//! Decoding arbitrary bytes through every codec chain we support: the first byte picks one
//! of the fixed arrays (`chain_metadata`: zstd fast path, gzip, blosc, crc32c, transpose,
//! bytes in both endians, the inner chains of sharded arrays, v2 zlib/blosc/bz2/zstd); the
//! rest is the stored tile. A decoded tile is exactly the tile's geometry, never short or
//! padded; anything else is a clean `Error::Decode` naming the key.
#![no_main]

use insitubatch_core::Error;
use insitubatch_core::{AlignedBytes, internals::BUFFER_ALIGN};
use insitubatch_fuzz::{chain_arrays, decode_seeds, write_seeds_if_asked};
use libfuzzer_sys::fuzz_target;

fuzz_target!(init: write_seeds_if_asked(decode_seeds), |data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else { return };
    let arrays = chain_arrays();
    let array = &arrays[usize::from(sel) % arrays.len()];
    let key = "t2m/c/0/0";
    // High selectors hand in a recycled buffer of some other size, as the engine does.
    let buffer = (sel >= 128).then(|| AlignedBytes::with_capacity(BUFFER_ALIGN, usize::from(sel) * 3));
    match array.decode_tile_into(Some(bytes::Bytes::copy_from_slice(rest)), key, buffer) {
        Ok(tile) => {
            assert_eq!(tile.data.len(), array.tile_bytes(), "decoded size differs from the geometry");
            let shape: Vec<u64> = tile.shape.iter().map(|&d| d as u64).collect();
            assert_eq!(shape, array.tile_shape());
        }
        Err(Error::Decode { key: k, .. }) => assert_eq!(k, key),
        Err(other) => panic!("not a decode error: {other:?}"),
    }
});
