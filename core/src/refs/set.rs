//! A kerchunk reference set held in memory: the JSON forms (versions 0 and 1, with
//! `templates` and `gen`), parsed once into a sorted map of keys and interned file URLs.
//!
//! The format is fsspec's `ReferenceFileSystem`'s (kerchunk's spec): a value is inline data
//! (a string, `base64:` for binary; a JSON object is written out as JSON), `[url]` for a whole
//! file, or `[url, offset, length]`. URLs may hold `{{ name }}` templates, and `gen` entries
//! expand keys over the product of their dimensions, with Jinja expressions for offsets and
//! lengths; fsspec renders both with Jinja2, so they are rendered here with MiniJinja (the
//! same language; no loops or filters are needed, so its default features are off, and every
//! render runs on a fuel budget, so a hostile template cannot run long).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use serde_json::{Map, Value};

use super::{FILE_OBJECT, Reference, ReferenceIndex};
use crate::error::{Error, Result};
use crate::runtime::{BoxFuture, StorageError};

/// Most references one `gen` section may expand to: beyond it, a set belongs in kerchunk's
/// Parquet form, which is read lazily.
const MAX_GENERATED: u64 = 1 << 24;

/// Fuel for one template render: a plain substitution takes a few units, an arithmetic
/// offset a few dozen.
const TEMPLATE_FUEL: u64 = 10_000;

/// A reference set in memory, with its file URLs interned.
#[derive(Debug, Clone, Default)]
pub struct ReferenceSet {
    entries: BTreeMap<String, Entry>,
    files: Vec<Arc<str>>,
}

/// One key's reference, its file by number.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Inline(Bytes),
    File { file: u32, range: Option<(u64, u64)> },
}

impl ReferenceSet {
    /// Parse a kerchunk JSON reference set (version 0, or 1 with `templates` and `gen`).
    /// `location` names it in errors.
    ///
    /// # Errors
    /// [`Error::Metadata`] naming what is malformed (the key and its value) and the set last.
    pub fn from_json(bytes: &[u8], location: &str) -> Result<Self> {
        let bad = |message: String| Error::Metadata { message, key: location.to_string() };
        let doc: Value = serde_json::from_slice(bytes)
            .map_err(|e| bad(format!("the reference set is not valid JSON ({e}); kerchunk writes JSON or Parquet")))?;
        let Value::Object(mut top) = doc else {
            return Err(bad(format!("a reference set is a JSON object of references, got {}", short(&doc))));
        };
        let mut out = Builder::default();
        match top.get("version") {
            None => {
                let none = Templates::new(Map::new());
                for (key, value) in top {
                    out.add(key, value, &none).map_err(bad)?;
                }
            }
            Some(v) if v.as_u64() == Some(1) => {
                let templates = match top.remove("templates") {
                    None => Map::new(),
                    Some(Value::Object(t)) => t,
                    Some(other) => return Err(bad(format!("`templates` must be an object, got {}", short(&other)))),
                };
                let templates = Templates::new(templates);
                if let Some(gen_list) = top.remove("gen") {
                    let Value::Array(gens) = gen_list else {
                        return Err(bad(format!("`gen` must be a list, got {}", short(&gen_list))));
                    };
                    for g in gens {
                        out.generate(&g, &templates).map_err(bad)?;
                    }
                }
                match top.remove("refs") {
                    None => {}
                    Some(Value::Object(refs)) => {
                        for (key, value) in refs {
                            out.add(key, value, &templates).map_err(bad)?;
                        }
                    }
                    Some(other) => return Err(bad(format!("`refs` must be an object, got {}", short(&other)))),
                }
            }
            Some(v) => {
                return Err(bad(format!(
                    "reference set version {} is not supported; versions 0 and 1 (kerchunk's) are",
                    short(v)
                )));
            }
        }
        Ok(out.finish())
    }

    /// The URLs of the files the set refers to, each once.
    pub fn files(&self) -> &[Arc<str>] {
        &self.files
    }

    /// Rewrite every file URL with `f` (relative URLs resolved against the set's own
    /// location, say); `Err` is `f`'s message for the URL it refused.
    ///
    /// # Errors
    /// `f`'s.
    pub fn map_files(&mut self, mut f: impl FnMut(&str) -> std::result::Result<String, String>) -> Result<(), String> {
        for url in &mut self.files {
            *url = Arc::from(f(url)?);
        }
        Ok(())
    }

