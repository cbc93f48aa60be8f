//! The spec walk on the CLI (issue #46): every case of `tests/options/cases.json`, the one
//! table of options every surface walks (Python, Node, the browser, here), as the CLI's flags
//! over the committed store `tests/options/store.zarr`. An accepted case's train epoch has the
//! table's digest (`bench --digest`: its sample indices and bytes), so the CLI, Python and
//! Node give the same batches for the same options; a refused one exits with the table's
//! kind (`error[KIND]`) and names its option as the CLI spells it (`--patch-mode`).
//!
//! Each accepted case is also opened through the Rust API (`insitubatch_native::open` with the
//! case's options read into core's `DatasetSpec` by serde), which gives the digest of the cases
//! the CLI has no flags for (labelled variables, hedging fields); the CLI's must equal it.
//! `IB_BLESS=1 cargo test -p insitubatch-native --test options` writes those digests into the
//! table (after a change that is meant to change batches; the other surfaces then compare
//! against them).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Map, Value, json};

/// Run the `insitubatch` binary with `args` (warnings only in its log).
fn cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_insitubatch")).args(args).env("RUST_LOG", "warn").output().expect("start")
}

/// The repository's root.
fn root() -> PathBuf {
    let native = Path::new(env!("CARGO_MANIFEST_DIR"));
    native.parent().expect("native/ is in the repository").to_path_buf()
}

fn table_path() -> PathBuf {
    root().join("tests/options/cases.json")
}

/// The flag of a spec option (its path), as the CLI spells it: `--` and the last part in
/// kebab-case, but where the CLI names it otherwise.
fn flag(path: &str) -> String {
    let name = path.rsplit('.').next().unwrap_or(path);
    match name {
        "shuffle" => "--no-shuffle".into(),
        "variables" => "--var".into(),
        "storage_options" => "--storage-option".into(),
        "hedge" => "--no-hedge".into(),
        other => format!("--{}", other.replace('_', "-")),
    }
}

/// A scalar as a flag's value.
fn word(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `{axis: n}` as `AXIS=N,...`.
fn axis_sizes(v: &Value) -> String {
    let m = v.as_object().expect("an object of axis sizes");
    m.iter().map(|(k, n)| format!("{k}={n}")).collect::<Vec<_>>().join(",")
}

/// The CLI's arguments for `options` (the case's over the table's base), `Err` with why for
/// an option the CLI does not take in that form. Files of per-sample values and the cache
/// directory go in `dir`.
fn args(options: &Map<String, Value>, dir: &Path) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    // `--flag=value`: a value may start with `-` (a negative duration).
    let mut push = |f: String, v: Option<String>| out.push(v.map_or_else(|| f.clone(), |v| format!("{f}={v}")));
    for (key, v) in options {
        match (key.as_str(), v) {
            ("shuffle", Value::Bool(false)) => push(flag(key), None),
            ("shuffle", Value::Bool(true)) => {}
            (_, Value::Bool(true)) => push(flag(key), None),
            (_, Value::Bool(false)) => {}
            ("fractions" | "sample_range", Value::Array(a)) => {
                push(flag(key), Some(a.iter().map(word).collect::<Vec<_>>().join(",")));
            }
            ("variables", Value::Array(paths)) => paths.iter().for_each(|p| push(flag(key), Some(word(p)))),
            ("sel", Value::Object(m)) => {
                for (dim, pick) in m {
                    let text = match pick {
                        Value::Array(r) => format!("{dim}={}", r.iter().map(word).collect::<Vec<_>>().join(",")),
                        Value::Object(l) => {
                            let labels = l["labels"].as_array().expect("labels");
                            format!("{dim}=[{}]", labels.iter().map(word).collect::<Vec<_>>().join(","))
                        }
                        other => return Err(format!("a sel pick of the form {other}")),
                    };
                    push(flag(key), Some(text));
                }
            }
            ("sample_mask" | "sample_weights", Value::Array(values)) => {
                let text: Vec<String> = values
                    .iter()
                    .map(|x| match x {
                        Value::Bool(b) => u8::from(*b).to_string(),
                        other => other.to_string(),
                    })
                    .collect();
                let file = dir.join(key);
                std::fs::write(&file, text.join("\n")).expect("write the per-sample file");
                push(flag(key), Some(file.display().to_string()));
            }
            ("patch" | "patch_stride", _) => push(flag(key), Some(axis_sizes(v))),
            ("read_policy", Value::Object(p)) => {
                for (k, w) in p {
                    match (k.as_str(), w) {
                        ("hedge", Value::Bool(false)) => push(flag(k), None),
                        ("hedge", Value::Bool(true)) => {}
                        (_, Value::Object(_) | Value::Bool(_)) => return Err(format!("read_policy.{k} as {w}")),
                        _ => push(flag(k), Some(word(w))),
                    }
                }
            }
            ("storage_options", Value::Object(m)) => {
                m.iter().for_each(|(k, w)| push(flag(key), Some(format!("{k}={}", word(w)))));
            }
            ("cache_dir", Value::String(s)) => {
                let d = dir.join("cache");
                std::fs::create_dir_all(&d).expect("the cache directory");
                push(flag(key), Some(s.replace("$CACHE_DIR", &d.display().to_string())));
            }
            (_, Value::Object(_) | Value::Array(_)) => return Err(format!("{key} as {v}")),
            _ => push(flag(key), Some(word(v))),
        }
    }
    Ok(out)
}

