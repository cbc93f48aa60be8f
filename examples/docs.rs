//! The book in `docs/` (mdBook), as tests. Each page is the doc comment of one module here
//! (written by `build.rs`), so `cargo test -p insitubatch-examples --doc` compiles and runs every
//! ```` ```rust ```` block of the book against this workspace; lines starting with `# ` are
//! hidden in the book, as in rustdoc. Python, JS and shell blocks are run by
//! `docs-tests/test_snippets.py`, the links are checked by `docs-tests/linkcheck.py`, and
//! `tests/reference.rs` keeps the reference pages equal to the report types' doc comments.
//! `scripts/test-docs.sh` runs all of it.

include!(concat!(env!("OUT_DIR"), "/pages.rs"));
