//! The report types as the generator sees them: schemars' JSON Schema of the Rust types, read
//! into a few shapes both writers know. Anything else is refused with a message, so a new
//! kind of field is taught here once rather than written out wrongly.

use serde_json::{Map, Value};

/// The JSON a field holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Ty {
    /// An integer that fits a JS number (`usize`, `u32`, ...).
    Int,
    /// A 64-bit integer (`u64`, `i64`): a JS number in the engine's JSON, and a number or a
    /// `BigInt` where JS passes it in (an option such as `seed`).
    Int64,
    /// A float.
    Float,
    /// `true` or `false`.
    Bool,
    /// A string.
    Str,
    /// An object of arbitrary JSON (`serde_json::Map`).
    Json,
    /// An object of the caller's keys, each value of this type (`BTreeMap<String, T>`).
    Map(Box<Ty>),
    /// A struct or enum defined among the report types.
    Ref(String),
    /// A list.
    Array(Box<Ty>),
    /// A Rust tuple: a JSON array of a fixed length.
    Tuple(Vec<Ty>),
    /// `Option<T>`: the value or `null`.
    Nullable(Box<Ty>),
    /// One of these strings.
    Strs(Vec<String>),
    /// One of these integers.
    Ints(Vec<i64>),
}

/// A field of a struct.
#[derive(Debug, Clone)]
pub struct Field {
    /// The JSON key (serde's name).
    pub name: String,
    /// Its doc comment.
    pub doc: String,
    /// What it holds.
    pub ty: Ty,
    /// False where serde skips it (`skip_serializing_if`): absent rather than `null`.
    pub required: bool,
    /// How the Python package shows it (the `x-python` extension).
    pub python: PyField,
    /// Its TypeScript type where JS passes more than the JSON's (`x-ts`: a `Float64Array` too).
    pub ts: Option<String>,
    /// An option JS must pass (`x-required`), where every other one is optional.
    pub ts_required: bool,
    /// Its CLI flag where that is not its name in kebab-case (`x-cli`; `null`: the CLI has
    /// none), for the option reference.
    pub cli: Option<Option<String>>,
}

impl Field {
    /// The key in Python: insitubatch 0.2.0's name where `x-python` gives one, else the JSON's.
    pub fn python_name(&self) -> &str {
        self.python.name.as_deref().unwrap_or(&self.name)
    }
}

/// A field's `x-python` extension: how the Python package shows it, where not as in the JSON.
#[derive(Debug, Clone, Default)]
pub struct PyField {
    /// A list given as a tuple.
    pub tuple: bool,
    /// `[name, value]` pairs given as a dict.
    pub dict: bool,
    /// The key in Python (insitubatch 0.2.0's name).
    pub name: Option<String>,
    /// A second key in Python with the same value (insitubatch 0.2.0's name for it, where the
    /// package keeps ours too).
    pub alias: Option<String>,
    /// Not in Python: another field takes its key there (the value insitubatch 0.2.0 gives
    /// under that name).
    pub omit: bool,
    /// The Python type, where the package replaces the value (and a `  # comment`).
    pub ty: Option<String>,
    /// In a dataclass (`x-python` `order` on the struct): the field's default, a Python
    /// expression, where the type's own (0, `0.0`, `False`, empty, `None` for an `Option`)
    /// is not it. `None` makes the field's type `T | None`: the value a hand-built report
    /// gives a number it did not measure.
    pub default: Option<String>,
    /// In a dataclass: a field without a default (the caller must give it).
    pub required: bool,
    /// In a dataclass: not a field; the package's class computes it (a property).
    pub property: bool,
    /// Of an option: how a Python user passes it, where not as the keyword of its name
    /// (`node_affinity`, `split_by_chunk(fractions=...)`), for the option reference.
    pub keyword: Option<String>,
}

/// A key the Python package adds to a struct (`x-python` `extra`: `"key": "type"`, and
/// `"type = value  # note"` where the value is fixed).
#[derive(Debug, Clone, PartialEq)]
pub struct Extra {
    /// The key.
    pub key: String,
    /// `key?`: it may be absent.
    pub optional: bool,
    /// Its Python type.
    pub ty: String,
    /// Its value, a Python expression, where it is fixed (the package sets it, reshaping);
    /// `None`: the package fills it from its own arguments.
    pub value: Option<String>,
    /// What it is, for its comment.
    pub note: Option<String>,
}

