//! Several stores read as one: each under a name of its own, its keys under `name/`.
//!
//! Variables joined from different stores (ERA5 with static fields in another bucket, say)
//! become arrays of one storage (`era5/t2m`, `static/lsm`), so everything above the storage
//! seam is unchanged: one plan, one `max_inflight` budget, one byte budget, one disk tier.
//! The builder checks what a join needs (`dataset/build/`): the sample-axis lengths agree
//! and, where each store has the sample axis's coordinate, so do its values.
//!
//! Hand-written: object_store's prefix store maps one store under a prefix, not several
//! stores under one root, and the engine's storage seam is its own trait.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::runtime::{Body, BoxFuture, ByteRange, Storage, StorageError};

/// Stores under names: the key `name/rest` is `rest` in the store called `name`.
#[derive(Debug)]
pub struct JoinedStorage {
    mounts: Vec<(String, Arc<dyn Storage>)>,
}

impl JoinedStorage {
    /// Join `mounts` (name, store), in the order given.
    ///
    /// # Errors
    /// [`Error::Config`] for no stores, or a name that is empty, `.`/`..`, holds a `/` or is
    /// given twice.
    pub fn new(mounts: Vec<(String, Arc<dyn Storage>)>) -> Result<Self> {
        if mounts.is_empty() {
            return Err(Error::Config("joining stores needs at least one { name: store }".into()));
        }
        for (i, (name, storage)) in mounts.iter().enumerate() {
            let metadata_name = name == "zarr.json" || name.starts_with(".z");
            if name.is_empty() || name == "." || name == ".." || name.contains('/') || metadata_name {
                return Err(Error::Config(format!(
                    "a joined store's name is a path segment (no '/', not empty, '.', '..', or a Zarr metadata \
                     name such as zarr.json or .zgroup), got {name:?}: {}",
                    storage.location()
                )));
            }
            if mounts[..i].iter().any(|(n, _)| n == name) {
                return Err(Error::Config(format!("the store name {name:?} is given twice; give each store its own")));
            }
        }
        Ok(Self { mounts })
    }

    /// The root `zarr.json` of a join: a group (of stores) without consolidated metadata, so
    /// discovery lists the join ([`Self::list_all`]) and, where it cannot, asks for the
    /// arrays to be named.
    const ROOT_GROUP: &'static [u8] = br#"{"zarr_format": 3, "node_type": "group", "attributes": {}}"#;

    /// The store a key belongs to and the key inside it; `None` for a key under no name.
    fn route<'k>(&self, key: &'k str) -> Option<(&dyn Storage, &'k str)> {
        let (name, rest) = key.split_once('/').unwrap_or((key, ""));
        self.mounts.iter().find(|(n, _)| n == name).map(|(_, s)| (s.as_ref(), rest))
    }

    /// Every store's keys, each under its name (for a store that cannot list, the metadata
    /// keys of its consolidated metadata: [`keys_or_metadata_keys`]); `None` when a store can neither
    /// list nor has consolidated metadata.
    async fn list_all(&self) -> std::result::Result<Option<Vec<String>>, StorageError> {
        let mut out = Vec::new();
        for (name, storage) in &self.mounts {
            let Some(keys) = keys_or_metadata_keys(storage.as_ref()).await? else { return Ok(None) };
            out.extend(keys.into_iter().map(|k| format!("{name}/{k}")));
        }
        Ok(Some(out))
    }
}

/// A store's keys; for a store that cannot list (plain HTTP), the keys of the array
/// metadata its consolidated metadata names (v3 `zarr.json`, then v2 `.zmetadata`). Discovery
/// over a join lists the join (`zarr/open.rs` `from_listing`), so such a store is found by its
/// consolidated metadata, as when it is read alone.
pub(crate) async fn keys_or_metadata_keys(
    storage: &dyn Storage,
) -> std::result::Result<Option<Vec<String>>, StorageError> {
    if let Some(keys) = storage.list("").await? {
        return Ok(Some(keys));
    }
    let json = |b: Option<bytes::Bytes>| b.and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
    if let Some(root) = json(storage.get("zarr.json").await?) {
        if root.get("node_type").and_then(|t| t.as_str()) == Some("array") {
            return Ok(Some(vec!["zarr.json".into()]));
        }
        if let Some(meta) = root.pointer("/consolidated_metadata/metadata").and_then(|m| m.as_object()) {
            let arrays = meta.iter().filter(|(_, m)| m.get("node_type").and_then(|t| t.as_str()) == Some("array"));
            return Ok(Some(arrays.map(|(path, _)| format!("{path}/zarr.json")).collect()));
        }
    }
    if let Some(meta) = json(storage.get(".zmetadata").await?).and_then(|m| m.get("metadata").cloned())
        && let Some(meta) = meta.as_object()
    {
        return Ok(Some(meta.keys().filter(|k| k.ends_with(".zarray")).cloned().collect()));
    }
    Ok(None)
}

impl Storage for JoinedStorage {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, std::result::Result<Option<bytes::Bytes>, StorageError>> {
        self.read(key, None)
    }