    /// How many keys the set has.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the set has no keys.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The reference of `key`, if any.
    pub fn get(&self, key: &str) -> Option<Reference> {
        self.entries.get(key).map(|e| self.reference(e))
    }

    fn reference(&self, entry: &Entry) -> Reference {
        match entry {
            Entry::Inline(b) => Reference::Inline(b.clone()),
            Entry::File { file, range } => {
                Reference::File { url: Arc::clone(&self.files[*file as usize]), range: *range }
            }
        }
    }
}

impl ReferenceIndex for ReferenceSet {
    fn lookup<'a>(&'a self, key: &'a str) -> BoxFuture<'a, std::result::Result<Option<Reference>, StorageError>> {
        Box::pin(std::future::ready(Ok(self.get(key))))
    }

    fn keys<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, std::result::Result<Vec<String>, StorageError>> {
        let keys = self.entries.range(prefix.to_string()..).take_while(|(k, _)| k.starts_with(prefix));
        Box::pin(std::future::ready(Ok(keys.map(|(k, _)| k.clone()).collect())))
    }

    fn in_file<'a>(&'a self, url: &'a str, start: u64, end: u64) -> BoxFuture<'a, Vec<(String, u64, u64)>> {
        let file = self.files.iter().position(|f| f.as_ref() == url);
        let mut found: Vec<(String, u64, u64)> = self
            .entries
            .iter()
            .filter_map(|(k, e)| match e {
                Entry::File { file: f, range: Some((o, l)) } if Some(*f as usize) == file => Some((k, *o, *l)),
                _ => None,
            })
            .filter(|(_, o, l)| *o < end && o.saturating_add(*l) > start)
            .map(|(k, o, l)| (k.clone(), o, l))
            .collect();
        found.sort_by_key(|(_, o, _)| *o);
        Box::pin(std::future::ready(found))
    }
}

/// A set being parsed: its entries and the URLs seen so far.
#[derive(Default)]
struct Builder {
    entries: BTreeMap<String, Entry>,
    files: Vec<Arc<str>>,
    file_ids: HashMap<Arc<str>, u32>,
}

impl Builder {
    fn finish(self) -> ReferenceSet {
        ReferenceSet { entries: self.entries, files: self.files }
    }

    fn file(&mut self, url: String) -> std::result::Result<u32, String> {
        if let Some(id) = self.file_ids.get(url.as_str()) {
            return Ok(*id);
        }
        let id =
            u32::try_from(self.files.len()).map_err(|_| "a reference set names more than 2^32 files".to_string())?;
        let url: Arc<str> = Arc::from(url);
        self.files.push(Arc::clone(&url));
        self.file_ids.insert(url, id);
        Ok(id)
    }

    /// One `key: value` of `refs` (or of a version 0 set).
    fn add(&mut self, key: String, value: Value, templates: &Templates) -> std::result::Result<(), String> {
        if key.starts_with(FILE_OBJECT.chars().next().unwrap_or('\u{1}')) {
            return Err(format!("the key {key:?} starts with a control character, which no Zarr key does"));
        }
        let entry = match value {
            Value::String(s) => Entry::Inline(inline(&key, s)?),
            Value::Object(_) => Entry::Inline(Bytes::from(value.to_string())),
            Value::Array(items) => self.file_entry(&key, &items, templates)?,
            other => {
                return Err(format!(
                    "reference {key:?} is {}; a reference is a string (inline data; base64: for binary), [url] or \
                     [url, offset, length]",
                    short(&other)
                ));
            }
        };
        self.entries.insert(key, entry);
        Ok(())
    }

    fn file_entry(&mut self, key: &str, items: &[Value], templates: &Templates) -> std::result::Result<Entry, String> {
        let wrong = || {
            format!(
                "reference {key:?} is {}; a file reference is [url] or [url, offset, length] with a URL string and \
                 non-negative integers",
                short(&Value::Array(items.to_vec()))
            )
        };
        let url = items.first().and_then(Value::as_str).ok_or_else(wrong)?;
        let url = templates.render(url, &[]).map_err(|e| format!("reference {key:?}: {e}"))?;
        let range = match items {
            [_] => None,
            [_, offset, length] => Some((offset.as_u64().ok_or_else(wrong)?, length.as_u64().ok_or_else(wrong)?)),
            _ => return Err(wrong()),
        };
        self.range_entry(key, url, range)
    }