impl Extra {
    /// An `extra` entry, read.
    ///
    /// # Errors
    /// A fixed value on a key that may be absent.
    pub fn parse(key: &str, text: &str) -> Result<Self, String> {
        let (head, note) = text.split_once("  # ").map_or((text, None), |(h, n)| (h, Some(n.to_string())));
        let (ty, value) = head.split_once(" = ").map_or((head, None), |(t, v)| (t, Some(v.to_string())));
        let (key, optional) = key.strip_suffix('?').map_or((key, false), |k| (k, true));
        if optional && value.is_some() {
            return Err(format!("x-python extra {key:?} may be absent (`?`) but has a fixed value"));
        }
        Ok(Self { key: key.into(), optional, ty: ty.into(), value, note })
    }
}

/// A struct's `x-python` extension.
#[derive(Debug, Clone)]
pub struct PyStruct {
    /// `False`: a `TypedDict` with `total=False`.
    pub total: bool,
    /// Keys the Python package adds.
    pub extra: Vec<Extra>,
    /// The docstring in Python, where it says more than the Rust doc comment.
    pub doc: Option<String>,
    /// The package gives it as a dataclass, whose fields are written into its class (between
    /// markers, `py::fill_dataclasses`) in this order (the class's signature: insitubatch
    /// 0.2.0's fields, then ours as they were added), then any field not listed, in
    /// declaration order. `None`: no dataclass.
    pub order: Option<Vec<String>>,
}

/// A report type.
#[derive(Debug, Clone)]
pub enum Def {
    /// A struct: a JSON object.
    Struct {
        /// Its doc comment.
        doc: String,
        /// Its fields, in declaration order.
        fields: Vec<Field>,
        /// How the Python package shows it.
        python: PyStruct,
    },
    /// An enum of unit variants: one of its words, each with its doc comment.
    Enum {
        /// Its doc comment.
        doc: String,
        /// The serialized words and their docs.
        words: Vec<(String, String)>,
    },
    /// A type whose JSON Schema is hand-written with its TypeScript and Python types (an
    /// ordered map, a value of several forms): `x-ts` and `x-python` `type`, used as they are.
    Alias {
        /// Its doc comment.
        doc: String,
        /// The TypeScript type.
        ts: String,
        /// The Python type.
        py: String,
        /// The struct its object form is (`x-object`: a hedging policy is `true`, `false` or
        /// a `HedgeFields`), whose fields the option reference lists under it.
        object: Option<String>,
        /// Its object form is a map of them (`x-each`: labelled variables), not one.
        each: bool,
    },
}

/// Every report type, in the schema's order.
#[derive(Debug)]
pub struct Model {
    /// Name (the schema's, which is the Rust name unless `schemars(rename)` says) and type.
    pub defs: Vec<(String, Def)>,
}

impl Model {
    /// Read schemars' `$defs`.
    ///
    /// # Panics
    /// On a schema shape the writers do not know (teach [`ty`]).
    pub fn from_defs(defs: &Map<String, Value>) -> Self {
        Self { defs: defs.iter().map(|(name, schema)| (name.clone(), def(name, schema))).collect() }
    }

    /// The definition named `name`.
    ///
    /// # Panics
    /// When there is none.
    pub fn get(&self, name: &str) -> &Def {
        self.defs.iter().find(|(n, _)| n == name).map_or_else(|| panic!("no report type {name}"), |(_, d)| d)
    }

    /// The names `roots` reach (themselves included), in the schema's order.
    pub fn reachable(&self, roots: &[&str]) -> Vec<String> {
        let mut seen: Vec<String> = Vec::new();
        let mut todo: Vec<String> = roots.iter().map(|r| (*r).to_string()).collect();
        while let Some(name) = todo.pop() {
            if seen.contains(&name) {
                continue;
            }
            match self.get(&name) {
                Def::Struct { fields, .. } => fields.iter().for_each(|f| refs(&f.ty, &mut todo)),
                Def::Alias { object: Some(o), .. } => todo.push(o.clone()),
                Def::Alias { .. } | Def::Enum { .. } => {}
            }
            seen.push(name);
        }
        self.defs.iter().map(|(n, _)| n.clone()).filter(|n| seen.contains(n)).collect()
    }
}

