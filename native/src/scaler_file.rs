//! The `StandardScaler` file format, in one place: the Python package's `save`/`load` and
//! the CLI's `--scaler` read and write through here.
//!
//! Two layouts, told apart on load by the file's first bytes (a zip is an npz):
//!
//! - **JSON** (ours, exact; any path not ending in `.npz`):
//!   ```json
//!   {"format": "insitubatch_rs.StandardScaler", "version": 2, "eps": "1e-8", "cache_key": null,
//!    "arrays": {"t2m": {"mean": {"dtype": "float32", "shape": [1, 5], "values": ["2.805e2", ...]},
//!                       "std":  {"dtype": "python", "shape": [], "values": ["1.25e1"]}}},
//!    "every_array": null}
//!   ```
//!   Each statistic keeps its dtype (`python` is a Python number, numpy's weak scalar) and
//!   shape. Numbers are decimal strings in Rust's shortest round-trip form, parsed back with
//!   Rust's correctly rounded parser, so every bit returns: serde_json's default float
//!   parser is not exact, and its `float_roundtrip` feature would rebuild every crate that
//!   uses serde_json. Version 1 (float32 values as JSON numbers, one shape per array) is
//!   still read.
//! - **npz** (insitubatch 0.2.0's `save`): `"<array>.mean"` and `"<array>.std"` entries,
//!   statistics only (a loaded scaler has `eps = 1e-8` and no `cache_key`, as in insitubatch
//!   0.2.0). A Python number is written as a 0-d float64, which is what `numpy.savez` makes of
//!   it (and so loads back as float64, in insitubatch 0.2.0 too); bfloat16 as numpy writes an
//!   ml_dtypes bfloat16 array, `<V2`, and a two-byte void is read back as bfloat16. Compressed
//!   npz (`numpy.savez_compressed`) and Fortran-order entries are read.

use std::collections::BTreeMap;
use std::io::{Cursor, Read, Write};
use std::path::Path;

use half::{bf16, f16};
use insitubatch_core::scaler::{ArrayStats, StandardScaler, Stat, StatDType, fortran_to_c};
use serde_json::{Value, json};

/// What `save` writes as `"format"`, so `load` can tell its files from others.
pub const FORMAT: &str = "insitubatch_rs.StandardScaler";
/// The JSON layout's version.
pub const VERSION: u64 = 2;
/// The `eps` of a scaler read from an npz (insitubatch 0.2.0's default).
pub const NPZ_EPS: f64 = 1e-8;

/// Why a scaler file could not be read or written. The path comes last in every message.
#[derive(Debug, thiserror::Error)]
pub enum ScalerFileError {
    /// The file could not be read (missing, unreadable).
    #[error("cannot read the StandardScaler file ({source}): {path}")]
    Read {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file could not be written.
    #[error("cannot write the StandardScaler file ({source}): {path}")]
    Write {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not a scaler this version reads, or the scaler cannot be written in the
    /// layout asked for.
    #[error("{message}: {path}")]
    Invalid {
        /// What is wrong, and what to do.
        message: String,
        /// The file.
        path: String,
    },
}

impl ScalerFileError {
    /// True when the file does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

fn is_npz(path: &Path) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case("npz"))
}

/// Write `scaler` to `path`: insitubatch 0.2.0's npz layout for a `.npz` path, else JSON.
/// Written aside and renamed, so a reader never sees half a file.
///
/// # Errors
/// [`ScalerFileError::Write`] for an OS error; [`ScalerFileError::Invalid`] for an npz of a
/// scaler made for every array (the npz names each array).
pub fn save(scaler: &StandardScaler, path: &Path) -> Result<(), ScalerFileError> {
    let shown = path.display().to_string();
    let bytes = if is_npz(path) {
        to_npz(scaler).map_err(|message| ScalerFileError::Invalid { message, path: shown.clone() })?
    } else {
        to_json(scaler).into_bytes()
    };
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let written = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    written.map_err(|source| {
        let _ = std::fs::remove_file(&tmp);
        ScalerFileError::Write { path: shown, source }
    })
}

/// Read a scaler written by [`save`] (JSON, version 1 or 2), or insitubatch 0.2.0's npz.
///
/// # Errors
/// [`ScalerFileError::Read`] when the file cannot be read; [`ScalerFileError::Invalid`]
/// naming what is wrong with its content.
pub fn load(path: &Path) -> Result<StandardScaler, ScalerFileError> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| ScalerFileError::Read { path: shown.clone(), source })?;
    parse(&bytes, path)
}

