//! What `open()`, `openInWorker` and the explorer accept from JavaScript: core's
//! [`DatasetSpec`] in camelCase, renamed by one key-case pass ([`snake_keys`]) and read by
//! its serde derive, beside this package's own keys ([`JS_OWN_NAMES`]). The words, defaults
//! and rules are core's (`DatasetSpec::resolve`); this module only renames.

use insitubatch_core::{
    DatasetSpec, Error, ResolvedSpec, TargetAbilities, VariableSpec, VariablesSpec, ZarrArray, camel_case,
};

/// The keys `open()` takes that are not the spec's, taken out before the key-case pass:
/// `credentials` (a function, which is no data), `batchViews` (how this package hands batches
/// to JS) and `shift` (the explorer's windows: every variable again, `label@+shift`).
pub const JS_OWN_NAMES: &[&str] = &["shift", "batchViews", "credentials"];

/// Every option name `open()` accepts: the spec's fields in JS's spelling, then this
/// package's own.
pub fn open_option_names() -> Vec<String> {
    DatasetSpec::field_names()
        .iter()
        .map(|n| camel_case(n))
        .chain(JS_OWN_NAMES.iter().map(|n| (*n).to_string()))
        .collect()
}

/// The keys of the spec's nested objects in JS's spelling (`readPolicy`, `readPolicy.hedge`,
/// a labelled variable's `variables.*`), for the types check (`js/test/types.test.js`).
pub fn nested_option_names() -> Vec<(String, Vec<String>)> {
    DatasetSpec::nested_objects()
        .into_iter()
        .map(|(path, fields)| (camel_case(path), fields.iter().map(|f| camel_case(f)).collect()))
        .collect()
}

/// The options `open()` accepts: core's spec, and this package's own keys.
#[derive(Debug, Clone, Default)]
pub struct JsOpenOptions {
    /// Every plain-data option, read by core's serde derive after the key-case pass.
    pub spec: DatasetSpec,
    /// A windowed view: every variable again, `shift` samples on, labelled `label@+shift`
    /// (as the dashboard's explorer names it; 0 or absent: none).
    pub shift: Option<i64>,
    /// Batches as views into wasm memory, valid until the pass's next step, instead of copies
    /// (default false; `open()`'s passes only: the explorer and `openInWorker` copy).
    pub batch_views: Option<bool>,
    /// Whether a `credentials` function was given (for `s3://` URLs; `wasm/src/object.rs`).
    pub credentials: bool,
    /// The `credentials` function itself (the builds with signed S3 only).
    #[cfg(all(target_arch = "wasm32", feature = "s3"))]
    pub credentials_callback: Option<js_sys::Function>,
}

/// A JS options object as the key-case pass sees it: on the page a JS object
/// (`api/js_options.rs`), on the host serde_json's (the tests). The pass is written once, over this.
pub trait OptionObject: Sized {
    /// Its own enumerable keys whose values are neither `undefined` nor `null` (an option
    /// left empty is absent).
    fn present_keys(&self) -> Vec<String>;
    /// The value at `key`, if it is a plain object (not an array, `Map` or typed array).
    fn object_at(&self, key: &str) -> Option<Self>;
    /// A fresh object of the same kind, with the keys renamed by `rename` (each value
    /// moved as it is), leaving the caller's object untouched.
    fn renamed(&self, rename: &dyn Fn(&str) -> String) -> Self;
    /// Set `key` (on an object of this pass's own making).
    fn put(&mut self, key: &str, value: Self);
}

/// The one key-case pass: JS's camelCase keys (`readPolicy.backoffS`) as the spec's
/// snake_case (`read_policy.backoff_s`), at the top and in the spec's nested objects
/// ([`DatasetSpec::nested_objects`]: `readPolicy`, its `hedge`, each labelled variable), and
/// nowhere else (the keys of `sel`, `patch`, `storageOptions` and `variables` are the
/// caller's own). A key this does not know is refused naming the known ones, in JS's
/// spelling; so is a key in core's spelling (`batch_size`).
///
/// # Errors
/// [`Error::InvalidOption`] for an unknown key.
pub fn snake_keys<O: OptionObject>(o: &O) -> Result<O, Error> {
    rename_level(o, "")
}

