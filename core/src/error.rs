//! The engine's errors. Every message says what was wrong and what to do, with the key or
//! URL last. Each error has a machine-readable [`ErrorKind`], and an option error
//! ([`Error::InvalidOption`]) names the option it concerns: the bindings pick their exception
//! class (Python), error `kind` (JS) or exit message (the CLI) from the kind, never from the
//! message's text, and spell the option names in an option error's message their own way
//! through one function, [`Error::message_in`] (ARCHITECTURE.md, "Errors").

/// `Result` with the engine's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the engine.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An option the caller passed that cannot be used: out of its bounds, contradicting
    /// another, or naming something the store does not have. `option` is its path in
    /// [`DatasetSpec`](crate::DatasetSpec) (`patch_mode`, `read_policy.backoff_s`).
    #[error("{}", plain(message))]
    InvalidOption {
        /// The option's path in the spec.
        option: String,
        /// What was wrong and what to do, the spec's option names marked with backticks
        /// (`` `patch_mode` ``) so that each binding spells them its own way
        /// ([`Error::message_in`]).
        message: String,
    },
    /// A geometry that cannot be read: bad sample axis, zero chunk, hostile sizes.
    #[error("invalid geometry: {0}")]
    Geometry(String),
    /// A configuration that cannot run, not due to one option (a manifest of another store,
    /// transforms scoped to unknown arrays, ...).
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
    /// No array at the path asked for (insitubatch 0.2.0 raises `KeyError`).
    #[error("{message}: {key}")]
    ArrayNotFound {
        /// What was looked for.
        message: String,
        /// Where.
        key: String,
    },
    /// The path asked for is a group, not an array (insitubatch 0.2.0 raises `TypeError`).
    #[error("{0}")]
    NotAnArray(String),
    /// Something else that does not exist (an array the builder was not given, a store).
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

/// What kind of error an [`Error`] is, as a word (`invalid_option`, `storage`, ...): what a
/// binding picks its exception class or error kind from. New kinds may be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// An option out of its bounds or contradicting another ([`Error::InvalidOption`]).
    InvalidOption,
    /// A configuration that cannot run ([`Error::Config`]).
    Config,
    /// A geometry that cannot be read ([`Error::Geometry`]).
    Geometry,
    /// Malformed or unsupported Zarr metadata ([`Error::Metadata`]).
    Metadata,
    /// No array at a path ([`Error::ArrayNotFound`]).
    ArrayNotFound,
    /// A group where an array was asked for ([`Error::NotAnArray`]).
    NotAnArray,
    /// Something else missing ([`Error::NotFound`]).
    NotFound,
    /// A storage request failed ([`Error::Storage`]).
    Storage,
    /// A chunk could not be decoded ([`Error::Decode`]).
    Decode,
    /// A stall that cannot resolve ([`Error::Stall`]).
    Stall,
    /// A bug ([`Error::Internal`]).
    Internal,
    /// A user transform failed ([`Error::Transform`]).
    Transform,
    /// The disk tier refused ([`Error::Cache`]).
    Cache,
    /// The work was cancelled ([`Error::Cancelled`]).
    Cancelled,
}

