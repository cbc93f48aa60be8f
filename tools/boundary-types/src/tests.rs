use serde_json::json;

use super::*;
use crate::model::{Def, Ty, doc_text, ty};

#[test]
fn the_generated_files_are_current() {
    let stale = stale();
    assert!(
        stale.is_empty(),
        "{stale:?} out of date with the Rust report types: run `cargo run -p insitubatch-boundary-types` and commit \
         the result"
    );
}

#[test]
fn every_report_type_and_field_has_a_doc_comment() {
    let m = model();
    for (name, def) in &m.defs {
        match def {
            Def::Struct { doc, fields, .. } => {
                assert!(!doc.is_empty(), "{name} has no doc comment");
                for f in fields {
                    assert!(
                        !f.doc.is_empty(),
                        "{name}.{} has no doc comment: document it (it is a report field)",
                        f.name
                    );
                }
            }
            Def::Enum { doc, .. } | Def::Alias { doc, .. } => assert!(!doc.is_empty(), "{name} has no doc comment"),
        }
    }
}

#[test]
fn stage_words_are_in_the_order_of_stage_all() {
    // The Python package takes its stage order (ties in the verdict, the order of the
    // `blocked` list `_native.verdict` reads) from the generated `Stage` literal.
    let m = model();
    let Def::Enum { words, .. } = m.get("Stage") else { panic!("Stage is an enum") };
    let all: Vec<&str> = insitubatch_core::Stage::ALL.iter().map(|s| s.name()).collect();
    assert_eq!(
        words.iter().map(|(w, _)| w.as_str()).collect::<Vec<_>>(),
        all,
        "declare Stage's variants in Stage::ALL's order"
    );
}

#[test]
fn schemas_read_as_types() {
    let t = |v| ty(&v).expect("a known shape");
    assert_eq!(t(json!({"type": "integer", "format": "uint64"})), Ty::Int64);
    assert_eq!(t(json!({"type": "integer", "format": "uint"})), Ty::Int);
    assert_eq!(t(json!({"type": ["number", "null"]})), Ty::Nullable(Box::new(Ty::Float)));
    assert_eq!(
        t(json!({"anyOf": [{"$ref": "#/$defs/Cut"}, {"type": "null"}]})),
        Ty::Nullable(Box::new(Ty::Ref("Cut".into())))
    );
    assert_eq!(
        t(
            json!({"type": "array", "items": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]}})
        ),
        Ty::Array(Box::new(Ty::Tuple(vec![Ty::Str, Ty::Int])))
    );
    assert_eq!(
        t(json!({"type": "array", "items": {"type": ["string", "null"]}})),
        Ty::Array(Box::new(Ty::Nullable(Box::new(Ty::Str))))
    );
    assert_eq!(t(json!({"type": "string", "enum": ["raise", "nan"]})), Ty::Strs(vec!["raise".into(), "nan".into()]));
    assert_eq!(t(json!({"type": "integer", "enum": [2, 3]})), Ty::Ints(vec![2, 3]));
    assert_eq!(t(json!({"type": "object", "additionalProperties": true})), Ty::Json);
    // What the writers do not know is refused, not guessed.
    assert!(ty(&json!({"anyOf": [{"type": "string"}, {"type": "integer"}]})).is_err());
    assert!(ty(&json!({"type": "object", "properties": {"a": {"type": "string"}}})).is_err());
    assert!(ty(&json!({"$ref": "other.json#/X"})).is_err());
}

#[test]
fn intra_doc_links_become_code_spans() {
    let d = |s: &str| doc_text(&json!({ "description": s }));
    assert_eq!(d("[`CHECKPOINT_VERSION`]."), "`CHECKPOINT_VERSION`.");
    assert_eq!(d("See [`crate::a::B`] and [`c`](x)."), "See `crate::a::B` and [`c`](x).");
    assert_eq!(d("  plain  "), "plain");
}

