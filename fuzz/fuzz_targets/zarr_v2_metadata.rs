//! Zarr v2 metadata: any bytes as `.zarray`, split at the first NUL into `.zarray` and
//! `.zattrs`; and the whole input as consolidated `.zmetadata`. Every accepted array must
//! pass `check_array`; everything else must be a clean error.
#![no_main]

use insitubatch_core::ZarrArray;
use insitubatch_core::internals::open_arrays;
use insitubatch_core::testing::MemoryStorage;
use insitubatch_fuzz::{block_on, check_array, metadata_seeds, write_seeds_if_asked};
use libfuzzer_sys::fuzz_target;

fuzz_target!(init: write_seeds_if_asked(|| metadata_seeds(2)), |data: &[u8]| {
    let (zarray, zattrs) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], Some(&data[i + 1..])),
        None => (data, None),
    };
    if let Ok(a) = ZarrArray::from_v2("t2m", zarray, zattrs) {
        check_array(&a);
    }
    let storage = MemoryStorage::new().unlistable();
    storage.insert(".zmetadata", data.to_vec());
    if let Ok(arrays) = block_on(open_arrays(&storage, None)) {
        arrays.iter().for_each(check_array);
    }
});