impl ErrorKind {
    /// The kind's word, as serde writes it.
    pub fn name(self) -> &'static str {
        match self {
            Self::InvalidOption => "invalid_option",
            Self::Config => "config",
            Self::Geometry => "geometry",
            Self::Metadata => "metadata",
            Self::ArrayNotFound => "array_not_found",
            Self::NotAnArray => "not_an_array",
            Self::NotFound => "not_found",
            Self::Storage => "storage",
            Self::Decode => "decode",
            Self::Stall => "stall",
            Self::Internal => "internal",
            Self::Transform => "transform",
            Self::Cache => "cache",
            Self::Cancelled => "cancelled",
        }
    }

    /// Every kind, for the bindings' tests (each binding maps each one).
    pub const ALL: &[Self] = &[
        Self::InvalidOption,
        Self::Config,
        Self::Geometry,
        Self::Metadata,
        Self::ArrayNotFound,
        Self::NotAnArray,
        Self::NotFound,
        Self::Storage,
        Self::Decode,
        Self::Stall,
        Self::Internal,
        Self::Transform,
        Self::Cache,
        Self::Cancelled,
    ];
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Error {
    /// An option error: `message` names options marked with backticks (`` `patch_mode` ``).
    pub fn option(option: impl Into<String>, message: impl Into<String>) -> Self {
        Self::InvalidOption { option: option.into(), message: message.into() }
    }

    /// This error as one concerning `option`, where it is a configuration error (a rule of
    /// a part of the engine that the option set, such as a `sel` label the coordinate lacks);
    /// any other error as it is.
    #[must_use]
    pub fn for_option(self, option: &str) -> Self {
        match self {
            Self::Config(message) => Self::option(option, message),
            other => other,
        }
    }

    /// The machine-readable kind.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::InvalidOption { .. } => ErrorKind::InvalidOption,
            Self::Geometry(_) => ErrorKind::Geometry,
            Self::Config(_) => ErrorKind::Config,
            Self::Metadata { .. } => ErrorKind::Metadata,
            Self::ArrayNotFound { .. } => ErrorKind::ArrayNotFound,
            Self::NotAnArray(_) => ErrorKind::NotAnArray,
            Self::NotFound { .. } => ErrorKind::NotFound,
            Self::Storage { .. } => ErrorKind::Storage,
            Self::Decode { .. } => ErrorKind::Decode,
            Self::Stall(_) => ErrorKind::Stall,
            Self::Internal(_) => ErrorKind::Internal,
            Self::Transform { .. } => ErrorKind::Transform,
            Self::Cache { .. } => ErrorKind::Cache,
            Self::Cancelled(_) => ErrorKind::Cancelled,
        }
    }

    /// The option an option error concerns (its spec path), `None` for any other error.
    pub fn option_name(&self) -> Option<&str> {
        match self {
            Self::InvalidOption { option, .. } => Some(option),
            _ => None,
        }
    }

    /// The message with each option it names spelled by `spell` (given the option's spec
    /// path: `patch_mode`, `read_policy.backoff_s`): Python keeps it, JS writes
    /// [`camel_case`] (`patchMode`), the CLI its flag (`--patch-mode`). The one place an
    /// option error's text is rendered; `Display` is this with the spec's own names.
    pub fn message_in(&self, spell: &dyn Fn(&str) -> String) -> String {
        match self {
            Self::InvalidOption { message, .. } => render(message, spell),
            other => other.to_string(),
        }
    }
}

/// A spec path in JS's spelling: each part of `read_policy.backoff_s` in camelCase
/// (`readPolicy.backoffS`), as serde's `rename_all = "camelCase"` writes a field: an
/// underscore dropped and the letter after it raised.
pub fn camel_case(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut upper = false;
    for c in path.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// `message` with each name marked `` `like_this` `` replaced by `spell(name)`; a backtick
/// without a closing one is kept.
fn render(message: &str, spell: &dyn Fn(&str) -> String) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(open) = rest.find('`') {
        let Some(len) = rest[open + 1..].find('`') else { break };
        out.push_str(&rest[..open]);
        out.push_str(&spell(&rest[open + 1..open + 1 + len]));
        rest = &rest[open + 1 + len + 1..];
    }
    out.push_str(rest);
    out
}

/// An option error's message with the spec's own names.
fn plain(message: &str) -> String {
    render(message, &str::to_string)
}

impl From<crate::runtime::Cancelled> for Error {
    fn from(c: crate::runtime::Cancelled) -> Self {
        Self::Cancelled(c.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn an_option_error_spells_its_names_per_surface() {
        let e = Error::option("patch_mode", "`patch_mode` must be 'grid' or 'random'; `read_policy.backoff_s` too");
        assert_eq!(e.to_string(), "patch_mode must be 'grid' or 'random'; read_policy.backoff_s too");
        let js = e.message_in(&camel_case);
        assert_eq!(js, "patchMode must be 'grid' or 'random'; readPolicy.backoffS too");
        let flag = e.message_in(&|p: &str| format!("--{}", p.rsplit('.').next().unwrap_or(p).replace('_', "-")));
        assert_eq!(flag, "--patch-mode must be 'grid' or 'random'; --backoff-s too");
        assert_eq!((e.kind(), e.option_name()), (ErrorKind::InvalidOption, Some("patch_mode")));
        assert_eq!(Error::option("x", "a ` alone").to_string(), "a ` alone");
    }

    #[test]
    fn every_kind_has_its_word() {
        for k in ErrorKind::ALL {
            assert_eq!(serde_json::to_value(k).unwrap(), serde_json::Value::from(k.name()));
        }
        assert_eq!(Error::Config("x".into()).for_option("sel").option_name(), Some("sel"));
        assert_eq!(Error::Stall("x".into()).for_option("sel").kind(), ErrorKind::Stall);
    }
}
