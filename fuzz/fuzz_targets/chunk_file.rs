//! The disk tier's chunk files (`native/src/cache/npy.rs` `check_file`, which every revive
//! runs over a mapped file): any bytes as a file's content, checked against the header of a
//! chunk whose dtype and shape the input's first bytes choose. A file is accepted only when
//! it is exactly that header, the chunk's bytes and the commit record of the file's name,
//! header and bytes: what a store writes, and nothing else.
#![no_main]

use insitubatch_core::{CommitRecord, DType};
use libfuzzer_sys::fuzz_target;

// Included by path, as the cache log's target includes log.rs: the native crate would build
// its network stack under the fuzzer's instrumentation for one pure function.
#[allow(dead_code, reason = "only the file check is fuzzed")]
#[path = "../../native/src/cache/npy.rs"]
mod npy;

const DTYPES: [DType; 4] = [DType::Float32, DType::Uint8, DType::Float64, DType::Int16];
const NAME: &str = "t2m__0123456789abcdef__3.npy";

/// The chunk the input's first two bytes describe (a dtype, and rows of 3 elements), and the
/// rest of the input as the file.
fn split(data: &[u8]) -> Option<(DType, Vec<usize>, &[u8])> {
    let (&[d, rows], file) = data.split_first_chunk::<2>()?;
    Some((DTYPES[usize::from(d) % DTYPES.len()], vec![usize::from(rows % 16), 3], file))
}

fn seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (d, rows) in [(0u8, 2u8), (1, 5), (2, 1), (3, 0)] {
        let (dtype, shape, _) = split(&[d, rows]).expect("two bytes");
        let header = npy::header(dtype, &shape);
        let data: Vec<u8> = (0..shape.iter().product::<usize>() * dtype.size()).map(|i| i as u8).collect();
        let record = npy::commit_record(NAME, &header, &data);
        out.push([&[d, rows][..], &header, &data, &record].concat());
    }
    out
}

fuzz_target!(init: insitubatch_fuzz::write_seeds_if_asked(seeds), |data: &[u8]| {
    let Some((dtype, shape, file)) = split(data) else { return };
    let header = npy::header(dtype, &shape);
    let nbytes = shape.iter().product::<usize>() * dtype.size();
    if npy::check_file(NAME, &header, nbytes, file).is_ok() {
        assert_eq!(file.len(), header.len() + nbytes + CommitRecord::LEN);
        let (head, rest) = file.split_at(header.len());
        let (chunk, tail) = rest.split_at(nbytes);
        assert_eq!(head, header.as_slice());
        assert_eq!(tail, npy::commit_record(NAME, &header, chunk), "accepted a file whose record is not its own");
        assert!(npy::check_file("t2m__0123456789abcdef__4.npy", &header, nbytes, file).is_err(), "under another name");
    }
});