/// A tiny model: a struct with every kind of field, an enum, and x-python annotations.
fn sample() -> Model {
    let defs = json!({
        "Stage": {"description": "A stage.", "oneOf": [
            {"type": "string", "const": "store", "description": "The store."},
            {"type": "string", "const": "decode", "description": "The decoders."}
        ]},
        "Report": {
            "description": "A report.\nTwo lines.",
            "x-python": {"total": false, "extra": {
                "own": "int  # computed", "late?": "str", "fixed": "bool = True  # always"
            }},
            "type": "object",
            "required": ["shape", "pairs", "stage", "peak", "chunks", "label_chunks", "auto"],
            "properties": {
                "peak": {"type": "integer", "description": "The peak.", "x-python": {"name": "resident_peak"}},
                "chunks": {"type": "integer", "description": "Chunks.", "x-python": {"omit": true}},
                "label_chunks": {
                    "type": "array",
                    "items": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]},
                    "description": "By label.", "x-python": {"dict": true, "name": "chunks"}
                },
                "auto": {"type": "integer", "description": "Automatic.", "x-python": {"alias": "working_set"}},
                "shape": {
                    "type": ["array", "null"], "items": {"type": "integer"},
                    "description": "A shape.", "x-python": {"tuple": true}
                },
                "pairs": {
                    "type": "array",
                    "items": {"type": "array", "prefixItems": [{"$ref": "#/$defs/Stage"}, {"type": "number"}]},
                    "description": "Pairs.", "x-python": {"dict": true}
                },
                "stage": {"$ref": "#/$defs/Stage", "description": "The stage."},
                "absent": {"type": ["string", "null"], "description": "Skipped when None."}
            }
        }
    });
    Model::from_defs(defs.as_object().expect("an object"))
}

#[test]
fn the_typescript_options_of_a_sample() {
    let defs = json!({
        "Stage": {"description": "A stage.", "oneOf": [
            {"type": "string", "const": "store", "description": "The store."},
            {"type": "string", "const": "decode", "description": "The decoders."}
        ]},
        "Sizes": {"description": "Sizes in order.", "x-ts": "Record<string, number>", "x-python": {"type": "dict"}},
        "Inner": {
            "description": "Nested.",
            "type": "object",
            "properties": {"backoff_s": {"type": "number", "description": "Seconds."}}
        },
        "Opts": {
            "description": "Options.",
            "type": "object",
            "properties": {
                "batch_size": {"type": "integer", "format": "uint", "description": "Rows."},
                "seed": {"type": "integer", "format": "uint64", "description": "A seed."},
                "budget_bytes": {"type": ["integer", "null"], "format": "uint64", "description": "Bytes."},
                "stage": {"$ref": "#/$defs/Stage", "description": "The stage."},
                "read_policy": {"$ref": "#/$defs/Inner", "description": "Reads."},
                "sizes": {"anyOf": [{"$ref": "#/$defs/Sizes"}, {"type": "null"}], "description": "Patch."},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Map."},
                "weights": {"type": "array", "items": {"type": "number"}, "x-ts": "number[] | Float64Array",
                            "description": "Weights."}
            }
        }
    });
    let m = Model::from_defs(defs.as_object().expect("an object"));
    let defaults = [
        (
            "Opts",
            json!({"batch_size": 32, "seed": 0, "budget_bytes": null, "stage": "store", "read_policy": {},
                        "labels": {}}),
        ),
        ("Inner", json!({"backoff_s": 0.1})),
    ];
    let out = ts::write_options(&m, &defaults, insitubatch_core::camel_case, "header");
    let want = "// header

/** Sizes in order. */
export type Sizes = Record<string, number>;

/** Nested. */
export interface Inner {
  /** Seconds. Default `0.1`. */
  backoffS?: number;
}

/** Options. */
export interface Opts {
  /** Rows. Default `32`. */
  batchSize?: number;
  /** A seed. Default `0`. */
  seed?: number | bigint;
  /** Bytes. */
  budgetBytes?: number | bigint;
  /** The stage. Default `'store'`. */
  stage?: 'store' | 'decode';
  /** Reads. */
  readPolicy?: Inner;
  /** Patch. */
  sizes?: Sizes;
  /** Map. */
  labels?: Record<string, string>;
  /** Weights. */
  weights?: number[] | Float64Array;
}
";
    assert_eq!(out, want);
}

#[test]
fn the_typescript_of_a_sample() {
    let m = sample();
    let out = ts::write(&m, &["Stage".into(), "Report".into()], "header");
    let want = "// header

/**
 * A stage.
 *
 * - `store`: The store.
 * - `decode`: The decoders.
 */
export type Stage = 'store' | 'decode';

/**
 * A report.
 * Two lines.
 */
export interface Report {
  /** A shape. */
  shape: number[] | null;
  /** Pairs. */
  pairs: [Stage, number][];
  /** The stage. */
  stage: Stage;
  /** The peak. */
  peak: number;
  /** Chunks. */
  chunks: number;
  /** By label. */
  label_chunks: [string, number][];
  /** Automatic. */
  auto: number;
  /** Skipped when None. */
  absent?: string;
}
";
    assert_eq!(out, want);
}

