//! A tile's stored bytes to its values: zarrs' codec chain, bounded, or the zstd fast path
//! straight into an aligned buffer.

use bytes::Bytes;
use zarrs::array::CodecOptions;

use super::{BAD_CHUNK_HINT, ZarrArray};
use crate::array::{AlignedBytes, BUFFER_ALIGN, NdArray, filled_bytes};
use crate::error::{Error, Result};

impl ZarrArray {
    /// Decode one tile's stored bytes into the FULL tile (edge padding included), physical
    /// axis order, native endianness. `None` means the object (or the inner chunk in its
    /// shard) is absent: a tile of fill value.
    ///
    /// # Errors
    /// [`Error::Decode`] (corrupt, truncated, wrong size), with `key` last.
    pub fn decode_tile(&self, encoded: Option<Bytes>, key: &str) -> Result<NdArray> {
        self.decode_tile_into(encoded, key, None)
    }

    /// [`Self::decode_tile`], decompressing into `buffer` when the fast path applies (a
    /// recycled allocation avoids page-faulting a fresh one for every tile).
    ///
    /// # Errors
    /// As [`Self::decode_tile`].
    pub fn decode_tile_into(&self, encoded: Option<Bytes>, key: &str, buffer: Option<AlignedBytes>) -> Result<NdArray> {
        // Only the zstd fast path (one of the C codecs) decompresses into the caller's buffer.
        #[cfg(not(feature = "c-codecs"))]
        drop(buffer);
        let shape: Vec<usize> = self.tile_shape.iter().map(|&d| d as usize).collect();
        let Some(encoded) = encoded else {
            let data = filled_bytes(self.tile_bytes / self.dtype.size(), &self.fill_value);
            return NdArray::new(self.dtype, shape, data).map_err(|e| self.decode_err(e, key));
        };
        #[cfg(feature = "c-codecs")]
        if self.fast_zstd {
            let data = zstd_into_aligned(&encoded, self.tile_bytes, buffer).map_err(|e| self.decode_err(e, key))?;
            return NdArray::new(self.dtype, shape, data).map_err(|e| self.decode_err(e, key));
        }
        let data = self.decode_generic(&encoded).map_err(|e| self.decode_err(e, key))?;
        NdArray::new(self.dtype, shape, data).map_err(|e| self.decode_err(e, key))
    }

    /// The codec chain (bounded: [`BoundedChain`](super::bounded::BoundedChain)), then one copy into an aligned buffer.
    pub(super) fn decode_generic(&self, encoded: &[u8]) -> std::result::Result<AlignedBytes, String> {
        let opts = CodecOptions::default().with_concurrent_target(1);
        let run = || -> std::result::Result<AlignedBytes, String> {
            let raw = self.tile_chain.decode(encoded, &self.tile_shape_nz, &self.array, &opts)?;
            if raw.len() != self.tile_bytes {
                return Err(format!("decoded {} bytes, expected {}", raw.len(), self.tile_bytes));
            }
            let mut out = AlignedBytes::with_capacity(BUFFER_ALIGN, raw.len());
            out.extend_from_slice(&raw);
            Ok(out)
        };
        // zarrs should not panic on bad input, but a corrupt chunk must never take the process down.
        #[cfg(not(target_arch = "wasm32"))]
        {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(run))
                .unwrap_or_else(|_| Err("the decoder panicked".to_string()))
        }
        #[cfg(target_arch = "wasm32")]
        {
            run()
        }
    }

    fn decode_err(&self, what: impl std::fmt::Display, key: &str) -> Error {
        Error::Decode {
            message: format!(
                "cannot decode a {} tile of shape {:?} ({what}); {BAD_CHUNK_HINT}",
                self.dtype, self.tile_shape
            ),
            key: key.to_string(),
        }
    }
}

// Fast path. zarrs' generic `CodecChain::decode` decompresses into a Vec it allocates, then
// the bytes codec hands that back and we copy it into the 128-byte-aligned buffer batches
// need: one extra allocation and one full copy per tile. For the common chain
// `[bytes(little), zstd]` (and the same inside a shard) on a little-endian host, the decoded
// bytes ARE the tile, so decompress straight into one fresh aligned buffer.
#[cfg(feature = "c-codecs")]
fn zstd_into_aligned(
    src: &[u8],
    expected: usize,
    buffer: Option<AlignedBytes>,
) -> std::result::Result<AlignedBytes, String> {
    use zstd::zstd_safe::{WriteBuf, get_error_name};

    /// The spare capacity of an aligned vec as a zstd output buffer.
    struct Spare<'a>(&'a mut AlignedBytes);
    // SAFETY: `as_slice` covers only initialised bytes, the pointer and capacity describe the
    // allocation, and zstd calls `filled_until` with the number of bytes it wrote.
    unsafe impl WriteBuf for Spare<'_> {
        fn as_slice(&self) -> &[u8] {
            self.0.as_slice()
        }
        fn capacity(&self) -> usize {
            self.0.capacity()
        }
        fn as_mut_ptr(&mut self) -> *mut u8 {
            self.0.as_mut_ptr()
        }
        unsafe fn filled_until(&mut self, n: usize) {
            // SAFETY: the caller (zstd) initialised the first `n <= capacity` bytes.
            unsafe { self.0.set_len(n) }
        }
    }

    let mut out = match buffer {
        Some(mut b) => {
            b.clear();
            b.reserve(expected);
            b
        }
        None => AlignedBytes::with_capacity(BUFFER_ALIGN, expected),
    };
    let written = super::bounded::with_dctx(|dctx| {
        dctx.decompress(&mut Spare(&mut out), src).map_err(|code| format!("zstd: {}", get_error_name(code)))
    })?;
    if written != expected || out.len() != expected {
        return Err(format!("zstd decompressed {written} bytes, expected {expected}"));
    }
    Ok(out)
}
