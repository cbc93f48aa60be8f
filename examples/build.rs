//! Writes one module per page of the book (every `.md` under `docs/`), each documented by that
//! page, so rustdoc runs every Rust code block of the book as a doc-test. A new page is picked
//! up without a list to keep in step.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn pages(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).expect("docs/ is readable").flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            pages(&p, out);
        } else if p.extension().is_some_and(|e| e == "md") {
            out.push(p);
        }
    }
}

fn main() {
    // Read at run time, not with `env!`: a build script compiled for another checkout of the
    // same sources (a shared target dir) would otherwise read that checkout's docs/.
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let docs = manifest_dir.join("../docs").canonicalize().expect("docs/ exists");
    println!("cargo::rerun-if-changed={}", docs.display());
    let mut found = Vec::new();
    pages(&docs, &mut found);
    let mut code = String::new();
    for page in found {
        let rel = page.strip_prefix(&docs).expect("under docs/").display().to_string();
        let name: String = rel
            .trim_end_matches(".md")
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' })
            .collect();
        let _ = writeln!(code, "#[doc = include_str!({:?})]\npub mod page_{name} {{}}", page.display().to_string());
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("pages.rs");
    std::fs::write(out, code).expect("OUT_DIR is writable");
}