/// Run one case: `bench` (its train epoch's digest) for "batches", `describe` otherwise;
/// after its `warm` pass, if it has one.
fn run(case: &Value, base: &Map<String, Value>, store: &str) -> Output {
    let dir = tempfile::tempdir().expect("a temporary directory");
    if let Some(warm) = case.get("warm") {
        let warming = json!({"name": "warm", "options": warm, "expect": "batches"});
        let out = run_in(&warming, base, store, dir.path());
        assert!(out.status.success(), "{}: the warm pass: {}", case["name"], String::from_utf8_lossy(&out.stderr));
    }
    let out = run_in(case, base, store, dir.path());
    drop(dir);
    out
}

fn run_in(case: &Value, base: &Map<String, Value>, store: &str, dir: &Path) -> Output {
    let mut options = base.clone();
    options.extend(case["options"].as_object().expect("options").clone());
    // `bench`'s own fraction default is the whole array; the table's is the spec's.
    options.entry("fractions").or_insert(json!([0.8, 0.1, 0.1]));
    let flags = args(&options, dir).unwrap_or_else(|why| panic!("{}: {why}", case["name"]));
    let mut cmd: Vec<String> = if case["expect"] == "batches" {
        ["bench", store, "--epochs", "1", "--json", "--digest"].map(String::from).to_vec()
    } else {
        ["describe", store, "--json"].map(String::from).to_vec()
    };
    for _ in 1..case["stores"].as_u64().unwrap_or(1) {
        cmd.extend(["--concat".into(), store.into()]);
    }
    cmd.extend(flags);
    cli(&cmd.iter().map(String::as_str).collect::<Vec<_>>())
}

/// A case's options (over the table's base) read by core's spec, `$CACHE_DIR` as `dir`.
fn spec_of(options: &Value, base: &Map<String, Value>, dir: &Path) -> insitubatch_native::DatasetSpec {
    let mut merged = base.clone();
    merged.extend(options.as_object().expect("options").clone());
    let text = Value::Object(merged).to_string().replace("$CACHE_DIR", &dir.join("cache").display().to_string());
    insitubatch_native::DatasetSpec::from_deserializer(&mut serde_json::Deserializer::from_str(&text))
        .expect("an accepted case reads as a spec")
}

/// The digest of an accepted case's train epoch through the Rust API (after its warm pass).
fn api_digest(case: &Value, base: &Map<String, Value>, store: &str) -> String {
    use insitubatch_native::{JoinPart, OpenOptions};
    let dir = tempfile::tempdir().expect("a temporary directory");
    let epoch = |options: &Value| {
        let opts = OpenOptions::from_spec(spec_of(options, base, dir.path()));
        let ds = match case["stores"].as_u64().unwrap_or(1) {
            1 => insitubatch_native::open(store, opts),
            n => insitubatch_native::open_concat((0..n).map(|_| JoinPart::Url(store.into())).collect(), opts),
        };
        let ds = ds.unwrap_or_else(|e| panic!("{}: {e}", case["name"]));
        let mut d = insitubatch_native::BatchDigest::default();
        for b in ds.train().expect("a pass") {
            d.update(&b.expect("a batch"));
        }
        d.finish()
    };
    if let Some(warm) = case.get("warm") {
        epoch(warm);
    }
    epoch(&case["options"])
}

