//! `cacheDir` and its flags as this tier opens them: the directory's names, checked.

use insitubatch_core::{CacheFlags, Error, TargetAbilities};

/// `cacheDir` and its flags as this tier opens them: core's [`CacheFlags`] (their rules
/// checked there, with this target's abilities: persisted or read-only, one writer) and the
/// directory's names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpfsDir {
    /// The directory's names under the origin's OPFS root (`"a/b"` → `["a", "b"]`).
    pub dir: Vec<String>,
    /// Read a complete cache; write nothing; a miss is an error. Takes the lock shared.
    pub readonly: bool,
    /// Delete the cached chunks of arrays whose pipeline changed instead of refusing.
    pub reset_stale: bool,
}

impl OpfsDir {
    /// The directory `flags` name, in this origin's private file system.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for what this tier cannot do (`TargetAbilities::WASM`) or a
    /// directory name OPFS refuses.
    pub fn from_flags(flags: &CacheFlags) -> Result<Self, Error> {
        flags.check_for(&TargetAbilities::WASM)?;
        Ok(Self { dir: dir_segments(&flags.dir)?, readonly: flags.readonly, reset_stale: flags.reset_stale })
    }

    /// `a/b`: the directory as the caller names it.
    pub fn dir_name(&self) -> String {
        self.dir.join("/")
    }

    /// `opfs:a/b`: the cache in errors and reports (last in a message).
    pub fn key(&self) -> String {
        format!("opfs:{}", self.dir_name())
    }
}

/// `cacheDir`'s names: non-empty, none `.` or `..` (OPFS's own rule), separated by `/`.
fn dir_segments(dir: &str) -> Result<Vec<String>, Error> {
    let segments: Vec<String> = dir.split('/').filter(|s| !s.is_empty()).map(str::to_string).collect();
    if segments.is_empty() || segments.iter().any(|s| s == "." || s == ".." || s.contains(['\\', '\0'])) {
        return Err(Error::option(
            "cache_dir",
            format!(
                "`cache_dir` names a directory in this origin's private file system: names separated by '/', none of \
                 them '.' or '..' and no '\\', e.g. \"insitubatch/era5\"; got {dir:?}"
            ),
        ));
    }
    Ok(segments)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(json: &str) -> Result<Option<OpfsDir>, String> {
        let spell = |e: Error| e.message_in(&insitubatch_core::camel_case);
        let o = crate::JsOpenOptions::from_json(json).map_err(spell)?;
        let cache = o.to_core().map_err(spell)?.cache;
        cache.as_ref().map(OpfsDir::from_flags).transpose().map_err(spell)
    }

    #[test]
    fn flags_are_checked_by_core_in_js_words() {
        assert_eq!(flags("{}"), Ok(None));
        let f = flags(r#"{"cacheDir":"insitubatch//era5/","persist":true}"#).unwrap().unwrap();
        assert_eq!(f.dir, ["insitubatch", "era5"]);
        assert_eq!((f.readonly, f.reset_stale, f.key().as_str()), (false, false, "opfs:insitubatch/era5"));
        let e = flags(r#"{"persist":true}"#).unwrap_err();
        assert!(e.contains("persist requires cacheDir"), "{e}");
        let e = flags(r#"{"resetStaleCache":true}"#).unwrap_err();
        assert!(e.contains("resetStaleCache requires cacheDir"), "{e}");
        let e = flags(r#"{"cacheDir":"c","readonlyCache":true,"resetStaleCache":true}"#).unwrap_err();
        assert!(e.contains("contradict") && e.ends_with(": c"), "{e}");
        let e = flags(r#"{"cacheDir":"c"}"#).unwrap_err();
        assert!(e.contains("needs persist"), "{e}");
        let e = flags(r#"{"cacheDir":"c","persist":true,"sharedCache":true}"#).unwrap_err();
        assert!(e.contains("sharedCache is not available"), "{e}");
        assert!(flags(r#"{"cacheDir":"c","readonlyCache":true}"#).unwrap().unwrap().readonly);
        for bad in ["", "/", "a/../b", "./a", "a\\b"] {
            let e = flags(&format!(r#"{{"cacheDir":{bad:?},"persist":true}}"#)).unwrap_err();
            assert!(e.contains("names separated by '/'"), "{bad}: {e}");
        }
    }
}
