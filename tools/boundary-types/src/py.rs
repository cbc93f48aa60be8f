//! The Python module: a `Literal` per enum, and per struct a `TypedDict` of the engine's JSON
//! (`<Name>Json`, what `json.loads` gives the package) and, for what the package hands out,
//! one of the package's own shape (`<Name>`, after the `x-python` reshaping); then the
//! reshaping as tables, for the code that applies it. And the fields of the package's
//! dataclasses (a struct with an `x-python` `order`), written into their classes
//! ([`fill_dataclasses`]).

use std::fmt::Write as _;

use crate::model::{Def, Field, Model, Ty};

/// A Python string literal of a name or word (they have no quotes or backslashes).
fn lit(s: &str) -> String {
    assert!(!s.contains(['"', '\\', '\n']), "a name or word with a quote, backslash or newline: {s:?}");
    format!("\"{s}\"")
}

/// `head` + the items joined by `, ` + `tail`, one item a line when that is over 100 columns.
fn wrapped(indent: &str, head: &str, items: &[String], tail: &str) -> String {
    let one = format!("{indent}{head}{}{tail}", items.join(", "));
    if one.len() <= 100 {
        return one;
    }
    let inner: String = items.iter().map(|i| format!("{indent}    {i},\n")).collect();
    format!("{indent}{head}\n{inner}{indent}{tail}")
}

/// `# ...` lines at `indent`.
fn comment(out: &mut String, doc: &str, indent: &str) {
    for l in doc.lines() {
        let _ = writeln!(out, "{indent}#{}{l}", if l.is_empty() { "" } else { " " });
    }
}

/// A class docstring.
fn docstring(out: &mut String, doc: &str) {
    let doc = doc.replace('\\', "\\\\").replace("\"\"\"", "\\\"\\\"\\\"");
    let body = doc.lines().map(|l| if l.is_empty() { String::new() } else { format!("    {l}") }).collect::<Vec<_>>();
    let body = body.join("\n");
    let body = body.trim_start();
    let _ = writeln!(out, "    \"\"\"{body}\"\"\"\n");
}

/// Which of the two `TypedDict`s a type names.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    /// The engine's JSON.
    Json,
    /// The package's shape.
    View,
}

