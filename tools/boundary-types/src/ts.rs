//! The TypeScript declarations: one interface per struct, one union of string literals per
//! enum, keyed as the engine's JSON is (what `JSON.parse` gives JS).

use std::fmt::Write as _;

use crate::model::{Def, Model, Ty};

/// `/** ... */` at `indent`, or nothing for an empty doc.
fn jsdoc(out: &mut String, doc: &str, indent: &str) {
    let doc = doc.replace("*/", "*\\/");
    let lines: Vec<&str> = doc.lines().collect();
    match lines.as_slice() {
        [] => {}
        [one] => {
            let _ = writeln!(out, "{indent}/** {one} */");
        }
        many => {
            let _ = writeln!(out, "{indent}/**");
            for l in many {
                let _ = writeln!(out, "{indent} *{}{l}", if l.is_empty() { "" } else { " " });
            }
            let _ = writeln!(out, "{indent} */");
        }
    }
}

/// `text` as `//` comment lines (a generated file's header).
fn comment(text: &str) -> String {
    let mut out = String::new();
    for l in text.lines() {
        let _ = writeln!(out, "//{}{l}", if l.is_empty() { "" } else { " " });
    }
    out
}

/// A type, parenthesized where it is a union inside a list.
pub fn ty(t: &Ty) -> String {
    match t {
        Ty::Int | Ty::Int64 | Ty::Float => "number".into(),
        Ty::Bool => "boolean".into(),
        Ty::Str => "string".into(),
        Ty::Json => "Record<string, unknown>".into(),
        Ty::Map(t) => format!("Record<string, {}>", ty(t)),
        Ty::Ref(n) => n.clone(),
        Ty::Array(item) => match item.as_ref() {
            Ty::Nullable(_) | Ty::Strs(_) | Ty::Ints(_) => format!("({})[]", ty(item)),
            other => format!("{}[]", ty(other)),
        },
        Ty::Tuple(items) => format!("[{}]", items.iter().map(ty).collect::<Vec<_>>().join(", ")),
        Ty::Nullable(inner) => format!("{} | null", ty(inner)),
        Ty::Strs(words) => words.iter().map(|w| format!("'{w}'")).collect::<Vec<_>>().join(" | "),
        Ty::Ints(ns) => ns.iter().map(ToString::to_string).collect::<Vec<_>>().join(" | "),
    }
}

/// The declarations of `names`, in that order, under `header` (as comment lines).
pub fn write(model: &Model, names: &[String], header: &str) -> String {
    let mut out = comment(header);
    for name in names {
        out.push('\n');
        match model.get(name) {
            Def::Enum { doc, words } => {
                let mut doc = doc.clone();
                if words.iter().any(|(_, d)| !d.is_empty()) {
                    doc.push('\n');
                    for (w, d) in words {
                        let _ = write!(doc, "\n- `{w}`: {d}");
                    }
                }
                jsdoc(&mut out, &doc, "");
                let one =
                    format!("export type {name} = {};", ty(&Ty::Strs(words.iter().map(|(w, _)| w.clone()).collect())));
                if one.len() <= 110 {
                    let _ = writeln!(out, "{one}");
                } else {
                    let _ = writeln!(out, "export type {name} =");
                    for (i, (w, _)) in words.iter().enumerate() {
                        let _ = writeln!(out, "  | '{w}'{}", if i + 1 == words.len() { ";" } else { "" });
                    }
                }
            }
            Def::Alias { doc, ts, .. } => {
                jsdoc(&mut out, doc, "");
                let _ = writeln!(out, "export type {name} = {ts};");
            }
            Def::Struct { doc, fields, .. } => {
                jsdoc(&mut out, doc, "");
                let _ = writeln!(out, "export interface {name} {{");
                for f in fields {
                    jsdoc(&mut out, &f.doc, "  ");
                    // A field serde skips when `None` is absent, never `null`.
                    let (opt, t) = match (&f.ty, f.required) {
                        (Ty::Nullable(inner), false) => ("?", ty(inner)),
                        (t, false) => ("?", ty(t)),
                        (t, true) => ("", ty(t)),
                    };
                    let _ = writeln!(out, "  {}{opt}: {t};", f.name);
                }
                let _ = writeln!(out, "}}");
            }
        }
    }
    out
}