fn rename_level<O: OptionObject>(o: &O, path: &str) -> Result<O, Error> {
    let known = DatasetSpec::keys_at(path);
    let js_path = camel_case(path);
    for key in o.present_keys() {
        let snake = snake_case(&key);
        if key.contains('_') || !known.contains(&snake.as_str()) {
            let at = |k: &str| if path.is_empty() { k.to_string() } else { format!("{path}.{k}") };
            let written = if path.is_empty() { key.clone() } else { format!("{js_path}.{key}") };
            return Err(DatasetSpec::unknown_option(&at(&snake), &written));
        }
    }
    let mut out = o.renamed(&snake_case);
    for (nested, _) in DatasetSpec::nested_objects() {
        let rest =
            if path.is_empty() { Some(nested) } else { nested.strip_prefix(path).and_then(|r| r.strip_prefix('.')) };
        let Some(rest) = rest else { continue };
        if let Some(key) = rest.strip_suffix(".*").filter(|k| !k.contains('.')) {
            // Each value of `key` (a labelled variable) that is an object, under its label.
            let Some(map) = out.object_at(key) else { continue };
            let mut each = map.renamed(&str::to_string);
            for label in map.present_keys() {
                if let Some(v) = map.object_at(&label) {
                    each.put(&label, rename_level(&v, &format!("{key}.{label}"))?);
                }
            }
            out.put(key, each);
        } else if !rest.contains('.')
            && let Some(inner) = out.object_at(rest)
        {
            let here = if path.is_empty() { rest.to_string() } else { format!("{path}.{rest}") };
            out.put(rest, rename_level(&inner, &here)?);
        }
    }
    Ok(out)
}

/// `backoffS` → `backoff_s`: the inverse of [`camel_case`] for a key in JS's spelling.
pub fn snake_case(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 4);
    for c in key.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

impl OptionObject for serde_json::Value {
    fn present_keys(&self) -> Vec<String> {
        self.as_object()
            .map_or_else(Vec::new, |m| m.iter().filter(|(_, v)| !v.is_null()).map(|(k, _)| k.clone()).collect())
    }

    fn object_at(&self, key: &str) -> Option<Self> {
        self.get(key).filter(|v| v.is_object()).cloned()
    }

    fn renamed(&self, rename: &dyn Fn(&str) -> String) -> Self {
        let m = self.as_object().into_iter().flatten().filter(|(_, v)| !v.is_null());
        Self::Object(m.map(|(k, v)| (rename(k), v.clone())).collect())
    }

    fn put(&mut self, key: &str, value: Self) {
        if let Some(m) = self.as_object_mut() {
            m.insert(key.to_string(), value);
        }
    }
}