/// A Python type.
fn ty(model: &Model, t: &Ty, side: Side) -> String {
    match t {
        Ty::Int | Ty::Int64 => "int".into(),
        Ty::Float => "float".into(),
        Ty::Bool => "bool".into(),
        Ty::Str => "str".into(),
        Ty::Json => "dict[str, Any]".into(),
        Ty::Map(t) => format!("dict[str, {}]", ty(model, t, side)),
        Ty::Ref(n) => match (model.get(n), side) {
            (Def::Struct { .. }, Side::Json) => format!("{n}Json"),
            (Def::Alias { py, .. }, _) => py.clone(),
            _ => n.clone(),
        },
        Ty::Array(item) => format!("list[{}]", ty(model, item, side)),
        Ty::Tuple(items) => {
            format!("tuple[{}]", items.iter().map(|i| ty(model, i, side)).collect::<Vec<_>>().join(", "))
        }
        Ty::Nullable(inner) => format!("{} | None", ty(model, inner, side)),
        Ty::Strs(words) => format!("Literal[{}]", words.iter().map(|w| lit(w)).collect::<Vec<_>>().join(", ")),
        Ty::Ints(ns) => format!("Literal[{}]", ns.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")),
    }
}

/// A field's type and extra comment in the package's shape.
fn view_ty(model: &Model, f: &Field) -> (String, Option<String>) {
    if let Some(t) = &f.python.ty {
        return match t.split_once("  # ") {
            Some((t, c)) => (t.to_string(), Some(c.to_string())),
            None => (t.clone(), None),
        };
    }
    let (list, nullable) = match &f.ty {
        Ty::Nullable(inner) => (inner.as_ref(), true),
        other => (other, false),
    };
    let shown = match list {
        Ty::Array(item) if f.python.tuple => format!("tuple[{}, ...]", ty(model, item, Side::View)),
        Ty::Array(item) if f.python.dict => match item.as_ref() {
            Ty::Tuple(pair) => {
                format!("dict[{}, {}]", ty(model, &pair[0], Side::View), ty(model, &pair[1], Side::View))
            }
            _ => unreachable!("model.rs checks that a dict field is a list of pairs"),
        },
        _ => return (ty(model, &f.ty, Side::View), None),
    };
    (if nullable { format!("{shown} | None") } else { shown }, None)
}

/// One `TypedDict` entry: its doc as comments, then `key: type`.
struct Entry {
    key: String,
    ty: String,
    doc: String,
}

/// A `TypedDict` of `required` and `optional` entries: the optional ones in a `total=False`
/// base class of their own, unless the whole class is `total=False`.
fn class(out: &mut String, name: &str, doc: &str, required: &[Entry], optional: &[Entry], total: bool) {
    let entries = |out: &mut String, es: &[Entry]| {
        for e in es {
            comment(out, &e.doc, "    ");
            let _ = writeln!(out, "    {}: {}", e.key, e.ty);
        }
    };
    if !total {
        let _ = writeln!(out, "\n\nclass {name}(TypedDict, total=False):");
        docstring(out, doc);
        entries(out, required);
        entries(out, optional);
        return;
    }
    let base = if optional.is_empty() {
        "TypedDict".to_string()
    } else {
        let base = format!("_{name}Optional");
        let _ = writeln!(out, "\n\nclass {base}(TypedDict, total=False):");
        entries(out, optional);
        base
    };
    let _ = writeln!(out, "\n\nclass {name}({base}):");
    docstring(out, doc);
    entries(out, required);
}

/// A table of struct name → its fields that `pick` keeps, as `Python text` per field.
fn table(
    out: &mut String,
    model: &Model,
    names: &[String],
    pick: impl Fn(&Field) -> Option<String>,
    wrap: (&str, &str),
) {
    for n in names {
        let Def::Struct { fields, .. } = model.get(n) else { continue };
        let items: Vec<String> = fields.iter().filter_map(&pick).collect();
        if !items.is_empty() {
            let _ = writeln!(out, "{},", wrapped("    ", &format!("{}: {}", lit(n), wrap.0), &items, wrap.1));
        }
    }
}

/// The module for `json` (structs typed as the engine's JSON) and `views` (structs typed as
/// the package hands them out), with their enums.
pub fn write(model: &Model, json: &[String], views: &[String], header: &str) -> String {
    let all: Vec<String> =
        model.defs.iter().map(|(n, _)| n.clone()).filter(|n| json.contains(n) || views.contains(n)).collect();
    let mut body = String::new();
    for n in &all {
        if let Def::Enum { doc, words } = model.get(n) {
            let _ = writeln!(body, "\n");
            comment(&mut body, doc, "");
            for (w, d) in words.iter().filter(|(_, d)| !d.is_empty()) {
                comment(&mut body, &format!("- `{w}`: {d}"), "");
            }
            let words: Vec<String> = words.iter().map(|(w, _)| lit(w)).collect();
            let _ = writeln!(body, "{}", wrapped("", &format!("{n} = Literal["), &words, "]"));
        }
    }
    for n in json {
        let Def::Struct { doc, fields, .. } = model.get(n) else { continue };
        let entry = |f: &Field| Entry { key: f.name.clone(), ty: ty(model, &f.ty, Side::Json), doc: f.doc.clone() };
        let required: Vec<Entry> = fields.iter().filter(|f| f.required).map(entry).collect();
        let optional: Vec<Entry> = fields.iter().filter(|f| !f.required).map(entry).collect();
        let doc = format!("The engine's JSON of ``{n}``: {doc}");
        class(&mut body, &format!("{n}Json"), &doc, &required, &optional, true);
    }
    for n in views {
        let Def::Struct { doc, fields, python } = model.get(n) else { continue };
        let mut required = Vec::new();
        let mut optional = Vec::new();
        for f in fields.iter().filter(|f| !f.python.omit) {
            let (t, note) = view_ty(model, f);
            let doc = match note {
                Some(c) => format!("{}\n{c}", f.doc),
                None => f.doc.clone(),
            };
            let side = if f.required { &mut required } else { &mut optional };
            let alias = f.python.alias.as_ref().map(|a| Entry {
                key: a.clone(),
                ty: t.clone(),
                doc: format!("insitubatch 0.2.0's name for `{}` (the same value).", f.python_name()),
            });
            side.push(Entry { key: f.python_name().to_string(), ty: t, doc });
            side.extend(alias);
        }
        for e in &python.extra {
            let doc = e
                .note
                .as_ref()
                .map_or_else(|| "Added by the package.".into(), |n| format!("Added by the package: {n}"));
            let entry = Entry { key: e.key.clone(), ty: e.ty.clone(), doc };
            if e.optional { optional.push(entry) } else { required.push(entry) }
        }
        class(&mut body, n, python.doc.as_deref().unwrap_or(doc), &required, &optional, python.total);
    }
    reshaping_tables(&mut body, model, &all);

    let mut typing = Vec::new();
    if body.contains("Any]") {
        typing.push("Any");
    }
    typing.extend(["Literal", "TypedDict"]);
    let mut out = format!("\"\"\"{}\"\"\"\n\nfrom __future__ import annotations\n\n", header.trim_end());
    let _ = writeln!(out, "from typing import {}", typing.join(", "));
    out.push_str(&body);
    out
}

/// The reshaping as tables, per Rust struct, for the code that applies it (`_summary.reshape`,
/// `_runtime`'s dataclasses); none when no struct is reshaped.
fn reshaping_tables(body: &mut String, model: &Model, all: &[String]) {
    let reshaped = |f: &Field| {
        let p = &f.python;
        p.tuple || p.dict || p.name.is_some() || p.alias.is_some() || p.omit || p.property
    };
    if all.iter().any(|n| matches!(model.get(n), Def::Struct { fields, .. } if fields.iter().any(reshaped))) {
        let _ = writeln!(
            body,
            "\n\n# The reshaping, per Rust struct (the `x-python` extension): its lists given as tuples, its\n\
             # `[name, value]` pair lists given as dicts, its fields given another name (insitubatch\n\
             # 0.2.0's), a second name too, or none (another field takes its name), and the keys the package\n\
             # adds with a fixed value. A dataclass's properties are the engine's values for a report it\n\
             # sent, which the class keeps apart from its fields.\n\
             TUPLE_FIELDS: dict[str, frozenset[str]] = {{"
        );
        table(body, model, all, |f| f.python.tuple.then(|| lit(&f.name)), ("frozenset({", "})"));
        let _ = writeln!(body, "}}\nDICT_FIELDS: dict[str, frozenset[str]] = {{");
        table(body, model, all, |f| f.python.dict.then(|| lit(&f.name)), ("frozenset({", "})"));
        let _ = writeln!(body, "}}\nPYTHON_NAMES: dict[str, dict[str, str]] = {{");
        table(
            body,
            model,
            all,
            |f| f.python.name.as_ref().map(|p| format!("{}: {}", lit(&f.name), lit(p))),
            ("{", "}"),
        );
        let _ = writeln!(body, "}}\nPYTHON_ALIASES: dict[str, dict[str, str]] = {{");
        table(
            body,
            model,
            all,
            |f| f.python.alias.as_ref().map(|a| format!("{}: {}", lit(&f.name), lit(a))),
            ("{", "}"),
        );
        let _ = writeln!(body, "}}\nOMITTED_FIELDS: dict[str, frozenset[str]] = {{");
        table(body, model, all, |f| f.python.omit.then(|| lit(&f.name)), ("frozenset({", "})"));
        let _ = writeln!(body, "}}\nFIXED_VALUES: dict[str, dict[str, Any]] = {{");
        for n in all {
            let Def::Struct { python, .. } = model.get(n) else { continue };
            let items: Vec<String> =
                python.extra.iter().filter_map(|e| e.value.as_ref().map(|v| format!("{}: {v}", lit(&e.key)))).collect();
            if !items.is_empty() {
                let _ = writeln!(body, "{},", wrapped("    ", &format!("{}: {{", lit(n)), &items, "}"));
            }
        }
        let _ = writeln!(body, "}}\nPROPERTY_FIELDS: dict[str, frozenset[str]] = {{");
        table(body, model, all, |f| f.python.property.then(|| lit(&f.name)), ("frozenset({", "})"));
        let _ = writeln!(body, "}}");
    }
}

/// The structs the package gives as dataclasses (those with an `x-python` `order`).
fn dataclasses(model: &Model) -> Vec<&str> {
    model
        .defs
        .iter()
        .filter(|(_, d)| matches!(d, Def::Struct { python, .. } if python.order.is_some()))
        .map(|(n, _)| n.as_str())
        .collect()
}

/// A field's type in a dataclass: words as `str` (the package's dataclasses type them so, as
/// insitubatch 0.2.0's do, so that a hand-built report may carry any), a struct as the
/// package's dataclass of that name.
fn dc_ty(model: &Model, t: &Ty, within: &str) -> String {
    match t {
        Ty::Int | Ty::Int64 | Ty::Ints(_) => "int".into(),
        Ty::Float => "float".into(),
        Ty::Bool => "bool".into(),
        Ty::Str | Ty::Strs(_) => "str".into(),
        Ty::Json | Ty::Map(_) => "dict[str, Any]".into(),
        Ty::Ref(n) => match model.get(n) {
            Def::Enum { .. } => "str".into(),
            Def::Alias { py, .. } => py.clone(),
            Def::Struct { python, .. } => {
                assert!(
                    python.order.is_some(),
                    "{within}: the dataclass holds a {n}, which is no dataclass: give {n} an x-python `order`"
                );
                n.clone()
            }
        },
        Ty::Array(item) => format!("list[{}]", dc_ty(model, item, within)),
        Ty::Tuple(items) => {
            format!("tuple[{}]", items.iter().map(|i| dc_ty(model, i, within)).collect::<Vec<_>>().join(", "))
        }
        Ty::Nullable(inner) => format!("{} | None", dc_ty(model, inner, within)),
    }
}

/// A dataclass field's type and default (`None`: no default).
fn dc_field(model: &Model, f: &Field, within: &str) -> (String, Option<String>) {
    let within = format!("{within}.{}", f.name);
    let factory = |what: &str| Some(format!("dataclasses.field(default_factory={what})"));
    let (shown, zero) = match &f.ty {
        Ty::Array(item) if f.python.tuple => {
            (format!("tuple[{}, ...]", dc_ty(model, item, &within)), Some("()".into()))
        }
        Ty::Array(item) if f.python.dict => match item.as_ref() {
            Ty::Tuple(pair) => (
                format!("dict[{}, {}]", dc_ty(model, &pair[0], &within), dc_ty(model, &pair[1], &within)),
                factory("dict"),
            ),
            _ => unreachable!("model.rs checks that a dict field is a list of pairs"),
        },
        Ty::Array(_) => (dc_ty(model, &f.ty, &within), factory("list")),
        Ty::Json | Ty::Map(_) => (dc_ty(model, &f.ty, &within), factory("dict")),
        Ty::Nullable(_) => (dc_ty(model, &f.ty, &within), Some("None".into())),
        Ty::Int | Ty::Int64 | Ty::Ints(_) => ("int".into(), Some("0".into())),
        Ty::Float => ("float".into(), Some("0.0".into())),
        Ty::Bool => ("bool".into(), Some("False".into())),
        Ty::Str => ("str".into(), Some("\"\"".into())),
        Ty::Ref(n) if matches!(model.get(n), Def::Struct { .. }) => {
            let t = dc_ty(model, &f.ty, &within);
            (t.clone(), factory(&t))
        }
        Ty::Ref(_) | Ty::Strs(_) | Ty::Tuple(_) => (dc_ty(model, &f.ty, &within), None),
    };
    if f.python.required {
        return (shown, None);
    }
    match f.python.default.as_deref() {
        Some("None") if !shown.ends_with("| None") => (format!("{shown} | None"), Some("None".into())),
        Some(d) => (shown, Some(d.to_string())),
        None => {
            assert!(
                zero.is_some(),
                "{within}: no default for this type: give it an x-python `default` (or `required`)"
            );
            (shown, zero)
        }
    }
}

/// The field lines of dataclass `name` at `indent`: its fields but its properties, in
/// `order`, then the fields it does not list; each after its doc comment.
fn dataclass_fields(model: &Model, name: &str, indent: &str) -> String {
    let Def::Struct { fields, python, .. } = model.get(name) else { panic!("{name} is not a struct") };
    let order = python.order.as_deref().unwrap_or_default();
    let mut ordered: Vec<&Field> =
        order.iter().filter_map(|n| fields.iter().find(|f| f.python_name() == n.as_str())).collect();
    ordered.extend(fields.iter().filter(|f| !f.python.property && !order.iter().any(|n| n == f.python_name())));
    let mut out = String::new();
    let mut defaulted: Option<&str> = None;
    for f in ordered {
        let (t, default) = dc_field(model, f, name);
        comment(&mut out, &f.doc, indent);
        let key = f.python_name();
        match default {
            Some(d) => {
                defaulted.get_or_insert(key);
                let _ = writeln!(out, "{indent}{key}: {t} = {d}");
            }
            None => {
                if let Some(before) = defaulted {
                    panic!(
                        "{name}.{key} has no default but follows {before}, which has one: list it in `order` before {before}"
                    );
                }
                let _ = writeln!(out, "{indent}{key}: {t}");
            }
        }
    }
    out
}

/// The line that opens the generated fields of dataclass `name` in the package's source (its
/// indentation aside); `# END {name} fields` closes them.
fn begin_marker(name: &str) -> String {
    format!("# BEGIN {name} fields: generated by tools/boundary-types from the Rust type; do not edit")
}

/// `text` (a module of the package, `path`) with the fields of every dataclass written
/// between its markers ([`begin_marker`], in the class body): Python keeps the class, its
/// docstring and methods where it declares them (its signature and docs are its own), and the
/// fields come from the Rust type.
///
/// # Errors
/// A dataclass without markers in `text`, or markers of a type that is no dataclass.
pub fn fill_dataclasses(model: &Model, text: &str, path: &str) -> Result<String, String> {
    let names = dataclasses(model);
    let mut out = String::with_capacity(text.len());
    let mut lines = text.split_inclusive('\n');
    let mut filled: Vec<&str> = Vec::new();
    while let Some(line) = lines.next() {
        out.push_str(line);
        let trimmed = line.trim_start();
        let Some(rest) = trimmed.strip_prefix("# BEGIN ") else { continue };
        let name = rest.split(' ').next().unwrap_or_default();
        let Some(name) = names.iter().copied().find(|n| *n == name && trimmed.trim_end() == begin_marker(n)) else {
            return Err(format!(
                "{path}: `{}` opens the fields of no dataclass (the Rust types with an x-python `order` are {names:?})",
                trimmed.trim_end()
            ));
        };
        if filled.contains(&name) {
            return Err(format!("{path}: the fields of {name} are generated twice"));
        }
        let indent = &line[..line.len() - trimmed.len()];
        let end = format!("# END {name} fields");
        loop {
            match lines.next() {
                Some(l) if l.trim() == end => {
                    out.push_str(&dataclass_fields(model, name, indent));
                    out.push_str(l);
                    break;
                }
                Some(_) => {}
                None => return Err(format!("{path}: `{}` has no `{end}` after it", begin_marker(name))),
            }
        }
        filled.push(name);
    }
    match names.iter().find(|n| !filled.contains(n)) {
        Some(n) => Err(format!(
            "{path}: the dataclass {n} has no generated fields: put `{}` and `# END {n} fields` in its class body",
            begin_marker(n)
        )),
        None => Ok(out),
    }
}