/// Read a scaler file's content, as read from `path` (named in errors). Pure, so the fuzzer
/// (`fuzz/fuzz_targets/scaler_file.rs`) feeds it any bytes.
///
/// # Errors
/// [`ScalerFileError::Invalid`] naming what is wrong with the content.
pub fn parse(bytes: &[u8], path: &Path) -> Result<StandardScaler, ScalerFileError> {
    let parsed = if bytes.starts_with(b"PK\x03\x04") { from_npz(bytes) } else { from_json(bytes) };
    parsed.map_err(|message| ScalerFileError::Invalid { message, path: path.display().to_string() })
}

fn number(v: f64) -> String {
    format!("{v:e}")
}

fn stat_json(s: &Stat) -> Value {
    let values: Vec<String> = s.values().iter().map(|&v| number(v)).collect();
    json!({"dtype": s.dtype().name(), "shape": s.shape(), "values": values})
}

fn pair_json(s: &ArrayStats) -> Value {
    json!({"mean": stat_json(&s.mean), "std": stat_json(&s.std)})
}

/// The JSON layout (version 2) of `scaler`.
pub fn to_json(scaler: &StandardScaler) -> String {
    let arrays: serde_json::Map<String, Value> =
        scaler.stats().iter().map(|(k, s)| (k.clone(), pair_json(s))).collect();
    json!({
        "format": FORMAT,
        "version": VERSION,
        "eps": number(scaler.eps()),
        "cache_key": scaler.cache_key(),
        "arrays": arrays,
        "every_array": scaler.every_array().map(pair_json),
    })
    .to_string()
}

const HINT: &str = "write it with StandardScaler.save (or pass an .npz of \"<array>.mean\"/\"<array>.std\")";

/// Parse the JSON layout; every refusal says what is wrong.
fn from_json(bytes: &[u8]) -> Result<StandardScaler, String> {
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| format!("the file is not a saved StandardScaler (not JSON: {e}); {HINT}"))?;
    let obj = v.as_object().ok_or_else(|| format!("the file is JSON but not an object; {HINT}"))?;
    if obj.get("format").and_then(Value::as_str) != Some(FORMAT) {
        return Err(format!("the file is not a saved StandardScaler (no \"format\": {FORMAT:?}); {HINT}"));
    }
    let version = obj.get("version").and_then(Value::as_u64);
    if version.is_some_and(|n| n > VERSION || n == 0) {
        return Err(format!(
            "the file is StandardScaler format version {}; this insitubatch_rs reads versions 1 to {VERSION}, upgrade it \
             to read the file",
            version.unwrap_or_default()
        ));
    }
    let version = version.ok_or_else(|| format!("the file has no integer \"version\"; {HINT}"))?;
    let eps = obj.get("eps").and_then(float).ok_or_else(|| format!("\"eps\" is missing or not a number; {HINT}"))?;
    let cache_key = match obj.get("cache_key") {
        None | Some(Value::Null) => None,
        Some(Value::String(k)) => Some(k.clone()),
        Some(_) => return Err(format!("\"cache_key\" is neither null nor a string; {HINT}")),
    };
    let arrays = obj
        .get("arrays")
        .and_then(Value::as_object)
        .ok_or_else(|| format!("\"arrays\" is missing or not an object; {HINT}"))?;
    let mut stats = BTreeMap::new();
    for (name, entry) in arrays {
        let pair = if version == 1 { pair_v1(entry) } else { pair_v2(entry) };
        stats.insert(name.clone(), pair.map_err(|e| format!("array {name:?}: {e}; {HINT}"))?);
    }
    let every = match obj.get("every_array") {
        None | Some(Value::Null) => None,
        Some(e) => Some(pair_v2(e).map_err(|e| format!("\"every_array\": {e}; {HINT}"))?),
    };
    let scaler = match every {
        Some(e) if stats.is_empty() => StandardScaler::for_every_array(e, eps),
        Some(_) => return Err(format!("the file has both \"arrays\" and \"every_array\"; {HINT}")),
        None => StandardScaler::new(stats, eps),
    };
    Ok(scaler.map_err(|e| e.to_string())?.with_cache_key(cache_key))
}

