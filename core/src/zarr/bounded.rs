//! A tile's codec chain decoded within a bound derived from its geometry, so that no stored
//! chunk can make the engine allocate more than its tile needs: a decompression bomb (a
//! small chunk that inflates to gigabytes) is an error, not an allocation.
//!
//! zarrs' bytes-to-bytes decoders inflate the whole stream into a `Vec` they grow (gzip,
//! zlib, bz2: `read_to_end`), or size their output from the stream's own header (zstd's
//! frame content size, blosc's `nbytes`), and only then does anyone compare the result with
//! the tile. zarrs takes no limit to pass, so the bytes-to-bytes stage is run here,
//! codec by codec, each into at most the bytes it can legitimately decode to (zarrs' own
//! `encoded_representation` of the codecs before it: exactly the tile's bytes for the codec
//! next to `bytes`), with the codec libraries' own decoders (flate2, bzip2, zstd); zarrs
//! decodes the rest of the chain (array-to-bytes and array-to-array codecs, which never
//! inflate: their input is already bounded).

use std::borrow::Cow;
use std::io::Read;
use std::sync::Arc;

use zarrs::array::{
    Array, ArrayToBytesCodecTraits, BytesRepresentation, BytesToBytesCodecTraits, CodecChain, CodecOptions,
};

/// How one bytes-to-bytes codec is decoded within its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// flate2's gzip reader (zarrs' own decoder, limited).
    Gzip,
    /// flate2's zlib reader.
    Zlib,
    /// bzip2's reader.
    Bz2,
    /// zstd's one-shot decompression into a buffer of the bound's size.
    #[cfg(feature = "c-codecs")]
    Zstd,
    /// zarrs' decoder, after the frame's header is checked against the bound (zarrs sizes its
    /// output from that header).
    #[cfg(feature = "c-codecs")]
    Blosc,
    /// HDF5's checksum, checked here ([`fletcher32`]): zarrs' check is wrong for data of an odd
    /// length.
    Fletcher32,
    /// HDF5's byte shuffle of this element size, undone here ([`unshuffle`]): zarrs refuses a
    /// length that is not a multiple of it, which HDF5 writes.
    Shuffle(usize),
    /// zarrs' decoder: a codec that never decodes to more than its input (crc32c, shuffle),
    /// its output checked against the bound after.
    Other,
}

impl Kind {
    fn of(codec: &dyn BytesToBytesCodecTraits) -> Self {
        use zarrs::array::codec::{Bz2Codec, GzipCodec, ZlibCodec};
        let any = codec.as_any();
        if any.is::<GzipCodec>() {
            return Self::Gzip;
        }
        if any.is::<ZlibCodec>() {
            return Self::Zlib;
        }
        if any.is::<Bz2Codec>() {
            return Self::Bz2;
        }
        if any.is::<zarrs::array::codec::Fletcher32Codec>() {
            return Self::Fletcher32;
        }
        if any.is::<zarrs::array::codec::ShuffleCodec>() {
            let config = codec.configuration_v2(&zarrs::array::CodecMetadataOptions::default());
            let size = config.and_then(|c| c.get("elementsize").and_then(serde_json::Value::as_u64));
            if let Some(size) = size.and_then(|s| usize::try_from(s).ok()).filter(|&s| s > 0) {
                return Self::Shuffle(size);
            }
        }
        #[cfg(feature = "c-codecs")]
        {
            use zarrs::array::codec::{BloscCodec, ZstdCodec};
            if any.is::<ZstdCodec>() {
                return Self::Zstd;
            }
            if any.is::<BloscCodec>() {
                return Self::Blosc;
            }
        }
        Self::Other
    }
}

/// One bytes-to-bytes codec with what it decodes to.
#[derive(Debug, Clone)]
struct Stage {
    codec: Arc<dyn BytesToBytesCodecTraits>,
    kind: Kind,
    name: String,
    /// What the codec decodes to, as zarrs describes it (passed to zarrs' decoders).
    decoded: BytesRepresentation,
    /// The most bytes it may decode to.
    bound: u64,
}

/// A tile's codec chain, split into its bytes-to-bytes codecs (decoded here, bounded) and the
/// rest (decoded by zarrs).
#[derive(Debug, Clone)]
pub(super) struct BoundedChain {
    /// The array-to-array and array-to-bytes codecs.
    head: Arc<CodecChain>,
    /// The bytes-to-bytes codecs, in encoding order.
    stages: Vec<Stage>,
}

