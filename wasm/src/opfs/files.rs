//! The chunk files: their names (array, pipeline, chunk), header line and commit record, and
//! which fingerprints in a listing are stale.

use std::collections::BTreeSet;

use insitubatch_core::{CommitRecord, DType};
use sha2::{Digest, Sha256};

/// What every chunk file name ends with.
const SUFFIX: &str = ".ibchunk";
/// The header line's length: a multiple of this.
const HEADER_ALIGN: usize = 128;
/// The commit record's length: core's [`CommitRecord`] over header and data, as the native tier's.
pub const TRAILER_LEN: usize = CommitRecord::LEN;

/// The first 16 hex digits of SHA-256 of an array's path. File names carry it so that the
/// directory's listing says which array a file belongs to (the readable part is lossy).
pub fn path_hash(path: &str) -> String {
    Sha256::digest(path.as_bytes())[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// `t2m/level` → `t2m_level`, at most 40 characters: for people reading the directory; the
/// path hash is what identifies the array.
fn safe_name(path: &str) -> String {
    let s: String = path.chars().take(40).map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    if s.is_empty() { "root".into() } else { s }
}

/// The file of chunk `chunk` of the array at `path` under the pipeline `fingerprint`.
pub fn chunk_file_name(path: &str, fingerprint: &str, chunk: u64) -> String {
    format!("{}__{}__{fingerprint}__{chunk}{SUFFIX}", safe_name(path), path_hash(path))
}

/// What a chunk file's name says: its array's path hash, its pipeline and its chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileKey {
    /// [`path_hash`] of the array's path.
    pub path_hash: String,
    /// The array's fingerprint when it was written.
    pub fingerprint: String,
    /// The chunk index.
    pub chunk: u64,
}

/// The key of a chunk file's name; `None` for any other name (the browser's swap files, a
/// user's own files), which the tier never reads.
pub fn parse_chunk_file_name(name: &str) -> Option<FileKey> {
    let stem = name.strip_suffix(SUFFIX)?;
    let mut parts = stem.rsplitn(4, "__");
    let chunk = parts.next()?.parse().ok()?;
    let fingerprint = parts.next()?;
    let path_hash = parts.next()?;
    parts.next()?;
    let hex = |s: &str| s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
    (hex(fingerprint) && hex(path_hash)).then(|| FileKey {
        path_hash: path_hash.to_string(),
        fingerprint: fingerprint.to_string(),
        chunk,
    })
}

/// The header line of a chunk file: the pipeline, chunk, dtype and shape as JSON, padded
/// with spaces to a multiple of 128 bytes, ending in a newline. A revive compares it byte for
/// byte with the one it would write.
pub fn header(fingerprint: &str, chunk: u64, dtype: DType, shape: &[usize]) -> Vec<u8> {
    let json = format!(
        "{{\"insitubatch\":\"opfs-chunk-v1\",\"pipeline\":\"{fingerprint}\",\"chunk\":{chunk},\"dtype\":\"{}\",\
         \"shape\":{shape:?}}}",
        dtype.name()
    );
    let len = (json.len() + 1).div_ceil(HEADER_ALIGN) * HEADER_ALIGN;
    let mut out = json.into_bytes();
    out.resize(len - 1, b' ');
    out.push(b'\n');
    out
}

/// The commit record written after `header` and `data` (core's [`CommitRecord`]: the
/// header names the pipeline and the chunk, so no other part is needed).
pub fn trailer(header: &[u8], data: &[u8]) -> [u8; TRAILER_LEN] {
    *CommitRecord::over(&[header, data]).as_bytes()
}

/// Whether a file read back as `head`, `data` and `tail` is the chunk whose header is
/// `want`: `Err` says what is wrong with it.
///
/// # Errors
/// A header of another pipeline, shape or dtype; no commit record; a checksum that differs.
pub fn verify(head: &[u8], want: &[u8], data: &[u8], tail: &[u8]) -> Result<(), &'static str> {
    if head != want {
        return Err("holds another pipeline, shape or dtype");
    }
    CommitRecord::check(&[head, data], tail)
}