/// A JSON number, or a decimal string (how version 2 writes them, exactly).
fn float(v: &Value) -> Option<f64> {
    v.as_f64().or_else(|| v.as_str().and_then(|s| s.parse::<f64>().ok()))
}

fn shape(v: Option<&Value>) -> Option<Vec<usize>> {
    v?.as_array()?.iter().map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok())).collect()
}

fn pair_v2(entry: &Value) -> Result<ArrayStats, String> {
    let stat = |key: &str| -> Result<Stat, String> {
        let s = entry.get(key).ok_or_else(|| format!("\"{key}\" is missing"))?;
        let dtype = s.get("dtype").and_then(Value::as_str).and_then(StatDType::from_name).ok_or_else(|| {
            format!("\"{key}\".\"dtype\" is missing or not one of float16, bfloat16, float32, float64, python")
        })?;
        let shape =
            shape(s.get("shape")).ok_or_else(|| format!("\"{key}\".\"shape\" is missing or not a list of sizes"))?;
        let values: Vec<f64> = s
            .get("values")
            .and_then(Value::as_array)
            .and_then(|xs| xs.iter().map(float).collect())
            .ok_or_else(|| format!("\"{key}\".\"values\" is missing or not a list of numbers"))?;
        Stat::new(dtype, shape, values).map_err(|e| format!("{key}: {e}"))
    };
    ArrayStats::new(stat("mean")?, stat("std")?)
}

/// Version 1: float32 values as JSON numbers (each the float64 its float32 is), one shape.
fn pair_v1(entry: &Value) -> Result<ArrayStats, String> {
    let values = |key: &str| -> Result<Vec<f64>, String> {
        entry
            .get(key)
            .and_then(Value::as_array)
            .and_then(|xs| xs.iter().map(|x| x.as_f64().map(|v| f64::from(v as f32))).collect())
            .ok_or_else(|| format!("\"{key}\" is missing or not a list of numbers"))
    };
    let shape = shape(entry.get("shape")).ok_or_else(|| "\"shape\" is missing or not a list of sizes".to_string())?;
    let (m, s) = (values("mean")?, values("std")?);
    let n: usize = shape.iter().product();
    if m.len() != n || s.len() != n {
        return Err(format!("shape {shape:?} holds {n} values but mean has {} and std {}", m.len(), s.len()));
    }
    let stat = |v| Stat::new(StatDType::Float32, shape.clone(), v);
    ArrayStats::new(stat(m)?, stat(s)?)
}

/// insitubatch 0.2.0's npz layout of `scaler` (stored entries, as `numpy.savez` writes).
fn to_npz(scaler: &StandardScaler) -> Result<Vec<u8>, String> {
    if scaler.every_array().is_some() {
        return Err(
            "a StandardScaler for every array has no npz layout (the npz names each array); save it as .json".into()
        );
    }
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, s) in scaler.stats() {
        for (which, stat) in [("mean", &s.mean), ("std", &s.std)] {
            zip.start_file(format!("{name}.{which}.npy"), options).map_err(|e| e.to_string())?;
            zip.write_all(&npy(stat)).map_err(|e| e.to_string())?;
        }
    }
    Ok(zip.finish().map_err(|e| e.to_string())?.into_inner())
}

/// One statistic as a `.npy` (format 1.0, C order, little-endian).
fn npy(s: &Stat) -> Vec<u8> {
    let v = s.values();
    let (descr, data): (&str, Vec<u8>) = match s.dtype() {
        StatDType::Float16 => ("<f2", v.iter().flat_map(|&x| f16::from_f32(x as f32).to_le_bytes()).collect()),
        StatDType::Bfloat16 => ("<V2", v.iter().flat_map(|&x| bf16::from_f32(x as f32).to_le_bytes()).collect()),
        StatDType::Float32 => ("<f4", v.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect()),
        StatDType::Float64 | StatDType::Python => ("<f8", v.iter().flat_map(|&x| x.to_le_bytes()).collect()),
    };
    let dims: Vec<String> = s.shape().iter().map(ToString::to_string).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // numpy pads the header with spaces and a newline so the data starts on a 64-byte boundary.
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&data);
    out
}

