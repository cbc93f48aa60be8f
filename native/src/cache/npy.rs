//! A cached chunk's file: an `.npy` header, the chunk's bytes, and a commit record.
//!
//! The header is written by hand rather than through an npy crate because it must be padded
//! to a whole [`HEADER_ALIGN`] so the data that follows a page-aligned mapping starts 128-byte
//! aligned (zero-copy views for DLPack and XLA), and because a revive compares the header
//! byte for byte against the one this run would write: any difference is a miss, never a
//! reinterpretation. The commit record (core's [`CommitRecord`], as the browser's tier
//! writes) follows the data: the CRC-32C of the file's name, the header and the data, so a
//! flipped bit, a truncation, a file cut short, or another chunk's file under this name all
//! fail [`check_file`]. The files stay NPY v1.0 that numpy reads
//! (`np.load(path, mmap_mode="r")` maps the array and ignores the 16 bytes after it).

use insitubatch_core::{CommitRecord, DType};

/// Header length, a multiple of the engine's buffer alignment.
pub const HEADER_ALIGN: usize = 128;

fn descr(dtype: DType) -> String {
    let e = if cfg!(target_endian = "little") { '<' } else { '>' };
    match dtype {
        DType::Bool => "|b1".into(),
        DType::Int8 => "|i1".into(),
        DType::Uint8 => "|u1".into(),
        DType::Int16 => format!("{e}i2"),
        DType::Uint16 => format!("{e}u2"),
        // numpy has no bfloat16: stored as its bits (the log entry keeps the real dtype).
        DType::Bfloat16 => format!("{e}u2"),
        DType::Float16 => format!("{e}f2"),
        DType::Int32 => format!("{e}i4"),
        DType::Uint32 => format!("{e}u4"),
        DType::Float32 => format!("{e}f4"),
        DType::Int64 => format!("{e}i8"),
        DType::Uint64 => format!("{e}u8"),
        DType::Float64 => format!("{e}f8"),
    }
}

/// The full header (magic, version, length, dict, padding) for a C-order array.
pub fn header(dtype: DType, shape: &[usize]) -> Vec<u8> {
    let dims = match shape {
        [n] => format!("({n},)"),
        _ => format!("({})", shape.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")),
    };
    let dict = format!("{{'descr': '{}', 'fortran_order': False, 'shape': {dims}, }}", descr(dtype));
    let unpadded = 10 + dict.len() + 1;
    let total = unpadded.div_ceil(HEADER_ALIGN) * HEADER_ALIGN;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    let len = u16::try_from(total - 10).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.resize(total - 1, b' ');
    out.push(b'\n');
    out
}

/// The commit record of chunk file `name` holding `header` and `data`.
pub fn commit_record(name: &str, header: &[u8], data: &[u8]) -> [u8; CommitRecord::LEN] {
    *CommitRecord::over(&[name.as_bytes(), header, data]).as_bytes()
}

/// The length of a chunk file whose header is `header` and whose data is `nbytes` long.
pub fn file_len(header: &[u8], nbytes: usize) -> usize {
    header.len() + nbytes + CommitRecord::LEN
}

/// Whether `file`, the whole content of the file called `name`, is the chunk whose header
/// this run would write (`header`) with `nbytes` of data under a commit record that matches:
/// `Err` says what is wrong with it, in words that follow "a cached chunk file". Pure, so
/// the fuzzer (`fuzz/fuzz_targets/chunk_file.rs`) feeds it any bytes.
///
/// # Errors
/// Another length (truncated, another shape), another header (shape, dtype), no commit
/// record, or a checksum that differs (damaged, or another chunk's file).
pub fn check_file(name: &str, header: &[u8], nbytes: usize, file: &[u8]) -> Result<(), &'static str> {
    if file.len() != file_len(header, nbytes) {
        return Err("does not have the chunk's length (truncated, or another shape)");
    }
    let (head, rest) = file.split_at(header.len());
    if head != header {
        return Err("does not match the chunk's shape and dtype");
    }
    let (data, tail) = rest.split_at(nbytes);
    CommitRecord::check(&[name.as_bytes(), head, data], tail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_aligned_and_parsable() {
        for shape in [vec![3usize], vec![24, 32, 64], vec![1; 40]] {
            let h = header(DType::Float32, &shape);
            assert_eq!(h.len() % HEADER_ALIGN, 0);
            assert_eq!(&h[..8], b"\x93NUMPY\x01\x00");
            let len = u16::from_le_bytes([h[8], h[9]]) as usize;
            assert_eq!(len + 10, h.len());
            assert_eq!(*h.last().unwrap(), b'\n');
            let text = std::str::from_utf8(&h[10..]).unwrap();
            assert!(text.starts_with("{'descr': '<f4', 'fortran_order': False, 'shape': ("), "{text}");
        }
        assert!(std::str::from_utf8(&header(DType::Uint8, &[5])[10..]).unwrap().contains("'shape': (5,)"));
        assert_ne!(header(DType::Float32, &[2, 3]), header(DType::Float32, &[3, 2]));
        assert_ne!(header(DType::Float32, &[2, 3]), header(DType::Int32, &[2, 3]));
    }

    /// The file a store writes, whole: header, data, record.
    fn file(name: &str, header: &[u8], data: &[u8]) -> Vec<u8> {
        [header, data, &commit_record(name, header, data)].concat()
    }

    #[test]
    fn a_file_checks_only_whole_unaltered_and_under_its_own_name() {
        let h = header(DType::Float32, &[2, 3]);
        let data: Vec<u8> = (0..24).collect();
        let good = file("t2m__aaaaaaaaaaaaaaaa__0.npy", &h, &data);
        assert_eq!(check_file("t2m__aaaaaaaaaaaaaaaa__0.npy", &h, 24, &good), Ok(()));
        let check = |bytes: &[u8]| check_file("t2m__aaaaaaaaaaaaaaaa__0.npy", &h, 24, bytes).unwrap_err();
        let mut flipped = good.clone();
        flipped[h.len() + 5] ^= 0x10;
        assert!(check(&flipped).contains("checksum"), "a flipped data byte");
        assert!(check(&good[..good.len() - 1]).contains("length"), "a truncation");
        assert!(check(&good[..h.len() + 24]).contains("length"), "no record: a file of the old layout");
        let mut unrecorded = good.clone();
        let at = unrecorded.len() - 16;
        unrecorded[at..].fill(0);
        assert!(check(&unrecorded).contains("commit record"), "a write cut before its record");
        // Chunk 1's whole, valid file under chunk 0's name: the record covers the name.
        let other = file("t2m__aaaaaaaaaaaaaaaa__1.npy", &h, &data);
        assert!(check(&other).contains("another chunk's file"));
        // A planted file: a valid header, any data, a record computed without the name.
        let planted = [&h[..], &data, CommitRecord::over(&[&h, &data]).as_bytes()].concat();
        assert!(check(&planted).contains("checksum"));
        let mut header_changed = good.clone();
        header_changed[60] ^= 1;
        assert!(check(&header_changed).contains("shape and dtype"));
    }
}