    fn get_range<'a>(
        &'a self,
        key: &'a str,
        range: ByteRange,
    ) -> BoxFuture<'a, std::result::Result<Option<bytes::Bytes>, StorageError>> {
        self.read(key, Some(range))
    }

    /// Keys under `prefix`, each under its store's name. At the root, a store that cannot
    /// list answers with the array metadata keys its consolidated metadata names.
    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, std::result::Result<Option<Vec<String>>, StorageError>> {
        Box::pin(async move {
            if prefix.is_empty() {
                return self.list_all().await;
            }
            let Some((storage, rest)) = self.route(prefix) else { return Ok(Some(Vec::new())) };
            let name = prefix.split_once('/').map_or(prefix, |(n, _)| n);
            Ok(storage.list(rest).await?.map(|keys| keys.into_iter().map(|k| format!("{name}/{k}")).collect()))
        })
    }

    /// `join(name=location, ...)`: every store, so a message names each.
    fn location(&self) -> String {
        let parts: Vec<String> = self.mounts.iter().map(|(n, s)| format!("{n}={}", s.location())).collect();
        format!("join({})", parts.join(", "))
    }

    /// Local only when every store is.
    fn reads_are_local(&self) -> bool {
        self.mounts.iter().all(|(_, s)| s.reads_are_local())
    }

    fn start_read<'a>(
        &'a self,
        key: &'a str,
        range: Option<ByteRange>,
    ) -> BoxFuture<'a, std::result::Result<Option<Body<'a>>, StorageError>> {
        match self.route(key) {
            Some((storage, rest)) => storage.start_read(rest, range),
            None => Box::pin(async move { Ok(self.read(key, range).await?.map(crate::runtime::ready_body)) }),
        }
    }

    fn read<'a>(
        &'a self,
        key: &'a str,
        range: Option<ByteRange>,
    ) -> BoxFuture<'a, std::result::Result<Option<bytes::Bytes>, StorageError>> {
        match self.route(key) {
            Some((storage, rest)) => storage.read(rest, range),
            None if key == "zarr.json" && range.is_none() => {
                Box::pin(async { Ok(Some(bytes::Bytes::from_static(Self::ROOT_GROUP))) })
            }
            None => Box::pin(async { Ok(None) }),
        }
    }

    /// Only when every store answers before its body: the engine sizes its hedging timeout by
    /// this, and a store that does not would be hedged too early.
    fn answers_before_body(&self) -> bool {
        self.mounts.iter().all(|(_, s)| s.answers_before_body())
    }

    /// A chunk of a store that is a range of another of its objects (a reference set's chunk
    /// in its file): that object, under the store's name.
    fn locate<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, std::result::Result<Option<crate::runtime::Location>, StorageError>> {
        let Some((storage, rest)) = self.route(key) else { return Box::pin(async { Ok(None) }) };
        let name = &key[..key.len() - rest.len()];
        Box::pin(async move {
            let located = storage.locate(rest).await?;
            Ok(located.map(|l| l.map_object(|o| format!("{name}{o}"))))
        })
    }

    /// An object that stands for a file of a reference set is named by its store (the file's
    /// URL); other keys as before, under the join's location.
    fn key_url(&self, key: &str) -> String {
        match self.route(key) {
            Some((storage, rest)) if rest.starts_with(crate::refs::FILE_OBJECT) => storage.key_url(rest),
            _ => crate::runtime::join_url(&self.location(), key),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{MemoryStorage, SimExecutor};

    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn two() -> JoinedStorage {
        let a = MemoryStorage::new();
        a.insert("zarr.json", "a-root");
        a.insert("t2m/c/0", "a-chunk");
        let b = MemoryStorage::new();
        b.insert("lsm/c/0", "b-chunk");
        JoinedStorage::new(vec![("era5".into(), Arc::new(a)), ("static".into(), Arc::new(b))]).unwrap()
    }

    #[test]
    fn keys_route_to_their_store_and_listing_names_each() {
        let j = two();
        let sim = SimExecutor::new();
        let (chunk, other, root, missing, all, under) = sim
            .run(
                async move {
                    (
                        j.get("era5/t2m/c/0").await.unwrap(),
                        j.get("static/lsm/c/0").await.unwrap(),
                        j.get("zarr.json").await.unwrap(),
                        j.get("nowhere/t2m/c/0").await.unwrap(),
                        j.list("").await.unwrap().unwrap(),
                        j.list("static/lsm").await.unwrap().unwrap(),
                    )
                },
                std::time::Duration::from_secs(5),
            )
            .unwrap();
        assert_eq!(chunk.as_deref(), Some(&b"a-chunk"[..]));
        assert_eq!(other.as_deref(), Some(&b"b-chunk"[..]));
        assert!(
            root.is_some_and(|r| r.starts_with(br#"{"zarr_format": 3, "node_type": "group""#)),
            "a group of stores"
        );
        assert_eq!(missing, None);
        let mut all = all;
        all.sort();
        assert_eq!(all, ["era5/t2m/c/0", "era5/zarr.json", "static/lsm/c/0"]);
        assert_eq!(under, ["static/lsm/c/0"]);
    }

    #[test]
    fn bad_names_are_refused_saying_which() {
        let s = || Arc::new(MemoryStorage::new()) as Arc<dyn Storage>;
        for bad in ["", ".", "..", "a/b", "zarr.json", ".zgroup"] {
            let e = JoinedStorage::new(vec![(bad.into(), s())]).unwrap_err().to_string();
            assert!(e.contains("path segment"), "{e}");
        }
        let e = JoinedStorage::new(vec![("a".into(), s()), ("a".into(), s())]).unwrap_err().to_string();
        assert!(e.contains("given twice"), "{e}");
        assert!(JoinedStorage::new(vec![]).is_err());
    }
}