/// Read insitubatch 0.2.0's npz layout.
fn from_npz(bytes: &[u8]) -> Result<StandardScaler, String> {
    let mut zip =
        zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| format!("the file is not a readable npz ({e})"))?;
    let (mut mean, mut std) = (BTreeMap::new(), BTreeMap::new());
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).map_err(|e| format!("the npz cannot be read ({e})"))?;
        let key = entry.name().strip_suffix(".npy").unwrap_or(entry.name()).to_string();
        let (name, which) = match key.rsplit_once('.') {
            Some((n, "mean")) => (n.to_string(), &mut mean),
            Some((n, "std")) => (n.to_string(), &mut std),
            _ => {
                return Err(format!(
                    "the npz holds {key:?}, which is not \"<array>.mean\" or \"<array>.std\"; it is not a saved StandardScaler"
                ));
            }
        };
        let mut data = Vec::new();
        entry.read_to_end(&mut data).map_err(|e| format!("the npz entry {key:?} cannot be read ({e})"))?;
        which.insert(name, parse_npy(&data).map_err(|e| format!("the npz entry {key:?}: {e}"))?);
    }
    if mean.is_empty() && std.is_empty() {
        return Err("the npz holds no statistics".into());
    }
    StandardScaler::from_maps(mean, std, NPZ_EPS).map_err(|e| e.to_string())
}

/// Parse one `.npy` holding a float16, bfloat16 (`V2`), float32 or float64 array.
///
/// The header is a Python dict literal with three keys that numpy always writes the same
/// way; reading those three here is a few lines, where a Python-literal parser
/// (`py_literal`, via `ndarray-npy`) would add a parser generator to the build.
fn parse_npy(b: &[u8]) -> Result<Stat, String> {
    if !b.starts_with(b"\x93NUMPY") || b.len() < 10 {
        return Err("not a .npy".into());
    }
    let (len, start) = match b[6] {
        1 => (usize::from(u16::from_le_bytes([b[8], b[9]])), 10),
        2 | 3 if b.len() >= 12 => (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12),
        v => return Err(format!("npy format version {v} is not read")),
    };
    let header = b.get(start..start + len).and_then(|h| std::str::from_utf8(h).ok()).ok_or("a truncated npy header")?;
    let descr = header_value(header, "descr").map(|d| d.trim_matches(|c| c == '\'' || c == '"')).ok_or("no 'descr'")?;
    let fortran = header_value(header, "fortran_order").ok_or("no 'fortran_order'")? == "True";
    let dims = header_value(header, "shape").ok_or("no 'shape'")?;
    let shape = dims
        .trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| d.parse::<usize>().map_err(|_| format!("shape {dims} is not a tuple of sizes")))
        .collect::<Result<Vec<usize>, String>>()?;
    let (big, kind) = match descr.split_at_checked(1) {
        Some((">", k)) => (true, k),
        Some(("<" | "|" | "=", k)) => (false, k),
        _ => (false, descr),
    };
    let data = &b[start + len..];
    let (dtype, size) = match kind {
        "f2" => (StatDType::Float16, 2),
        "V2" => (StatDType::Bfloat16, 2),
        "f4" => (StatDType::Float32, 4),
        "f8" => (StatDType::Float64, 8),
        _ => return Err(format!("it holds {descr} data; a statistic is float16, bfloat16, float32 or float64")),
    };
    let n: usize = shape.iter().product();
    if data.len() != n * size {
        return Err(format!("shape {shape:?} of {descr} needs {} bytes, the entry has {}", n * size, data.len()));
    }
    let values: Vec<f64> = data
        .chunks_exact(size)
        .map(|c| {
            let mut w = [0u8; 8];
            w[..size].copy_from_slice(c);
            if big {
                w[..size].reverse();
            }
            match dtype {
                StatDType::Float16 => f16::from_le_bytes([w[0], w[1]]).to_f64(),
                StatDType::Bfloat16 => bf16::from_le_bytes([w[0], w[1]]).to_f64(),
                StatDType::Float32 => f64::from(f32::from_le_bytes([w[0], w[1], w[2], w[3]])),
                _ => f64::from_le_bytes(w),
            }
        })
        .collect();
    let values = if fortran { fortran_to_c(&shape, values)? } else { values };
    Stat::new(dtype, shape, values)
}