#[test]
fn the_python_of_a_sample() {
    let m = sample();
    let all = m.reachable(&["Report"]);
    assert_eq!(all, ["Stage", "Report"]);
    let out = py::write(&m, &all, &all, "Header.");
    for want in [
        "from typing import Any, Literal, TypedDict\n",
        "# - `store`: The store.\n",
        "Stage = Literal[\"store\", \"decode\"]\n",
        // The engine's JSON: the optional field in a total=False base.
        "class _ReportJsonOptional(TypedDict, total=False):\n    # Skipped when None.\n    absent: str | None\n",
        "class ReportJson(_ReportJsonOptional):\n    \"\"\"The engine's JSON of ``Report``: A report.\n    Two lines.\"\"\"\n",
        "    pairs: list[tuple[Stage, float]]\n",
        // The package's shape: total=False, reshaped, renamed, with its own fields.
        "class Report(TypedDict, total=False):\n",
        "    shape: tuple[int, ...] | None\n",
        "    pairs: dict[Stage, float]\n",
        "    resident_peak: int\n",
        // One `chunks` in Python: the omitted field's name, taken by the other.
        "    # By label.\n    chunks: dict[str, int]\n",
        "    # Automatic.\n    auto: int\n    # insitubatch 0.2.0's name for `auto` (the same value).\n    working_set: int\n",
        "    # Added by the package: computed\n    own: int\n",
        "    # Added by the package: always\n    fixed: bool\n",
        "    late: str\n",
        "TUPLE_FIELDS: dict[str, frozenset[str]] = {\n    \"Report\": frozenset({\"shape\"}),\n}\n",
        "DICT_FIELDS: dict[str, frozenset[str]] = {\n    \"Report\": frozenset({\"pairs\", \"label_chunks\"}),\n}\n",
        "PYTHON_NAMES: dict[str, dict[str, str]] = {\n    \"Report\": {\"peak\": \"resident_peak\", \"label_chunks\": \"chunks\"},\n}\n",
        "PYTHON_ALIASES: dict[str, dict[str, str]] = {\n    \"Report\": {\"auto\": \"working_set\"},\n}\n",
        "OMITTED_FIELDS: dict[str, frozenset[str]] = {\n    \"Report\": frozenset({\"chunks\"}),\n}\n",
        "FIXED_VALUES: dict[str, dict[str, Any]] = {\n    \"Report\": {\"fixed\": True},\n}\n",
    ] {
        assert!(out.contains(want), "missing:\n{want}\nin:\n{out}");
    }
    assert_eq!(out.matches("    chunks: ").count(), 2, "ReportJson's and Report's, once each:\n{out}");
}

#[test]
fn misplaced_python_annotations_are_refused() {
    for (field, why) in [
        (json!({"type": "integer", "x-python": {"tuple": true}}), "tuple"),
        (json!({"type": "array", "items": {"type": "integer"}, "x-python": {"dict": true}}), "dict"),
        (json!({"type": "integer", "x-python": {"nmae": "x"}}), "nmae"),
        (json!({"type": "integer", "x-python": {"omit": true, "name": "g"}}), "takes no name, alias or type"),
        // Two Python keys of one name: a field's name, another's alias or an extra.
        (json!({"type": "integer", "x-python": {"name": "g"}}), "the Python key \"g\" is given twice"),
        (json!({"type": "integer", "x-python": {"alias": "g"}}), "the Python key \"g\" is given twice"),
        (json!({"type": "integer", "x-python": {"alias": "own"}}), "the Python key \"own\" is given twice"),
    ] {
        let defs = json!({"R": {
            "description": "R.", "type": "object", "required": ["f", "g"],
            "x-python": {"extra": {"own": "int"}},
            "properties": {"f": field, "g": {"type": "integer"}}
        }});
        let err =
            std::panic::catch_unwind(|| Model::from_defs(defs.as_object().expect("an object"))).expect_err("refused");
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains(why), "{msg}");
    }
    // A fixed value on a key the package may leave out.
    let defs = json!({"R": {"description": "R.", "type": "object", "x-python": {"extra": {"k?": "int = 1"}}, "properties": {}}});
    let err = std::panic::catch_unwind(|| Model::from_defs(defs.as_object().expect("an object"))).expect_err("refused");
    assert!(err.downcast_ref::<String>().is_some_and(|m| m.contains("may be absent (`?`) but has a fixed value")));
}

