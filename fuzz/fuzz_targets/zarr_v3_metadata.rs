//! Zarr v3 metadata: any bytes as an array's `zarr.json` (our checks, then zarrs' parsing as
//! we call it), and as a store's root `zarr.json` (a root array, or consolidated metadata).
//! Every accepted array must pass `check_array`; everything else must be a clean error.
#![no_main]

use insitubatch_core::ZarrArray;
use insitubatch_core::internals::open_arrays;
use insitubatch_core::testing::MemoryStorage;
use insitubatch_fuzz::{block_on, check_array, metadata_seeds, write_seeds_if_asked};
use libfuzzer_sys::fuzz_target;

fuzz_target!(init: write_seeds_if_asked(|| metadata_seeds(3)), |data: &[u8]| {
    if let Ok(a) = ZarrArray::from_v3("t2m", data) {
        check_array(&a);
    }
    let storage = MemoryStorage::new().unlistable();
    storage.insert("zarr.json", data.to_vec());
    if let Ok(arrays) = block_on(open_arrays(&storage, None)) {
        arrays.iter().for_each(check_array);
    }
});