/// The names a type refers to.
fn refs(ty: &Ty, out: &mut Vec<String>) {
    match ty {
        Ty::Ref(n) => out.push(n.clone()),
        Ty::Array(t) | Ty::Nullable(t) | Ty::Map(t) => refs(t, out),
        Ty::Tuple(ts) => ts.iter().for_each(|t| refs(t, out)),
        Ty::Int | Ty::Int64 | Ty::Float | Ty::Bool | Ty::Str | Ty::Json | Ty::Strs(_) | Ty::Ints(_) => {}
    }
}

/// A doc comment as prose: rustdoc's intra-doc links (`` [`X`] ``) become plain code spans.
pub fn doc_text(schema: &Value) -> String {
    let raw = schema.get("description").and_then(Value::as_str).unwrap_or_default();
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.find("[`") {
        let (head, tail) = rest.split_at(at);
        out.push_str(head);
        match tail[2..].find("`]") {
            // Not a link when a `(` follows (a markdown link keeps its brackets).
            Some(end) if !tail[2 + end + 2..].starts_with('(') => {
                out.push('`');
                out.push_str(&tail[2..2 + end]);
                out.push('`');
                rest = &tail[2 + end + 2..];
            }
            _ => {
                out.push_str("[`");
                rest = &tail[2..];
            }
        }
    }
    out.push_str(rest);
    out.trim().to_string()
}

fn def(name: &str, schema: &Value) -> Def {
    let doc = doc_text(schema);
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        // Declaration order: `required` lists the fields serde always writes in that order
        // (whether or not serde_json keeps `properties` in order); the others follow.
        let required: Vec<&str> =
            schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
        let mut names: Vec<&str> = required.clone();
        names.extend(props.keys().map(String::as_str).filter(|k| !required.contains(k)));
        let fields: Vec<Field> = names
            .into_iter()
            .map(|key| {
                let p = &props[key];
                Field {
                    name: key.to_string(),
                    doc: doc_text(p),
                    ty: ty(p).unwrap_or_else(|e| panic!("{name}.{key}: {e}")),
                    required: required.contains(&key),
                    python: py_field(p).unwrap_or_else(|e| panic!("{name}.{key}: {e}")),
                    ts: p.get("x-ts").and_then(Value::as_str).map(String::from),
                    ts_required: p.get("x-required").and_then(Value::as_bool) == Some(true),
                    cli: p.get("x-cli").map(|c| c.as_str().map(String::from)),
                }
            })
            .collect();
        let python = py_struct(schema).unwrap_or_else(|e| panic!("{name}: {e}"));
        check_order(&python, &fields).unwrap_or_else(|e| panic!("{name}: {e}"));
        check_python_names(&python, &fields).unwrap_or_else(|e| panic!("{name}: {e}"));
        return Def::Struct { doc, fields, python };
    }
    if let Some(ts) = schema.get("x-ts").and_then(Value::as_str) {
        let py = schema.pointer("/x-python/type").and_then(Value::as_str);
        let py = py.unwrap_or_else(|| panic!("{name}: a hand-written schema (x-ts) needs its x-python type too"));
        let object = schema.get("x-object").and_then(Value::as_str).map(String::from);
        let each = schema.get("x-each").and_then(Value::as_bool) == Some(true);
        return Def::Alias { doc, ts: ts.to_string(), py: py.to_string(), object, each };
    }
    let words = if let Some(variants) = schema.get("oneOf").and_then(Value::as_array) {
        variants
            .iter()
            .map(|v| match v.get("const").and_then(Value::as_str) {
                Some(w) => (w.to_string(), doc_text(v)),
                None => panic!("{name}: an enum variant that is not a unit variant: teach tools/boundary-types"),
            })
            .collect()
    } else if let Ok(Ty::Strs(words)) = ty(schema) {
        words.into_iter().map(|w| (w, String::new())).collect()
    } else {
        panic!("{name}: neither a struct nor an enum of words: teach tools/boundary-types")
    };
    Def::Enum { doc, words }
}