/// A report given to Python as a dataclass (`order`), holding another (after it in the
/// schema's order) and an enum.
fn dataclass_sample(report_x: serde_json::Value, field_x: serde_json::Value) -> serde_json::Value {
    json!({
        "Stage": {"description": "A stage.", "type": "string", "enum": ["store", "decode"]},
        "Report": {
            "description": "A report.", "x-python": report_x, "type": "object",
            "required": ["peak", "split", "stage", "times", "blocked", "verdict", "shape", "label"],
            "properties": {
                "peak": {"type": "integer", "description": "The peak.", "x-python": {"name": "resident_peak"}},
                "split": {"type": "string", "description": "The split.", "x-python": field_x},
                "stage": {"$ref": "#/$defs/Stage", "description": "A stage.", "x-python": {"default": "\"store\""}},
                "times": {"$ref": "#/$defs/Times", "description": "Its times."},
                "blocked": {
                    "type": "array",
                    "items": {"type": "array", "prefixItems": [{"$ref": "#/$defs/Stage"}, {"type": "number"}]},
                    "description": "Pairs.", "x-python": {"dict": true}
                },
                "verdict": {"type": "string", "description": "Computed.", "x-python": {"property": true}},
                "shape": {"type": "array", "items": {"type": "integer"}, "description": "A shape.", "x-python": {"tuple": true}},
                "label": {"type": ["string", "null"], "description": "A label."}
            }
        },
        "Times": {
            "description": "Times.", "x-python": {"order": []}, "type": "object", "required": ["decode_s", "wait_s"],
            "properties": {
                "decode_s": {"type": "number", "description": "Decode.", "x-python": {"default": "None"}},
                "wait_s": {"type": "number", "description": "Waits."}
            }
        }
    })
}

/// A module with the two dataclasses' markers, as `_runtime.py` holds them.
const MODULE: &str = "\
@dataclasses.dataclass(frozen=True)
class Times:
    \"\"\"Python's docstring.\"\"\"

    # BEGIN Times fields: generated by tools/boundary-types from the Rust type; do not edit
    stale: int = 0
    # END Times fields

    @property
    def total(self) -> float: ...


@dataclasses.dataclass(frozen=True)
class Report:
    # BEGIN Report fields: generated by tools/boundary-types from the Rust type; do not edit
    # END Report fields
    _private: int = dataclasses.field(default=0, init=False)
";

/// [`py::fill_dataclasses`] over `module`, its panic or error as the error.
fn fill(defs: &serde_json::Value, module: &str) -> Result<String, String> {
    std::panic::catch_unwind(|| {
        let m = Model::from_defs(defs.as_object().expect("an object"));
        py::fill_dataclasses(&m, module, "_runtime.py")
    })
    .unwrap_or_else(|e| Err(e.downcast_ref::<String>().cloned().unwrap_or_default()))
}

#[test]
fn the_python_dataclasses_of_a_sample() {
    let defs = dataclass_sample(json!({"order": ["split", "resident_peak"]}), json!({"required": true}));
    let out = fill(&defs, MODULE).expect("filled");
    let want = "\
@dataclasses.dataclass(frozen=True)
class Times:
    \"\"\"Python's docstring.\"\"\"

    # BEGIN Times fields: generated by tools/boundary-types from the Rust type; do not edit
    # Decode.
    decode_s: float | None = None
    # Waits.
    wait_s: float = 0.0
    # END Times fields

    @property
    def total(self) -> float: ...


@dataclasses.dataclass(frozen=True)
class Report:
    # BEGIN Report fields: generated by tools/boundary-types from the Rust type; do not edit
    # The split.
    split: str
    # The peak.
    resident_peak: int = 0
    # A stage.
    stage: str = \"store\"
    # Its times.
    times: Times = dataclasses.field(default_factory=Times)
    # Pairs.
    blocked: dict[str, float] = dataclasses.field(default_factory=dict)
    # A shape.
    shape: tuple[int, ...] = ()
    # A label.
    label: str | None = None
    # END Report fields
    _private: int = dataclasses.field(default=0, init=False)
";
    assert_eq!(out, want);
    // Filling again changes nothing.
    assert_eq!(fill(&defs, &out).expect("filled"), want);
    // The module's tables name the properties, which the class keeps apart from its fields.
    let m = Model::from_defs(defs.as_object().expect("an object"));
    let module = py::write(&m, &m.reachable(&["Report"]), &[], "Header.");
    let want = "PROPERTY_FIELDS: dict[str, frozenset[str]] = {\n    \"Report\": frozenset({\"verdict\"}),\n}\n";
    assert!(module.contains(want), "{module}");
}