/// The options JS passes in (core's `DatasetSpec` and the structs and aliases it reaches):
/// every field optional and keyed as `wasm/src/options.rs` renames core's keys (`rename`,
/// camelCase), a 64-bit integer a number or a `BigInt`, an enum its words, a struct its
/// interface, and each field's default (`defaults`: per struct, its `Default` as JSON; `null`
/// says nothing, the doc says what absent means) after its doc.
///
/// # Panics
/// When `defaults` names no struct.
pub fn write_options(
    model: &Model,
    defaults: &[(&str, serde_json::Value)],
    rename: impl Fn(&str) -> String,
    header: &str,
) -> String {
    let mut out = comment(header);
    let roots: Vec<&str> = defaults.iter().map(|(n, _)| *n).collect();
    for name in model.reachable(&roots) {
        match model.get(&name) {
            // An enum has no declaration of its own here: a field of one lists its words.
            Def::Enum { .. } => {}
            Def::Alias { doc, ts, .. } => {
                out.push('\n');
                jsdoc(&mut out, &in_js(doc, &rename), "");
                let _ = writeln!(out, "export type {name} = {};", rename_ts(ts, &rename));
            }
            Def::Struct { doc, fields, .. } => {
                out.push('\n');
                let given = defaults.iter().find(|(n, _)| *n == name).map(|(_, d)| d);
                jsdoc(&mut out, &in_js(doc, &rename), "");
                let _ = writeln!(out, "export interface {name} {{");
                for f in fields {
                    let mut doc = f.doc.clone();
                    match given.and_then(|d| d.get(&f.name)) {
                        // Absent says nothing (the doc says what it means); a nested object's
                        // defaults are on its own interface.
                        None | Some(serde_json::Value::Null | serde_json::Value::Object(_)) => {}
                        Some(serde_json::Value::String(s)) => doc.push_str(&format!(" Default `'{s}'`.")),
                        Some(v) => doc.push_str(&format!(" Default `{}`.", rename_ts(&v.to_string(), &rename))),
                    }
                    jsdoc(&mut out, &in_js(&doc, &rename), "  ");
                    let t = f.ts.clone().unwrap_or_else(|| option_ty(model, &f.ty));
                    let optional = if f.ts_required { "" } else { "?" };
                    let _ = writeln!(out, "  {}{optional}: {t};", rename(&f.name));
                }
                let _ = writeln!(out, "}}");
            }
        }
    }
    out
}

/// A doc comment as JS reads it: the option names in its code spans (`` `cache_dir` ``) in
/// JS's spelling, so that each language's doc names its own keys.
fn in_js(doc: &str, rename: &impl Fn(&str) -> String) -> String {
    doc.split('`')
        .enumerate()
        .map(|(i, part)| if i % 2 == 1 { rename_ts(part, rename) } else { part.to_string() })
        .collect::<Vec<_>>()
        .join("`")
}

/// A TypeScript type or value written with the spec's snake_case keys (an alias's object
/// type, `{ sample_axis }`), as JS spells them.
fn rename_ts(text: &str, rename: &impl Fn(&str) -> String) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    for c in text.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
            continue;
        }
        out.push_str(&if word.contains('_') { rename(&word) } else { std::mem::take(&mut word) });
        word.clear();
        out.push(c);
    }
    out.pop();
    out
}

/// A type as JS may pass it in (see [`write_options`]).
fn option_ty(model: &Model, t: &Ty) -> String {
    match t {
        Ty::Int64 => "number | bigint".into(),
        Ty::Nullable(inner) => option_ty(model, inner),
        Ty::Ref(n) => match model.get(n) {
            Def::Enum { words, .. } => ty(&Ty::Strs(words.iter().map(|(w, _)| w.clone()).collect())),
            Def::Struct { .. } | Def::Alias { .. } => n.clone(),
        },
        Ty::Array(item) => format!("{}[]", option_ty(model, item)),
        Ty::Tuple(items) => format!("[{}]", items.iter().map(|i| option_ty(model, i)).collect::<Vec<_>>().join(", ")),
        Ty::Map(item) => format!("Record<string, {}>", option_ty(model, item)),
        other => ty(other),
    }
}