impl BoundedChain {
    /// Split `chain` for tiles of `tile_shape`. `Err` (a message) when a codec's decoded size
    /// has no bound: such a chain could take any amount of memory for one chunk.
    pub(super) fn new(chain: &CodecChain, tile_shape: &[u64], array: &Array<()>) -> Result<Self, String> {
        let head =
            CodecChain::new(chain.array_to_array_codecs().to_vec(), chain.array_to_bytes_codec().clone(), vec![]);
        let mut repr = head
            .encoded_representation(&super::nz(tile_shape), array.data_type(), array.fill_value())
            .map_err(|e| e.to_string())?;
        let mut stages = Vec::new();
        for codec in chain.bytes_to_bytes_codecs() {
            let name = codec.name_v3().or_else(|| codec.name_v2()).map_or_else(|| "unknown".into(), Cow::into_owned);
            let bound = repr.size().ok_or_else(|| format!("codec {name} has no bound on the bytes it decodes to"))?;
            let next = codec.encoded_representation(&repr);
            stages.push(Stage { codec: codec.clone(), kind: Kind::of(codec.as_ref()), name, decoded: repr, bound });
            repr = next;
        }
        Ok(Self { head: Arc::new(head), stages })
    }

    /// Decode one tile's stored bytes. `Err` is a message for [`super::ZarrArray::decode_err`].
    pub(super) fn decode<'a>(
        &self,
        encoded: &'a [u8],
        tile_shape: &[std::num::NonZeroU64],
        array: &Array<()>,
        opts: &CodecOptions,
    ) -> Result<Cow<'a, [u8]>, String> {
        let mut bytes = Cow::Borrowed(encoded);
        for stage in self.stages.iter().rev() {
            bytes = Cow::Owned(stage.decode(&bytes, opts)?);
        }
        let decoded = self
            .head
            .decode(bytes, tile_shape, array.data_type(), array.fill_value(), opts)
            .map_err(|e| e.to_string())?;
        decoded.into_fixed().map_err(|e| e.to_string())
    }
}

impl Stage {
    fn decode(&self, input: &[u8], opts: &CodecOptions) -> Result<Vec<u8>, String> {
        let cap = usize::try_from(self.bound).map_err(|_| {
            format!("{} may decode to {} bytes, more than this target can address", self.name, self.bound)
        })?;
        let out = match self.kind {
            Kind::Gzip => self.read_bounded(flate2::read::GzDecoder::new(input), cap)?,
            Kind::Zlib => self.read_bounded(flate2::read::ZlibDecoder::new(input), cap)?,
            Kind::Bz2 => self.read_bounded(bzip2::read::BzDecoder::new(input), cap)?,
            #[cfg(feature = "c-codecs")]
            Kind::Zstd => self.zstd(input, cap)?,
            #[cfg(feature = "c-codecs")]
            Kind::Blosc => {
                check_blosc_header(input, self.bound)?;
                self.zarrs(input, opts)?
            }
            Kind::Fletcher32 => fletcher32(input).map_err(|m| format!("{}: {m}", self.name))?.to_vec(),
            Kind::Shuffle(size) => unshuffle(input, size),
            Kind::Other => self.zarrs(input, opts)?,
        };
        if out.len() as u64 > self.bound {
            return Err(self.too_long());
        }
        match self.decoded {
            BytesRepresentation::FixedSize(n) if out.len() as u64 != n => {
                Err(format!("{} decoded {} bytes, expected {n}", self.name, out.len()))
            }
            _ => Ok(out),
        }
    }

    fn too_long(&self) -> String {
        format!("{} decodes to more than the {} bytes this tile can hold", self.name, self.bound)
    }

    /// Read `reader` to its end into one buffer of `cap` bytes, never more: one byte beyond
    /// is a bomb (or a corrupt stream), refused without inflating the rest.
    fn read_bounded(&self, reader: impl Read, cap: usize) -> Result<Vec<u8>, String> {
        let mut out = Vec::with_capacity(cap);
        let mut limited = reader.take(self.bound);
        limited.read_to_end(&mut out).map_err(|e| format!("{}: {e}", self.name))?;
        let mut probe = [0u8; 1];
        match limited.into_inner().read(&mut probe) {
            Ok(0) => Ok(out),
            Ok(_) => Err(self.too_long()),
            Err(e) => Err(format!("{}: {e}", self.name)),
        }
    }

    /// One-shot zstd into `cap` bytes: no window buffer (streaming would allocate the window
    /// the frame declares, up to 128 MiB) and no output sized from the frame's header.
    #[cfg(feature = "c-codecs")]
    fn zstd(&self, input: &[u8], cap: usize) -> Result<Vec<u8>, String> {
        let mut out = Vec::with_capacity(cap);
        with_dctx(|dctx| {
            dctx.decompress(&mut out, input).map_err(|code| match zstd::zstd_safe::get_error_name(code) {
                "Destination buffer is too small" => self.too_long(),
                name => format!("zstd: {name}"),
            })
        })?;
        Ok(out)
    }

    fn zarrs(&self, input: &[u8], opts: &CodecOptions) -> Result<Vec<u8>, String> {
        self.codec
            .decode(Cow::Borrowed(input), &self.decoded, opts)
            .map(Cow::into_owned)
            .map_err(|e| format!("{}: {e}", self.name))
    }
}