impl JsOpenOptions {
    /// Options from a JSON object, as `api/js_options.rs` `parse_options` reads a JS object: this
    /// package's own keys taken out, the rest renamed by [`snake_keys`] and read by core's
    /// spec (for the host's tests).
    ///
    /// # Errors
    /// What the key-case pass or the spec refuses.
    pub fn from_json(json: &str) -> Result<Self, Error> {
        let mut v: serde_json::Value =
            serde_json::from_str(json).map_err(|e| Error::option("", format!("invalid options: {e}")))?;
        let own =
            |v: &mut serde_json::Value, k: &str| v.as_object_mut().and_then(|m| m.remove(k)).filter(|x| !x.is_null());
        let shift = own(&mut v, "shift")
            .map(|s| s.as_i64().ok_or_else(|| Error::option("shift", "`shift` is a whole number of samples")));
        let batch_views = own(&mut v, "batchViews").and_then(|b| b.as_bool());
        let credentials = own(&mut v, "credentials").is_some();
        let renamed = snake_keys(&v)?;
        let spec = DatasetSpec::from_deserializer(&renamed)?;
        #[allow(
            clippy::needless_update,
            reason = "`credentials_callback` is a field of the builds with signed S3 only"
        )]
        Ok(Self { spec, shift: shift.transpose()?, batch_views, credentials, ..Self::default() })
    }

    /// The spec resolved (core's defaults and rules), and what the wasm engine cannot do
    /// refused ([`TargetAbilities::WASM`]).
    ///
    /// # Errors
    /// What [`DatasetSpec::resolve`] and [`ResolvedSpec::check_for`] refuse.
    pub fn to_core(&self) -> Result<ResolvedSpec, Error> {
        let resolved = self.spec.resolve()?;
        resolved.check_for(&TargetAbilities::WASM)?;
        Ok(resolved)
    }

    /// The array paths whose metadata `open()` reads; `None`: discover the store's arrays.
    pub fn paths(&self) -> Option<Vec<String>> {
        self.spec.variables.as_ref().map(VariablesSpec::paths)
    }

    /// Whether these options ask for a window (`shift`), which the core builder cannot derive
    /// from the spec alone (else `open()` lets the builder label the variables).
    pub fn windowed(&self) -> bool {
        self.shift.unwrap_or(0) != 0
    }

    /// The labelled variables over `opened` (arrays whose metadata was read): the labelled
    /// ones as given, or one per path (labels = paths; `defaults` when no path is named),
    /// then, for `shift` ≠ 0, each again `shift` samples on as `label@+shift`.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for an empty selection or a path that was not opened;
    /// [`Error::Geometry`] for a sample axis the array does not have.
    pub fn variables_over(
        &self,
        opened: &[ZarrArray],
        defaults: &[ZarrArray],
        shift: i64,
    ) -> Result<Vec<insitubatch_core::Variable>, Error> {
        let axis = self.spec.sample_axis;
        let find = |name: &str| -> Result<&ZarrArray, Error> {
            let name = name.trim_matches('/');
            opened.iter().find(|a| a.path() == name).ok_or_else(|| {
                Error::option(
                    "variables",
                    format!(
                        "`variables` names {name:?}, which is not an array of this store; known: {:?}",
                        opened.iter().map(ZarrArray::path).collect::<Vec<_>>()
                    ),
                )
            })
        };
        let specs: Vec<(String, VariableSpec)> = match &self.spec.variables {
            Some(VariablesSpec::Labelled(l)) => l.clone(),
            Some(VariablesSpec::Paths(p)) => {
                p.iter().map(|p| (p.trim_matches('/').to_string(), VariableSpec::at(p))).collect()
            }
            None => defaults.iter().map(|a| (a.path().to_string(), VariableSpec::at(a.path()))).collect(),
        };
        if specs.is_empty() {
            return Err(Error::option("variables", "choose at least one of `variables`"));
        }
        let mut variables = Vec::with_capacity(specs.len() * 2);
        for (label, v) in specs {
            let geometry = find(&v.path)?.geometry(v.sample_axis.unwrap_or(axis))?.shift(v.shift);
            variables.push(insitubatch_core::Variable { label, geometry });
        }
        if shift != 0 {
            let targets: Vec<insitubatch_core::Variable> = variables
                .iter()
                .map(|v| insitubatch_core::Variable {
                    label: crate::explore::target_label(&v.label, shift),
                    geometry: v.geometry.shift(shift),
                })
                .collect();
            variables.extend(targets);
        }
        Ok(variables)
    }
}

