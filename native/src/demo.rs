//! A small ERA5-like Zarr v3 store, written with zarrs by our own code: `t2m` and `u10`
//! (float32, `(time, lat, lon)`), coordinates `time`, `lat`, `lon`, zstd level 3, and
//! consolidated metadata in the root `zarr.json`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};
use zarrs::array::{Array, ArrayMetadata};

use zarrs::filesystem::FilesystemStore;

use crate::NativeError;

/// Samples on the time axis of the full demo store.
pub const DEMO_TIME: u64 = 360;
/// Latitudes (90 … -90, every 2°).
pub const DEMO_LAT: u64 = 91;
/// Longitudes (0 … 358, every 2°).
pub const DEMO_LON: u64 = 180;

/// `${INSITUBATCH_CACHE:-$HOME/.cache/insitubatch}/demo/era5_demo.zarr`.
pub fn default_demo_path() -> PathBuf {
    let base = std::env::var_os("INSITUBATCH_CACHE").map_or_else(
        || {
            std::env::var_os("HOME")
                .map_or_else(|| PathBuf::from("."), PathBuf::from)
                .join(".cache")
                .join("insitubatch")
        },
        PathBuf::from,
    );
    base.join("demo").join("era5_demo.zarr")
}

/// Write the demo store into `dir` (a `.zarr` directory) unless it is already complete.
///
/// # Errors
/// [`NativeError::Demo`] when the directory cannot be written.
pub fn write_demo_store(dir: &Path) -> Result<PathBuf, NativeError> {
    write_demo_store_sized(dir, DEMO_TIME)
}

/// Deterministic noise in `[-0.5, 0.5)` from a 64-bit hash (splitmix64).
pub fn noise(i: u64) -> f32 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    ((z >> 40) as f32 / (1u64 << 24) as f32) - 0.5
}

/// The value of `var` (`t2m` or `u10`) at `(t, y, x)`.
pub fn demo_value(var: &str, t: u64, y: u64, x: u64) -> f32 {
    let lat = (90.0 - 2.0 * y as f32).to_radians();
    let lon = (2.0 * x as f32).to_radians();
    let day = t as f32 * std::f32::consts::TAU / 365.0;
    let idx = (t * DEMO_LAT + y) * DEMO_LON + x;
    match var {
        "t2m" => 273.15 + 30.0 * lat.cos() - 10.0 * lat.sin() * day.cos() + 3.0 * (lon + day).sin() + noise(idx),
        _ => 8.0 * (2.0 * lat).sin() * (lon - 0.5 * day).cos() + 2.0 * lat.cos() + noise(idx ^ (1 << 40)),
    }
}

fn err(dir: &Path, e: impl std::fmt::Display) -> NativeError {
    NativeError::Demo { message: format!("cannot write the demo store ({e})"), path: dir.display().to_string() }
}

fn array_meta(shape: &[u64], chunks: &[u64], dtype: &str, fill: Value, dims: &[&str], attrs: Value) -> Value {
    json!({
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": fill,
        "codecs": [
            {"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "zstd", "configuration": {"level": 3, "checksum": false}}
        ],
        "attributes": attrs,
        "dimension_names": dims,
    })
}

/// As [`write_demo_store`] with `n_time` samples (tests use a short store).
///
/// # Errors
/// [`NativeError::Demo`] when the directory cannot be written.
pub fn write_demo_store_sized(dir: &Path, n_time: u64) -> Result<PathBuf, NativeError> {
    let marker = dir.join(".complete");
    if marker.exists() {
        return Ok(dir.to_path_buf());
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| err(dir, e))?;
    }
    std::fs::create_dir_all(dir).map_err(|e| err(dir, e))?;
    let store = Arc::new(FilesystemStore::new(dir).map_err(|e| err(dir, e))?);
    let (nt, ny, nx) = (n_time, DEMO_LAT, DEMO_LON);
    let dims3 = ["time", "lat", "lon"];
    let mut consolidated = serde_json::Map::new();

    let mut write = |path: &str, meta: Value, data: Vec<u8>| -> Result<(), NativeError> {
        let metadata: ArrayMetadata = serde_json::from_value(meta.clone()).map_err(|e| err(dir, e))?;
        let array = Array::new_with_metadata(store.clone(), &format!("/{path}"), metadata).map_err(|e| err(dir, e))?;
        array.store_metadata().map_err(|e| err(dir, e))?;
        array
            .store_array_subset(&array.subset_all(), zarrs::array::ArrayBytes::new_flen(data))
            .map_err(|e| err(dir, e))?;
        consolidated.insert(path.to_string(), meta);
        Ok(())
    };

    let field = |var: &str| -> Vec<u8> {
        let mut v = Vec::with_capacity((nt * ny * nx) as usize * 4);
        for t in 0..nt {
            for y in 0..ny {
                for x in 0..nx {
                    v.extend_from_slice(&demo_value(var, t, y, x).to_le_bytes());
                }
            }
        }
        v
    };
    let t2m_attrs = json!({"long_name": "2 metre temperature", "units": "K"});
    let u10_attrs = json!({"long_name": "10 metre U wind component", "units": "m s**-1"});
    write("t2m", array_meta(&[nt, ny, nx], &[8, ny, nx], "float32", json!("NaN"), &dims3, t2m_attrs), field("t2m"))?;
    write("u10", array_meta(&[nt, ny, nx], &[12, 46, 90], "float32", json!("NaN"), &dims3, u10_attrs), field("u10"))?;
    let time: Vec<u8> = (0..nt).flat_map(|t| (t as i64 * 24).to_le_bytes()).collect();
    write(
        "time",
        array_meta(
            &[nt],
            &[nt],
            "int64",
            json!(0),
            &["time"],
            json!({"units": "hours since 2000-01-01", "calendar": "proleptic_gregorian"}),
        ),
        time,
    )?;
    let lat: Vec<u8> = (0..ny).flat_map(|y| (90.0f32 - 2.0 * y as f32).to_le_bytes()).collect();
    write("lat", array_meta(&[ny], &[ny], "float32", json!("NaN"), &["lat"], json!({"units": "degrees_north"})), lat)?;
    let lon: Vec<u8> = (0..nx).flat_map(|x| (2.0 * x as f32).to_le_bytes()).collect();
    write("lon", array_meta(&[nx], &[nx], "float32", json!("NaN"), &["lon"], json!({"units": "degrees_east"})), lon)?;

    let root = json!({
        "zarr_format": 3,
        "node_type": "group",
        "attributes": {"title": "insitubatch ERA5-like demo", "source": "insitubatch-native demo.rs (synthetic)"},
        "consolidated_metadata": {"kind": "inline", "must_understand": false, "metadata": consolidated},
    });
    let root = serde_json::to_vec_pretty(&root).map_err(|e| err(dir, e))?;
    std::fs::write(dir.join("zarr.json"), root).map_err(|e| err(dir, e))?;
    std::fs::write(&marker, b"").map_err(|e| err(dir, e))?;
    Ok(dir.to_path_buf())
}
