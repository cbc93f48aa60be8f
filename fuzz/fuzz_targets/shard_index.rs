//! Shard indexes: the first byte picks a sharded array (index at the end or the start, with
//! or without crc32c), the rest is its index as fetched. Odd selectors resize the bytes to
//! the index's exact size, so the decoder itself is reached, not only the length check.
//! An accepted index must give ranges that never overflow.
#![no_main]

use insitubatch_core::ByteRange;
use insitubatch_fuzz::{shard_index_seeds, sharded_arrays, write_seeds_if_asked};
use libfuzzer_sys::fuzz_target;

fuzz_target!(init: write_seeds_if_asked(shard_index_seeds), |data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else { return };
    let arrays = sharded_arrays();
    let array = arrays[usize::from(sel >> 1) % arrays.len()];
    let mut bytes = rest.to_vec();
    if sel & 1 == 1 {
        let size = match array.shard_index_range() {
            Some(ByteRange::Bounded { start, end }) => end - start,
            Some(ByteRange::Suffix(n)) => n,
            None => unreachable!("a sharded array has an index"),
        };
        bytes.resize(size as usize, 0xff);
    }
    if let Ok(index) = array.decode_shard_index(&bytes, "t2m/c/0/0") {
        for i in 0..index.len() + 1 {
            if let Some(ByteRange::Bounded { start, end }) = index.range(i) {
                assert!(start <= end, "inner chunk {i}: {start}..{end}");
            }
        }
        assert!(index.n_present() <= index.len());
    }
});