/// HDF5's `fletcher32` filter undone: the data without its 4-byte checksum (little-endian, at
/// the end), checked. Written out because zarrs 0.23.14's check skips the last byte of data of
/// an odd length (it tests its loop counter, 0 by then, rather than the length), so HDF5 chunks
/// whose compressed size is odd (half of them) failed as corrupt. As HDF5's own filter
/// (`H5Z_filter_fletcher32`), the checksum is also accepted with the bytes of each 16-bit half
/// swapped, as HDF5 before 1.6.3 wrote it on little-endian machines.
fn fletcher32(encoded: &[u8]) -> Result<&[u8], String> {
    let Some(split) = encoded.len().checked_sub(4) else {
        return Err(format!("{} bytes cannot hold the 4-byte checksum", encoded.len()));
    };
    let (data, stored) = encoded.split_at(split);
    let stored = u32::from_le_bytes(stored.try_into().map_err(|_| "a 4-byte checksum".to_string())?);
    let sum = fletcher32_checksum(data);
    let swapped = ((sum & 0x00ff_00ff) << 8) | ((sum >> 8) & 0x00ff_00ff);
    if stored != sum && stored != swapped {
        return Err(format!("the checksum is {stored:#010x}, the data's is {sum:#010x}: the chunk is corrupt"));
    }
    Ok(data)
}

/// HDF5's shuffle filter undone (`H5Z_filter_shuffle`): byte `j` of every element is in plane
/// `j`, and the bytes after the last whole element (a length that is not a multiple of the
/// element size) follow as they are. Written out because zarrs (and numcodecs) refuse such a
/// length, which HDF5 writes when its checksum comes before the shuffle: netCDF-C puts
/// `fletcher32` first, so a float64 chunk is shuffled with its 4 checksum bytes after it.
fn unshuffle(input: &[u8], size: usize) -> Vec<u8> {
    let elements = input.len() / size;
    if size == 1 || elements <= 1 {
        return input.to_vec();
    }
    let mut out = vec![0u8; input.len()];
    for (j, plane) in input[..elements * size].chunks_exact(elements).enumerate() {
        for (i, &b) in plane.iter().enumerate() {
            out[i * size + j] = b;
        }
    }
    out[elements * size..].copy_from_slice(&input[elements * size..]);
    out
}

/// HDF5's Fletcher-32 (`H5_checksum_fletcher32`): 16-bit big-endian words, a trailing odd byte
/// as the high byte of one more word, sums folded every 360 words.
fn fletcher32_checksum(data: &[u8]) -> u32 {
    let (mut sum1, mut sum2) = (0u32, 0u32);
    let fold = |s: u32| (s & 0xffff) + (s >> 16);
    let words = data.chunks_exact(2);
    let odd = words.remainder().first().copied();
    for block in data.chunks(720).map(|b| b.chunks_exact(2)) {
        for w in block {
            sum1 += u32::from(u16::from_be_bytes([w[0], w[1]]));
            sum2 += sum1;
        }
        (sum1, sum2) = (fold(sum1), fold(sum2));
    }
    if let Some(b) = odd {
        sum1 += u32::from(b) << 8;
        sum2 += sum1;
        (sum1, sum2) = (fold(sum1), fold(sum2));
    }
    (fold(sum2) << 16) | fold(sum1)
}

/// `Err` when `encoded` starts with a blosc header declaring more than `bound` bytes. A
/// 49-byte chunk declaring 700 MB made zarrs allocate 700 MB (found by the `decode_tile`
/// fuzzer).
#[cfg(feature = "c-codecs")]
fn check_blosc_header(encoded: &[u8], bound: u64) -> Result<(), String> {
    // blosc 1 header: version, versionlz, flags, typesize, then nbytes as a little-endian u32.
    let Some(nbytes) = encoded.get(4..8).and_then(|b| <[u8; 4]>::try_from(b).ok()) else { return Ok(()) };
    let nbytes = u64::from(u32::from_le_bytes(nbytes));
    if nbytes > bound {
        return Err(format!(
            "the blosc header declares {nbytes} decoded bytes, more than the {bound} this tile can hold"
        ));
    }
    Ok(())
}

/// Run `f` with this thread's zstd decompression context (created once per thread).
#[cfg(feature = "c-codecs")]
pub(super) fn with_dctx<T>(
    f: impl FnOnce(&mut zstd::zstd_safe::DCtx<'static>) -> Result<T, String>,
) -> Result<T, String> {
    use std::cell::RefCell;
    use zstd::zstd_safe::DCtx;
    thread_local! {
        static DCTX: RefCell<Option<DCtx<'static>>> = const { RefCell::new(None) };
    }
    DCTX.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = DCtx::try_create();
        }
        let dctx = slot.as_mut().ok_or_else(|| "cannot allocate a zstd decompression context".to_string())?;
        f(dctx)
    })
}