/// The fingerprints other than `fingerprint` that files of the array at `path` were written
/// under: its stale pipelines, in `keys` (the directory's chunk files).
pub fn stale_fingerprints<'a>(
    keys: impl IntoIterator<Item = &'a (String, String)>,
    path: &str,
    fingerprint: &str,
) -> BTreeSet<String> {
    let ph = path_hash(path);
    keys.into_iter().filter(|(p, f)| *p == ph && f != fingerprint).map(|(_, f)| f.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_carry_the_array_pipeline_and_chunk() {
        let name = chunk_file_name("t2m/level", "0123456789abcdef", 42);
        assert!(name.starts_with("t2m_level__") && name.ends_with("__0123456789abcdef__42.ibchunk"), "{name}");
        let k = parse_chunk_file_name(&name).unwrap();
        assert_eq!(k, FileKey { path_hash: path_hash("t2m/level"), fingerprint: "0123456789abcdef".into(), chunk: 42 });
        assert_ne!(path_hash("t2m/level"), path_hash("t2m_level"), "the readable part is lossy, the hash is not");
        // Names with `__` in the path, and long paths, still parse.
        let odd = chunk_file_name("a__b/", "fedcba9876543210", 0);
        assert_eq!(parse_chunk_file_name(&odd).unwrap().chunk, 0);
        let long = "x".repeat(300);
        assert!(chunk_file_name(&long, "fedcba9876543210", 1).len() < 120);
        for other in [
            "t2m.ibchunk.crswap",
            "notes.txt",
            "a__b__c__1.ibchunk",
            "a__0123456789abcdef__0123456789abcdeX__1.ibchunk",
        ] {
            assert_eq!(parse_chunk_file_name(other), None, "{other}");
        }
    }

    #[test]
    fn a_file_reads_back_only_whole_and_committed() {
        let head = header("0123456789abcdef", 3, DType::Float32, &[8, 10, 12]);
        assert_eq!(head.len() % 128, 0);
        assert_eq!(*head.last().unwrap(), b'\n');
        let data: Vec<u8> = (0..8 * 10 * 12 * 4).map(|i| (i % 251) as u8).collect();
        let tail = trailer(&head, &data);
        assert_eq!(verify(&head, &head, &data, &tail), Ok(()));
        // Another pipeline, shape or dtype has another header.
        let other = header("0123456789abcdef", 3, DType::Float32, &[7, 10, 12]);
        assert!(verify(&other, &head, &data, &tail).unwrap_err().contains("another pipeline"));
        // No commit record: the write stopped before it.
        assert!(verify(&head, &head, &data, &[0; TRAILER_LEN]).unwrap_err().contains("commit record"));
        // One byte of the data changed (a torn write the size check did not catch).
        let mut torn = data.clone();
        torn[100] ^= 1;
        assert!(verify(&head, &head, &torn, &tail).unwrap_err().contains("checksum"));
        // A header longer than 128 bytes (many axes) is padded to the next multiple.
        let wide = header("0123456789abcdef", 1, DType::Uint8, &[1; 40]);
        assert_eq!(wide.len() % 128, 0);
        assert!(wide.len() > 128);
    }

    #[test]
    fn stale_means_another_pipeline_of_the_same_path() {
        let keys = [
            (path_hash("t2m"), "1111111111111111".to_string()),
            (path_hash("t2m"), "2222222222222222".to_string()),
            (path_hash("u10"), "3333333333333333".to_string()),
        ];
        let s = stale_fingerprints(keys.iter(), "t2m", "1111111111111111");
        assert_eq!(s.into_iter().collect::<Vec<_>>(), ["2222222222222222"]);
        assert!(stale_fingerprints(keys.iter(), "u10", "3333333333333333").is_empty());
        assert!(stale_fingerprints(keys.iter(), "v", "4444444444444444").is_empty(), "cold, not stale");
    }
}