/// The text of `'key': value` in a npy header dict, up to the next top-level comma.
fn header_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let at = header.find(&format!("'{key}'")).or_else(|| header.find(&format!("\"{key}\"")))?;
    let rest = header[at + key.len() + 2..].trim_start().strip_prefix(':')?.trim_start();
    let end = if rest.starts_with('(') { rest.find(')')? + 1 } else { rest.find([',', '}'])? };
    Some(rest[..end].trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scaler() -> StandardScaler {
        let stat = |d, shape: &[usize], v: &[f64]| Stat::new(d, shape.to_vec(), v.to_vec()).unwrap();
        let mean = BTreeMap::from([
            ("t2m".to_string(), stat(StatDType::Float32, &[1, 3], &[f64::from(0.1f32), 2.5, -3.0])),
            ("u10".to_string(), stat(StatDType::Float64, &[2, 1], &[0.1, 1e-300])),
            ("v10".to_string(), stat(StatDType::Float16, &[], &[f16::from_f32(0.1).to_f64()])),
            ("w".to_string(), stat(StatDType::Bfloat16, &[2], &[bf16::from_f32(0.1).to_f64(), 3.0])),
        ]);
        let std = BTreeMap::from([
            ("t2m".to_string(), Stat::python(0.3).unwrap()),
            ("u10".to_string(), stat(StatDType::Float64, &[1], &[std::f64::consts::PI])),
            ("v10".to_string(), stat(StatDType::Float32, &[1, 1], &[2.0])),
            ("w".to_string(), stat(StatDType::Bfloat16, &[], &[1.5])),
        ]);
        StandardScaler::from_maps(mean, std, 1.0e-7).unwrap().with_cache_key(Some("v1".into()))
    }

    #[test]
    fn json_round_trips_every_bit_dtype_and_shape() {
        let s = scaler();
        assert_eq!(from_json(to_json(&s).as_bytes()).unwrap(), s);
        let every = StandardScaler::for_every_array(
            ArrayStats::new(Stat::python(280.0).unwrap(), Stat::python(10.0).unwrap()).unwrap(),
            1e-8,
        )
        .unwrap();
        assert_eq!(from_json(to_json(&every).as_bytes()).unwrap(), every);
        assert!(to_npz(&every).unwrap_err().contains("save it as .json"));
    }

    #[test]
    fn npz_round_trips_statistics_with_python_numbers_as_float64() {
        let s = scaler();
        let back = from_npz(&to_npz(&s).unwrap()).unwrap();
        assert_eq!(back.eps(), NPZ_EPS);
        assert_eq!(back.cache_key(), None);
        for (name, st) in s.stats() {
            let b = &back.stats()[name];
            assert_eq!(b.mean, st.mean, "{name}");
            assert_eq!(b.std.values(), st.std.values(), "{name}");
            assert_eq!(b.std.shape(), st.std.shape(), "{name}");
        }
        assert_eq!(back.stats()["t2m"].std.dtype(), StatDType::Float64, "a Python number comes back as numpy saved it");
    }

    fn raw_npy(descr: &str, fortran: &str, data: &[u8]) -> Vec<u8> {
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        let h = format!("{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': (2, 2), }}          \n");
        b.extend_from_slice(&(h.len() as u16).to_le_bytes());
        b.extend_from_slice(h.as_bytes());
        b.extend_from_slice(data);
        b
    }

    #[test]
    fn npy_headers_as_numpy_writes_them_parse() {
        let data: Vec<u8> = [1.0f32, 3.0, 2.0, 4.0].iter().flat_map(|v| v.to_be_bytes()).collect();
        let s = parse_npy(&raw_npy(">f4", "True", &data)).unwrap();
        assert_eq!(
            (s.dtype(), s.shape(), s.values()),
            (StatDType::Float32, &[2usize, 2][..], &[1.0, 2.0, 3.0, 4.0][..])
        );
        assert!(parse_npy(&raw_npy("<i4", "False", &data)).unwrap_err().contains("<i4"));
        assert!(parse_npy(&raw_npy("<f8", "False", &data)).unwrap_err().contains("needs 32 bytes"));
    }
}