/// The table's skips for the CLI: the case's own, or one of a field it names.
fn skipped(table: &Value, case: &Value) -> Option<String> {
    if let Some(why) = case["skip"]["cli"].as_str() {
        return Some(why.to_string());
    }
    let fields = table["skip"]["cli"].as_object()?;
    case["options"].as_object()?.keys().find_map(|k| fields.get(k).map(|w| format!("{k}: {}", word(w))))
}

#[test]
fn every_case_of_the_table_on_the_cli() {
    let text = std::fs::read_to_string(table_path()).expect("tests/options/cases.json");
    let mut table: Value = serde_json::from_str(&text).expect("the table is JSON");
    let store = root().join(table["store"].as_str().expect("a store")).display().to_string();
    let base = table["base"].as_object().expect("a base").clone();
    let bless = std::env::var_os("IB_BLESS").is_some();
    let mut blessed = 0;
    let mut walked = 0;
    let cases = table["cases"].as_array().expect("cases").clone();
    for (i, case) in cases.iter().enumerate() {
        let name = case["name"].as_str().expect("a name");
        // The Rust API's digest of every accepted case: what the table holds.
        let api = (case["expect"] == "batches").then(|| api_digest(case, &base, &store));
        if let Some(api) = &api {
            if bless {
                table["cases"][i]["digest"] = json!(api);
                blessed += 1;
            } else {
                let want = case["digest"].as_str().unwrap_or_else(|| {
                    panic!(
                        "{name}: no digest in the table: run IB_BLESS=1 cargo test -p insitubatch-native --test options"
                    )
                });
                assert_eq!(api, want, "{name}: the Rust API's batches are not the table's");
            }
        }
        if let Some(why) = skipped(&table, case) {
            eprintln!("options walk (cli): skip {name:?}: {why}");
            continue;
        }
        walked += 1;
        let out = run(case, &base, &store);
        let err = String::from_utf8_lossy(&out.stderr);
        match &case["expect"] {
            Value::String(e) if e == "batches" => {
                assert!(out.status.success(), "{name}: refused: {err}");
                let row: Value = serde_json::from_slice(&out.stdout).expect("bench's JSON");
                let digest = row["epochs"][0]["digest"].as_str().expect("a digest");
                assert_eq!(Some(digest), api.as_deref(), "{name}: the CLI's batches are not the Rust API's");
            }
            Value::String(e) if e == "opens" => assert!(out.status.success(), "{name}: refused: {err}"),
            Value::Object(want) => {
                let kind = want["kind"].as_str().expect("a kind");
                assert!(!out.status.success(), "{name}: accepted, the table says refused ({kind})");
                assert!(err.starts_with(&format!("error[{kind}]: ")), "{name}: {err}");
                if let Some(option) = want.get("option").and_then(Value::as_str) {
                    assert_eq!(out.status.code(), Some(2), "{name}: a refused flag exits with 2: {err}");
                    assert!(err.contains(&flag(option)), "{name}: the message names {}: {err}", flag(option));
                }
            }
            other => panic!("{name}: an expectation {other}"),
        }
    }
    assert!(walked > 40, "the table's cases: {walked} walked");
    if bless {
        std::fs::write(table_path(), table_text(&table)).expect("write the table");
        eprintln!("options walk (cli): wrote {blessed} digests to {}", table_path().display());
    }
}

/// The table as the repository keeps it: its head indented, one case a line.
fn table_text(table: &Value) -> String {
    let mut head = table.as_object().expect("an object").clone();
    let cases = head.remove("cases").expect("cases");
    let head = serde_json::to_string_pretty(&Value::Object(head)).expect("JSON");
    let lines: Vec<String> = cases
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| format!("  {}", serde_json::to_string(c).expect("JSON")))
        .collect();
    format!("{},\n  \"cases\": [\n{}\n  ]\n}}\n", head.trim_end_matches('}').trim_end(), lines.join(",\n"))
}
