//! Opening arrays from storage: one array by path, or a store's arrays by discovery
//! (consolidated metadata, else a listing).

use bytes::Bytes;
use serde_json::Value;

use super::{ZarrArray, join, malformed, normalize_path};
use crate::error::{Error, Result};
use crate::runtime::Storage;

fn storage_err(storage: &dyn Storage, e: &crate::runtime::StorageError, key: &str) -> Error {
    Error::Storage { message: format!("cannot read zarr metadata ({e})"), key: located(storage, key) }
}

fn located(storage: &dyn Storage, key: &str) -> String {
    let loc = storage.location();
    if loc.ends_with('/') { format!("{loc}{key}") } else { format!("{loc}/{key}") }
}

/// Put the store location in front of a metadata error's key.
fn with_location(storage: &dyn Storage, e: Error) -> Error {
    match e {
        Error::Metadata { message, key } => Error::Metadata { message, key: located(storage, &key) },
        other => other,
    }
}

async fn get(storage: &dyn Storage, key: &str) -> Result<Option<Bytes>> {
    storage.get(key).await.map_err(|e| storage_err(storage, &e, key))
}

/// Open one array by path: v3 `{path}/zarr.json`, else v2 `{path}/.zarray` (+ `.zattrs`).
///
/// # Errors
/// [`Error::ArrayNotFound`] naming the path with the store last; [`Error::NotAnArray`] for a group;
/// [`Error::Metadata`] for bad metadata; [`Error::Storage`] when reads fail.
pub async fn open_array(storage: &dyn Storage, path: &str) -> Result<ZarrArray> {
    let path = normalize_path(path);
    if let Some(b) = get(storage, &join(&path, "zarr.json")).await? {
        return ZarrArray::from_v3(&path, &b).map_err(|e| with_location(storage, e));
    }
    if let Some(b) = get(storage, &join(&path, ".zarray")).await? {
        let attrs = get(storage, &join(&path, ".zattrs")).await?;
        return ZarrArray::from_v2(&path, &b, attrs.as_deref()).map_err(|e| with_location(storage, e));
    }
    if get(storage, &join(&path, ".zgroup")).await?.is_some() {
        return Err(Error::NotAnArray(format!(
            "{} is a group, not an array; name one of its arrays",
            located(storage, &join(&path, ".zgroup"))
        )));
    }
    Err(Error::ArrayNotFound {
        message: format!(
            "no zarr array at path {path:?} (neither {} nor {} exists)",
            join(&path, "zarr.json"),
            join(&path, ".zarray")
        ),
        key: storage.location(),
    })
}

/// Open the arrays of the group at the store root.
///
/// `variables = Some(names)`: exactly those, in that order (an explicit coordinate is kept).
/// `None`: discover them (consolidated metadata, else a listing), skip CF coordinates and
/// return the rest in sorted path order, nested groups included.
///
/// # Errors
/// [`Error::Config`] when the store cannot be listed and has no consolidated metadata, or
/// when every array found is a coordinate; otherwise as [`open_array`].
pub async fn open_arrays(storage: &dyn Storage, variables: Option<&[String]>) -> Result<Vec<ZarrArray>> {
    if let Some(names) = variables {
        let mut out = Vec::with_capacity(names.len());
        for n in names {
            out.push(open_array(storage, n).await?);
        }
        return Ok(out);
    }
    let found = discover(storage).await?;
    let (coords, mut data): (Vec<ZarrArray>, Vec<ZarrArray>) = found.into_iter().partition(ZarrArray::is_coordinate);
    if data.is_empty() {
        let skipped: Vec<&str> = coords.iter().map(ZarrArray::path).collect();
        return Err(Error::Config(format!(
            "no data arrays found in {} (skipped coordinates {skipped:?}); pass variables to name the arrays to read",
            storage.location()
        )));
    }
    data.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(data)
}

/// Every array of the store: from consolidated metadata (v3, then v2) when there is some,
/// else from a listing.
async fn discover(storage: &dyn Storage) -> Result<Vec<ZarrArray>> {
    let root_json = get(storage, "zarr.json").await?;
    if let Some(b) = &root_json
        && let Some(found) = from_v3_root(storage, b)?
    {
        return Ok(found);
    }
    if let Some(b) = get(storage, ".zmetadata").await? {
        return from_v2_consolidated(storage, &b);
    }
    from_listing(storage, root_json.is_some()).await
}