    fn range_entry(&mut self, key: &str, url: String, range: Option<(u64, u64)>) -> std::result::Result<Entry, String> {
        if url.is_empty() {
            return Err(format!("reference {key:?} has an empty URL"));
        }
        if let Some((offset, length)) = range
            && offset.checked_add(length).is_none()
        {
            return Err(format!("reference {key:?}: offset {offset} + length {length} overflows 64 bits"));
        }
        Ok(Entry::File { file: self.file(url)?, range })
    }

    /// One entry of `gen`: a key, URL and (optionally) offset and length rendered for every
    /// point of the product of its dimensions.
    fn generate(&mut self, g: &Value, templates: &Templates) -> std::result::Result<(), String> {
        let text = |field: &str| -> std::result::Result<Option<String>, String> {
            match g.get(field) {
                None => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(Value::Number(n)) => Ok(Some(n.to_string())),
                Some(other) => Err(format!("gen's `{field}` must be a string, got {}", short(other))),
            }
        };
        let (Some(key), Some(url)) = (text("key")?, text("url")?) else {
            return Err(format!("a gen entry needs `key` and `url` strings, got {}", short(g)));
        };
        let (offset, length) = (text("offset")?, text("length")?);
        if offset.is_some() != length.is_some() {
            return Err(format!("gen entry {key:?} has one of `offset` and `length`; give both or neither"));
        }
        let dims = dimensions(g.get("dimensions"), &key)?;
        let total = dims.iter().try_fold(1u64, |acc, (_, values)| acc.checked_mul(values.len() as u64));
        if total.is_none_or(|t| t > MAX_GENERATED) {
            return Err(format!(
                "gen entry {key:?} expands to more than {MAX_GENERATED} references; write such a set as kerchunk's \
                 Parquet references, which are read lazily"
            ));
        }
        if total == Some(0) {
            return Ok(()); // an empty dimension (`stop: 0`): the product has no points, as in kerchunk
        }
        let mut point = vec![0usize; dims.len()];
        loop {
            let vars: Vec<(&str, minijinja::Value)> =
                dims.iter().zip(&point).map(|((name, values), &i)| (name.as_str(), values[i].clone())).collect();
            let this_key = templates.render(&key, &vars).map_err(|e| format!("gen key {key:?}: {e}"))?;
            let this_url = templates.render(&url, &vars).map_err(|e| format!("gen key {this_key:?}: {e}"))?;
            let range = match (&offset, &length) {
                (Some(o), Some(l)) => Some((
                    templates.render_u64(o, &vars).map_err(|e| format!("gen key {this_key:?}'s offset: {e}"))?,
                    templates.render_u64(l, &vars).map_err(|e| format!("gen key {this_key:?}'s length: {e}"))?,
                )),
                _ => None,
            };
            let entry = self.range_entry(&this_key, this_url, range)?;
            self.entries.insert(this_key, entry);
            if !next_point(&mut point, &dims) {
                return Ok(());
            }
        }
    }
}

/// The values of a gen entry's dimensions, in order: a list as given, or a range
/// `{start, stop, step}` (start 0 and step 1 by default), as fsspec reads them.
fn dimensions(v: Option<&Value>, key: &str) -> std::result::Result<Vec<(String, Vec<minijinja::Value>)>, String> {
    let Some(Value::Object(dims)) = v else {
        return Err(format!("gen entry {key:?} needs `dimensions`, an object of name: list or range"));
    };
    let mut out = Vec::with_capacity(dims.len());
    for (name, d) in dims {
        let values = match d {
            Value::Array(items) => items.iter().map(to_jinja).collect::<std::result::Result<Vec<_>, _>>()?,
            Value::Object(r) => {
                let int = |field: &str, default: Option<i64>| match r.get(field) {
                    None => default.ok_or_else(|| format!("gen dimension {name:?} needs `{field}`")),
                    Some(v) => {
                        v.as_i64().ok_or_else(|| format!("gen dimension {name:?}'s `{field}` is not an integer"))
                    }
                };
                let (start, stop, step) = (int("start", Some(0))?, int("stop", None)?, int("step", Some(1))?);
                range_values(start, stop, step).ok_or_else(|| {
                    format!(
                        "gen dimension {name:?} is range({start}, {stop}, {step}): a step of 0, or more than \
                         {MAX_GENERATED} values"
                    )
                })?
            }
            other => return Err(format!("gen dimension {name:?} must be a list or a range, got {}", short(other))),
        };
        out.push((name.clone(), values));
    }
    Ok(out)
}