/// The type of one schema.
///
/// # Errors
/// A shape the writers do not know, named.
pub fn ty(schema: &Value) -> Result<Ty, String> {
    let o = schema.as_object().ok_or("a schema that is not an object")?;
    // `extend("enum" = [...])` narrows a field to some words (or numbers): it wins.
    if let Some(words) = o.get("enum").and_then(Value::as_array) {
        if let Some(s) = words.iter().map(|w| w.as_str().map(String::from)).collect::<Option<Vec<_>>>() {
            return Ok(Ty::Strs(s));
        }
        if let Some(n) = words.iter().map(Value::as_i64).collect::<Option<Vec<_>>>() {
            return Ok(Ty::Ints(n));
        }
        return Err(format!("an enum of neither strings nor integers: {words:?}"));
    }
    if let Some(c) = o.get("const").and_then(Value::as_str) {
        return Ok(Ty::Strs(vec![c.to_string()]));
    }
    if let Some(r) = o.get("$ref").and_then(Value::as_str) {
        let name = r.strip_prefix("#/$defs/").ok_or_else(|| format!("a $ref outside $defs: {r}"))?;
        return Ok(Ty::Ref(name.to_string()));
    }
    if let Some(alts) = o.get("anyOf").or_else(|| o.get("oneOf")).and_then(Value::as_array) {
        let is_null = |v: &Value| v.get("type").and_then(Value::as_str) == Some("null");
        return match alts.as_slice() {
            [a, b] if is_null(b) => Ok(Ty::Nullable(Box::new(ty(a)?))),
            [a, b] if is_null(a) => Ok(Ty::Nullable(Box::new(ty(b)?))),
            _ => Err(format!("a union other than `T or null`: {alts:?}")),
        };
    }
    match o.get("type") {
        Some(Value::String(t)) => scalar(t, o),
        Some(Value::Array(ts)) => match ts.as_slice() {
            [Value::String(t), Value::String(null)] if null == "null" => Ok(Ty::Nullable(Box::new(scalar(t, o)?))),
            _ => Err(format!("a type list other than [T, \"null\"]: {ts:?}")),
        },
        _ => Err(format!("a schema without a type: {schema}")),
    }
}

fn scalar(t: &str, o: &Map<String, Value>) -> Result<Ty, String> {
    Ok(match t {
        "integer" if matches!(o.get("format").and_then(Value::as_str), Some("uint64" | "int64")) => Ty::Int64,
        "integer" => Ty::Int,
        "number" => Ty::Float,
        "boolean" => Ty::Bool,
        "string" => Ty::Str,
        "array" => match (o.get("prefixItems").and_then(Value::as_array), o.get("items")) {
            (Some(items), _) => Ty::Tuple(items.iter().map(ty).collect::<Result<_, _>>()?),
            (None, Some(items)) => Ty::Array(Box::new(ty(items)?)),
            (None, None) => return Err("an array without items".into()),
        },
        "object" if o.contains_key("properties") => {
            return Err("an inline struct (give it a name)".into());
        }
        "object" => match o.get("additionalProperties") {
            Some(v @ Value::Object(_)) => Ty::Map(Box::new(ty(v)?)),
            _ => Ty::Json,
        },
        other => return Err(format!("a `{other}` the writers do not know (an inline struct? give it a name)")),
    })
}

/// The `x-python` object of a schema, checked against the keys it may hold.
fn x_python<'a>(schema: &'a Value, keys: &[&str]) -> Result<Option<&'a Map<String, Value>>, String> {
    let Some(x) = schema.get("x-python") else { return Ok(None) };
    let x = x.as_object().ok_or("x-python is not an object")?;
    if let Some(k) = x.keys().find(|k| !keys.contains(&k.as_str())) {
        return Err(format!("x-python key {k:?} is none of {keys:?}"));
    }
    Ok(Some(x))
}