/// Parse a split name (`train`, `val`, `test`, `all`).
///
/// # Errors
/// A message naming the accepted words.
pub fn parse_split(s: &str) -> Result<insitubatch_core::Split, String> {
    s.parse().map_err(|e: insitubatch_core::UnknownSplit| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str) -> Result<JsOpenOptions, String> {
        JsOpenOptions::from_json(json).map_err(|e| e.message_in(&camel_case))
    }

    #[test]
    fn options_default_like_native() {
        let o = read("{}").unwrap();
        let r = o.to_core().unwrap();
        assert_eq!(r.dataset.knobs, insitubatch_core::Knobs::default());
        assert!(r.split.contiguous);
        assert_eq!(r.split.fractions, (0.8, 0.1, 0.1));
        let o = read(r#"{"batchSize":7,"blockChunks":2,"seed":3,"fractions":[0.5,0.25,0.25]}"#).unwrap();
        let r = o.to_core().unwrap();
        assert_eq!((r.dataset.knobs.batch_size, r.dataset.knobs.block_chunks, r.split.seed), (7, 2, 3));
        let e = read(r#"{"batch_size":7}"#).unwrap_err();
        assert!(e.contains("batch_size") && e.contains("batchSize, blockChunks"), "core's spelling is not JS's: {e}");
        assert_eq!(read(r#"{"batchSize":null}"#).unwrap().spec.batch_size, 32, "null is absent");
        assert!(parse_split("bogus").unwrap_err().contains("train"));
        // open_option_names() lists exactly the keys accepted.
        for name in open_option_names() {
            let json = format!("{{\"{name}\": null}}");
            assert!(read(&json).is_ok(), "{name}");
        }
    }

    #[test]
    fn one_key_case_pass_renames_nested_objects_and_nothing_else() {
        let o = read(
            r#"{"seed":3,"splitSeed":9,"shuffleSplits":true,"sampleRange":[10,40],"onBadChunk":"nan",
                "readPolicy":{"retries":1,"backoffS":0.005,"requestTimeoutS":2.5,"hedge":{"maxShare":0.5}},
                "storageOptions":{"aws_region":"x"},"sel":{"lat_2":[1,2]},"patch":{"lat_2":3},
                "variables":{"my_label":{"path":"t2m","sampleAxis":1}}}"#,
        )
        .unwrap();
        let r = o.to_core().unwrap();
        assert_eq!((r.split.seed, r.dataset.knobs.seed, r.split.contiguous), (9, 3, false));
        assert_eq!(r.split.sample_range, Some((10, 40)));
        assert_eq!(r.dataset.knobs.on_bad_chunk, insitubatch_core::OnBadChunk::Nan);
        let p = &r.dataset.read_policy;
        assert_eq!(
            (p.retries, p.backoff, p.request_timeout),
            (1, std::time::Duration::from_millis(5), std::time::Duration::from_millis(2500))
        );
        assert_eq!(p.hedge.as_ref().map(|h| h.max_share), Some(0.5));
        assert_eq!(r.storage_options, [("aws_region".to_string(), "x".to_string())], "the caller's keys are kept");
        assert_eq!(r.dataset.sel[0].dim, "lat_2");
        let Some(VariablesSpec::Labelled(v)) = &o.spec.variables else { panic!("{o:?}") };
        assert_eq!((v[0].0.as_str(), v[0].1.sample_axis), ("my_label", Some(1)));
        // Words and durations core refuses are errors in JS's spelling, with the option.
        let e = JsOpenOptions::from_json(r#"{"onBadChunk":"skip"}"#).unwrap_err();
        assert_eq!(e.option_name(), Some("on_bad_chunk"));
        assert!(e.message_in(&camel_case).starts_with("onBadChunk must be \"raise\" or \"nan\""), "{e}");
        let e = read(r#"{"readPolicy":{"backoffS":-1}}"#).unwrap().to_core().unwrap_err();
        assert!(e.message_in(&camel_case).contains("readPolicy.backoffS") && e.to_string().contains("-1"), "{e}");
        let e = read(r#"{"readPolicy":{"retry":1}}"#).unwrap_err();
        assert!(e.contains("readPolicy.retry") && e.contains("readPolicy.retries"), "{e}");
        // The old milliseconds are refused naming the key in seconds.
        let e = read(r#"{"readPolicy":{"backoffMs":5}}"#).unwrap_err();
        assert!(e.contains("readPolicy.backoffS, in seconds"), "{e}");
        // What the wasm engine cannot do is refused, in JS's spelling.
        let e = read(r#"{"threads":2}"#).unwrap().to_core().unwrap_err();
        assert_eq!(e.option_name(), Some("threads"));
        let e = read(r#"{"metricsAddress":"127.0.0.1:0"}"#).unwrap().to_core().unwrap_err();
        assert!(e.message_in(&camel_case).starts_with("metricsAddress configures"), "{e}");
    }

    #[test]
    fn the_mesh_rule_is_cores() {
        let e = read(r#"{"modelParallelAxis":"lat"}"#).unwrap().to_core().unwrap_err();
        assert_eq!(e.option_name(), Some("model_parallel_axis"));
        assert!(e.message_in(&camel_case).contains("modelParallel is 1"), "{e}");
        assert!(read(r#"{"modelParallel":1}"#).unwrap().to_core().unwrap().dataset.model_parallel.is_none());
    }

    #[test]
    fn patches_reach_core_in_the_order_given() {
        use insitubatch_core::{PatchAxis, PatchMode};
        let patch = |json: &str| read(json).map(|o| o.to_core());
        let d = patch(r#"{"patch":{"lon":4,"lat":3,"2":5},"patchStride":{"lat":1}}"#).unwrap().unwrap().dataset;
        let p = d.patch.unwrap();
        let want =
            vec![(PatchAxis::Name("lon".into()), 4), (PatchAxis::Name("lat".into()), 3), (PatchAxis::Axis(2), 5)];
        assert_eq!(p.size, want, "the object's order is the origins' column order; digits are axis indices");
        assert_eq!(p.mode, PatchMode::Grid { stride: vec![4, 1, 5] });
        let d = patch(r#"{"patch":[[2,5],["lat",3]],"patchMode":"random","patchesPerSample":3}"#).unwrap().unwrap();
        let p = d.dataset.patch.unwrap();
        assert_eq!(p.size, vec![(PatchAxis::Axis(2), 5), (PatchAxis::Name("lat".into()), 3)]);
        assert_eq!(p.mode, PatchMode::Random { per_sample: 3 });
        assert_eq!(patch("{}").unwrap().unwrap().dataset.patch, None);
        let refused = |json: &str| patch(json).unwrap().unwrap_err().message_in(&camel_case);
        assert!(refused(r#"{"patch":{"lat":3},"patchesPerSample":2}"#).contains("patchesPerSample"));
        assert!(refused(r#"{"patchesPerSample":2}"#).contains("pass patch too"));
        assert!(read(r#"{"patch":{"lat":3},"patchMode":"tiles"}"#).unwrap_err().contains("'grid' or 'random'"));
        for bad in [r#"{"patch":{"lat":-1}}"#, r#"{"patch":[[-1,2]]}"#, r#"{"patch":[["lat"]]}"#, r#"{"patch":3}"#] {
            assert!(read(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn variables_are_paths_or_labelled_windows_in_order() {
        let o = read(r#"{"variables":["t2m","u10"]}"#).unwrap();
        assert_eq!(o.spec.variables, Some(VariablesSpec::Paths(vec!["t2m".into(), "u10".into()])));
        assert!(!o.windowed());
        let o = read(r#"{"variables":{"y":{"path":"t2m","shift":6},"x":"t2m","w":{"path":"/u10","sampleAxis":1}}}"#)
            .unwrap();
        let Some(VariablesSpec::Labelled(l)) = &o.spec.variables else { panic!("{o:?}") };
        let labels: Vec<&str> = l.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(labels, ["y", "x", "w"], "the object's order is kept");
        assert_eq!(l[0].1, VariableSpec { path: "t2m".into(), shift: 6, sample_axis: None });
        assert_eq!(l[2].1.sample_axis, Some(1));
        assert_eq!(o.paths(), Some(vec!["t2m".to_string(), "u10".to_string()]));
        assert!(read(r#"{"shift":-2}"#).unwrap().windowed());
        for bad in
            [r#"{"variables":{"y":{"path":"t2m","offset":6}}}"#, r#"{"variables":{"y":3}}"#, r#"{"variables":7}"#]
        {
            assert!(read(bad).is_err(), "{bad}");
        }
    }
}
