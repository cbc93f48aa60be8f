//! The engine's errors. Every message says what was wrong and what to do, with the key or
//! URL last. Variants map onto Python exception classes in the bindings: `Config` and
//! `Geometry` → `ValueError`; `Storage`, `NotFound`, `Metadata` and `Decode` → an `OSError`
//! subclass (`InsitubatchIOError`); the others (`Stall`, `Internal`, `Cache`, ...) → `RuntimeError`.

/// `Result` with the engine's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the engine.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A geometry that cannot be read: bad sample axis, zero chunk, hostile sizes.
    #[error("invalid geometry: {0}")]
    Geometry(String),
    /// A configuration that cannot run (bad fractions, budget below the floor, ...).
    #[error("{0}")]
    Config(String),
    /// Zarr metadata that is malformed or uses something we cannot decode.
    #[error("{message}: {key}")]
    Metadata {
        /// What is wrong and what to do.
        message: String,
        /// The metadata key or URL.
        key: String,
    },
    /// An array or group that does not exist.
    #[error("{message}: {key}")]
    NotFound {
        /// What was looked for.
        message: String,
        /// Where.
        key: String,
    },
    /// A storage request failed (after retries, for transient failures).
    #[error("{message}: {key}")]
    Storage {
        /// What failed.
        message: String,
        /// The object key or URL.
        key: String,
    },
    /// A stored chunk could not be decoded (corrupt, truncated, wrong codec).
    #[error("{message}: {key}")]
    Decode {
        /// What failed, and the `on_bad_chunk` hint.
        message: String,
        /// The chunk key.
        key: String,
    },
    /// A stall that cannot resolve, proved rather than timed out.
    #[error("{0}")]
    Stall(String),
    /// An invariant of the engine broke: a bug, never the caller's input.
    #[error("internal error: {0}; this is a bug in insitubatch, please report it with this message")]
    Internal(String),
    /// A user transform failed.
    #[error("transform {name} failed: {message}")]
    Transform {
        /// The transform's name.
        name: String,
        /// Its error.
        message: String,
    },
    /// The disk tier refused (held lock, stale or unreadable log, miss in a read-only cache).
    #[error("{message}: {key}")]
    Cache {
        /// What is wrong and what to do.
        message: String,
        /// The cache directory or file.
        key: String,
    },
    /// The work was cancelled (the dataset was closed or the runtime shut down).
    #[error("cancelled: {0}")]
    Cancelled(String),
}

impl From<crate::runtime::Cancelled> for Error {
    fn from(c: crate::runtime::Cancelled) -> Self {
        Self::Cancelled(c.to_string())
    }
}
