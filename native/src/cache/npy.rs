//! The `.npy` header of a cached chunk.
//!
//! Written by hand rather than through an npy crate because the header must be padded to a
//! whole [`HEADER_ALIGN`] so the data that follows a page-aligned mapping starts 128-byte
//! aligned (zero-copy views for DLPack and XLA), and because a revive compares the header
//! byte for byte against the one this run would write: any difference is a miss, never a
//! reinterpretation. The files stay ordinary NPY v1.0, so `np.load(path, mmap_mode="r")`
//! reads them.

use insitubatch_core::DType;

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
}