/// The root `zarr.json`: an array itself, or a group with consolidated metadata; `None` for
/// a group without it.
fn from_v3_root(storage: &dyn Storage, b: &[u8]) -> Result<Option<Vec<ZarrArray>>> {
    let root: Value = serde_json::from_slice(b).map_err(|e| with_location(storage, malformed(e, "zarr.json")))?;
    if root.get("node_type").and_then(Value::as_str) == Some("array") {
        return ZarrArray::from_v3("", b).map(|a| Some(vec![a])).map_err(|e| with_location(storage, e));
    }
    let Some(Value::Object(meta)) = root.get("consolidated_metadata").and_then(|c| c.get("metadata")) else {
        return Ok(None);
    };
    let mut out = Vec::new();
    for (path, m) in meta {
        if m.get("node_type").and_then(Value::as_str) != Some("array") {
            continue;
        }
        let path = normalize_path(path);
        let key = join(&path, "zarr.json");
        out.push(ZarrArray::from_v3_value(&path, m.clone(), &key).map_err(|e| with_location(storage, e))?);
    }
    Ok(Some(out))
}

/// v2 consolidated metadata (`.zmetadata`).
fn from_v2_consolidated(storage: &dyn Storage, b: &[u8]) -> Result<Vec<ZarrArray>> {
    let zm: Value = serde_json::from_slice(b).map_err(|e| with_location(storage, malformed(e, ".zmetadata")))?;
    let Some(Value::Object(meta)) = zm.get("metadata") else {
        return Err(with_location(storage, malformed("no `metadata` object", ".zmetadata")));
    };
    if let Some(m) = meta.get(".zarray") {
        let attrs = meta.get(".zattrs").cloned();
        return ZarrArray::from_v2_value("", m.clone(), attrs, ".zarray")
            .map(|a| vec![a])
            .map_err(|e| with_location(storage, e));
    }
    let mut out = Vec::new();
    for (k, m) in meta {
        let Some(path) = k.strip_suffix("/.zarray") else { continue };
        let attrs = meta.get(&format!("{path}/.zattrs")).cloned();
        out.push(ZarrArray::from_v2_value(path, m.clone(), attrs, k).map_err(|e| with_location(storage, e))?);
    }
    Ok(out)
}

/// Arrays found by listing the store (v3 `zarr.json` wins over v2 `.zarray` at one path).
async fn from_listing(storage: &dyn Storage, has_root_json: bool) -> Result<Vec<ZarrArray>> {
    let keys = storage.list("").await.map_err(|e| storage_err(storage, &e, ""))?;
    let not_found = || Error::NotFound {
        message: "no Zarr store here (no zarr.json, .zgroup, .zmetadata or any object); check the URL points at the \
                  store's root"
            .into(),
        key: storage.location(),
    };
    if keys.as_ref().is_some_and(Vec::is_empty) {
        return Err(not_found());
    }
    let Some(keys) = keys else {
        if !has_root_json && get(storage, ".zgroup").await?.is_none() && get(storage, ".zarray").await?.is_none() {
            return Err(not_found());
        }
        return Err(Error::Config(format!(
            "the store cannot be listed and has no consolidated metadata (zarr.json consolidated_metadata or \
             .zmetadata), so its arrays cannot be discovered; pass variables to name them: {}",
            storage.location()
        )));
    };
    let mut v3_paths = std::collections::BTreeSet::new();
    let mut v2_paths = std::collections::BTreeSet::new();
    for k in &keys {
        if let Some(p) = k.strip_suffix("/zarr.json") {
            v3_paths.insert(p.to_string());
        } else if let Some(p) = k.strip_suffix("/.zarray") {
            v2_paths.insert(p.to_string());
        } else if k == ".zarray" {
            v2_paths.insert(String::new());
        }
    }
    let mut out = Vec::new();
    for p in &v3_paths {
        let key = join(p, "zarr.json");
        let Some(b) = get(storage, &key).await? else { continue };
        let v: Value = serde_json::from_slice(&b).map_err(|e| with_location(storage, malformed(e, &key)))?;
        if v.get("node_type").and_then(Value::as_str) == Some("array") {
            out.push(ZarrArray::from_v3_value(p, v, &key).map_err(|e| with_location(storage, e))?);
        }
    }
    for p in v2_paths.difference(&v3_paths) {
        let key = join(p, ".zarray");
        let Some(b) = get(storage, &key).await? else { continue };
        let attrs = get(storage, &join(p, ".zattrs")).await?;
        out.push(ZarrArray::from_v2(p, &b, attrs.as_deref()).map_err(|e| with_location(storage, e))?);
    }
    Ok(out)
}