fn py_field(schema: &Value) -> Result<PyField, String> {
    let keys = ["tuple", "dict", "name", "alias", "omit", "type", "default", "required", "property", "keyword"];
    let Some(x) = x_python(schema, &keys)? else { return Ok(PyField::default()) };
    let flag = |k: &str| x.get(k).is_some_and(|v| v.as_bool() == Some(true));
    let text = |k: &str| x.get(k).and_then(Value::as_str).map(String::from);
    let f = PyField {
        tuple: flag("tuple"),
        dict: flag("dict"),
        name: text("name"),
        alias: text("alias"),
        omit: flag("omit"),
        ty: text("type"),
        default: text("default"),
        required: flag("required"),
        property: flag("property"),
        keyword: text("keyword"),
    };
    if [f.default.is_some(), f.required, f.property].iter().filter(|b| **b).count() > 1 {
        return Err("x-python default, required and property exclude each other".into());
    }
    if f.omit && (f.name.is_some() || f.alias.is_some() || f.ty.is_some()) {
        return Err("x-python omit: the field is not shown, so it takes no name, alias or type".into());
    }
    let t = ty(schema)?;
    let list = match &t {
        Ty::Nullable(inner) => inner.as_ref(),
        other => other,
    };
    if f.tuple && !matches!(list, Ty::Array(_)) {
        return Err("x-python tuple on a field that is not a list".into());
    }
    if f.dict && !matches!(list, Ty::Array(item) if matches!(item.as_ref(), Ty::Tuple(p) if p.len() == 2)) {
        return Err("x-python dict on a field that is not a list of pairs".into());
    }
    Ok(f)
}

fn py_struct(schema: &Value) -> Result<PyStruct, String> {
    let Some(x) = x_python(schema, &["total", "extra", "doc", "order"])? else {
        return Ok(PyStruct { total: true, extra: Vec::new(), doc: None, order: None });
    };
    let extra = match x.get("extra") {
        None => Vec::new(),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| Extra::parse(k, v.as_str().ok_or("x-python extra types are strings")?))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("x-python extra is not an object".into()),
    };
    let doc = x.get("doc").and_then(Value::as_str).map(String::from);
    let order = match x.get("order") {
        None => None,
        Some(Value::Array(names)) => Some(
            names
                .iter()
                .map(|n| n.as_str().map(String::from).ok_or("x-python order lists field names (strings)"))
                .collect::<Result<_, _>>()?,
        ),
        Some(_) => return Err("x-python order is not a list of field names".into()),
    };
    Ok(PyStruct { total: x.get("total").and_then(Value::as_bool).unwrap_or(true), extra, doc, order })
}

/// A struct's `order` names fields of it (by their Python names), each once, none a property;
/// a dataclass's fields are shown once each, under one name.
fn check_order(python: &PyStruct, fields: &[Field]) -> Result<(), String> {
    if python.order.is_some()
        && let Some(f) = fields.iter().find(|f| f.python.omit || f.python.alias.is_some())
    {
        return Err(format!(
            "{}: x-python omit and alias are for a dictionary report, not a dataclass (order)",
            f.name
        ));
    }
    let Some(order) = &python.order else {
        return match fields.iter().find(|f| f.python.default.is_some() || f.python.required || f.python.property) {
            Some(f) => Err(format!("{}: x-python default, required and property are for a dataclass (order)", f.name)),
            None => Ok(()),
        };
    };
    for (i, n) in order.iter().enumerate() {
        if order[..i].contains(n) {
            return Err(format!("x-python order names {n:?} twice"));
        }
        match fields.iter().find(|f| f.python_name() == n) {
            None => return Err(format!("x-python order names {n:?}, which is no field's Python name")),
            Some(f) if f.python.property => return Err(format!("x-python order names {n:?}, a property")),
            Some(_) => {}
        }
    }
    Ok(())
}

/// Each key of the struct in Python (its fields' names and aliases, but omitted fields', and
/// the package's own) is given once.
fn check_python_names(python: &PyStruct, fields: &[Field]) -> Result<(), String> {
    let mut seen: Vec<&str> = Vec::new();
    let shown = fields.iter().filter(|f| !f.python.omit);
    let names = shown.flat_map(|f| std::iter::once(f.python_name()).chain(f.python.alias.as_deref()));
    for n in names.chain(python.extra.iter().map(|e| e.key.as_str())) {
        if seen.contains(&n) {
            return Err(format!(
                "the Python key {n:?} is given twice (x-python name, alias or extra; omit the other field)"
            ));
        }
        seen.push(n);
    }
    Ok(())
}