/// Python's `range(start, stop, step)`; `None` for a step of 0 or too many values.
fn range_values(start: i64, stop: i64, step: i64) -> Option<Vec<minijinja::Value>> {
    if step == 0 {
        return None;
    }
    let span = if step > 0 { i128::from(stop) - i128::from(start) } else { i128::from(start) - i128::from(stop) };
    let n = if span <= 0 { 0 } else { (span + i128::from(step.unsigned_abs()) - 1) / i128::from(step.unsigned_abs()) };
    if n > i128::from(MAX_GENERATED) {
        return None;
    }
    Some((0..n).map(|i| minijinja::Value::from(i128::from(start) + i * i128::from(step))).collect())
}

fn to_jinja(v: &Value) -> std::result::Result<minijinja::Value, String> {
    match v {
        Value::String(s) => Ok(minijinja::Value::from(s.as_str())),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Ok(minijinja::Value::from(i)),
            (None, Some(f)) => Ok(minijinja::Value::from(f)),
            _ => Err(format!("gen dimension value {n} is not a number minijinja reads")),
        },
        Value::Bool(b) => Ok(minijinja::Value::from(*b)),
        other => Err(format!("a gen dimension's values are strings or numbers, got {}", short(other))),
    }
}

/// Step `point` to the next point of the product (the last dimension fastest, as
/// `itertools.product`); `false` after the last.
fn next_point(point: &mut [usize], dims: &[(String, Vec<minijinja::Value>)]) -> bool {
    for i in (0..point.len()).rev() {
        point[i] += 1;
        if point[i] < dims[i].1.len() {
            return true;
        }
        point[i] = 0;
    }
    false
}

/// The data of an inline reference: `base64:` decoded, any other string as its UTF-8 bytes.
fn inline(key: &str, s: String) -> std::result::Result<Bytes, String> {
    match s.strip_prefix("base64:") {
        Some(b64) => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map(Bytes::from)
            .map_err(|e| format!("reference {key:?} is not valid base64 ({e})")),
        None => Ok(Bytes::from(s)),
    }
}

/// The set's `templates` and a MiniJinja environment to render with them.
struct Templates {
    env: minijinja::Environment<'static>,
    values: Vec<(String, minijinja::Value)>,
}

impl Templates {
    fn new(templates: Map<String, Value>) -> Self {
        let mut env = minijinja::Environment::new();
        env.set_fuel(Some(TEMPLATE_FUEL));
        let values = templates
            .into_iter()
            .map(|(k, v)| {
                let v = match v {
                    Value::String(s) => minijinja::Value::from(s),
                    other => minijinja::Value::from(other.to_string()),
                };
                (k, v)
            })
            .collect();
        Self { env, values }
    }

    /// `text` rendered with the templates and `vars`; text without `{{` as it is.
    fn render(&self, text: &str, vars: &[(&str, minijinja::Value)]) -> std::result::Result<String, String> {
        if !text.contains("{{") && !text.contains("{%") {
            return Ok(text.to_string());
        }
        let ctx = minijinja::Value::from_pairs(
            self.values.iter().map(|(k, v)| (k.as_str(), v.clone())).chain(vars.iter().map(|(k, v)| (*k, v.clone()))),
        );
        self.env.render_str(text, ctx).map_err(|e| format!("cannot render the template {:?} ({})", cut(text), e.kind()))
    }

    fn render_u64(&self, text: &str, vars: &[(&str, minijinja::Value)]) -> std::result::Result<u64, String> {
        let out = self.render(text, vars)?;
        out.trim().parse().map_err(|_| format!("{text:?} renders to {:?}, not a non-negative integer", cut(&out)))
    }
}

/// A JSON value for an error message, cut short (a hostile set can be megabytes).
fn short(v: &Value) -> String {
    cut(&v.to_string())
}

fn cut(text: &str) -> String {
    match text.char_indices().nth(60) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    }
}