#[test]
fn dataclass_annotations_that_cannot_work_are_refused() {
    let refused = |report_x: serde_json::Value, field_x: serde_json::Value| {
        fill(&dataclass_sample(report_x, field_x), MODULE).expect_err("refused")
    };
    // A field without a default after one with a default (a TypeError at import).
    assert!(refused(json!({"order": []}), json!({"required": true})).contains("list it in `order` before"));
    // `order` naming no field (its JSON name where Python has another), or a property.
    assert!(refused(json!({"order": ["peak"]}), json!({})).contains("no field's Python name"));
    assert!(refused(json!({"order": ["verdict"]}), json!({})).contains("a property"));
    // Dataclass keys on a struct that is no dataclass; keys that exclude each other.
    assert!(refused(json!({}), json!({"required": true})).contains("are for a dataclass"));
    assert!(refused(json!({"order": []}), json!({"required": true, "default": "1"})).contains("exclude each other"));
    // A dataclass shows each field once, under one name.
    assert!(refused(json!({"order": []}), json!({"alias": "s"})).contains("not a dataclass"));
    assert!(refused(json!({"order": []}), json!({"omit": true})).contains("not a dataclass"));
    // A word field needs a default; a struct a dataclass holds is one.
    let mut defs = dataclass_sample(json!({"order": []}), json!({}));
    defs["Report"]["properties"]["stage"]["x-python"] = json!({});
    assert!(fill(&defs, MODULE).expect_err("refused").contains("give it an x-python `default`"));
    let mut defs = dataclass_sample(json!({"order": []}), json!({}));
    defs["Times"]["x-python"] = json!({});
    defs["Times"]["properties"]["decode_s"]["x-python"] = json!({});
    let report_only = &MODULE[MODULE.find("@dataclasses.dataclass(frozen=True)\nclass Report").expect("there")..];
    assert!(fill(&defs, report_only).expect_err("refused").contains("give Times an x-python `order`"));
}

#[test]
fn dataclass_markers_are_checked() {
    let defs = dataclass_sample(json!({"order": []}), json!({}));
    let without = MODULE.replace("    # BEGIN Report fields: generated by tools/boundary-types from the Rust type; do not edit\n    # END Report fields\n", "");
    assert!(fill(&defs, &without).expect_err("refused").contains("the dataclass Report has no generated fields"));
    let unclosed = MODULE.replace("    # END Report fields\n", "");
    assert!(fill(&defs, &unclosed).expect_err("refused").contains("has no `# END Report fields`"));
    let unknown = MODULE.replace("BEGIN Report fields", "BEGIN Rapport fields");
    assert!(fill(&defs, &unknown).expect_err("refused").contains("opens the fields of no dataclass"));
    let twice = format!(
        "{MODULE}{}",
        &MODULE[MODULE.find("@dataclasses.dataclass(frozen=True)\nclass Report").expect("there")..]
    );
    assert!(fill(&defs, &twice).expect_err("refused").contains("generated twice"));
}

/// The nested objects whose keys JS renames (core's `DatasetSpec::nested_objects`, read by
/// wasm's key-case pass) are exactly the spec's structs of options, at their paths.
#[test]
fn the_nested_objects_are_the_specs_structs() {
    fn walk(m: &Model, name: &str, prefix: &str, out: &mut Vec<(String, Vec<String>)>) {
        let Def::Struct { fields, .. } = m.get(name) else { panic!("{name} is not a struct") };
        for f in fields {
            if let Some((inner, each)) = crate::nested(m, &f.ty) {
                let path = format!("{prefix}{}{}", f.name, if each { ".*" } else { "" });
                let Def::Struct { fields: inner_fields, .. } = m.get(&inner) else { panic!("{inner}") };
                out.push((path.clone(), inner_fields.iter().map(|f| f.name.clone()).collect()));
                walk(m, &inner, &format!("{path}."), out);
            }
        }
    }
    let m = model();
    let mut from_schema = Vec::new();
    walk(&m, "DatasetSpec", "", &mut from_schema);
    let mut from_core: Vec<(String, Vec<String>)> = insitubatch_core::DatasetSpec::nested_objects()
        .into_iter()
        .map(|(p, f)| (p.to_string(), f.iter().map(|s| (*s).to_string()).collect()))
        .collect();
    from_schema.sort();
    from_core.sort();
    assert_eq!(from_core, from_schema);
}
