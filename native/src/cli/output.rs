//! What the CLI prints beside batches: an error as the CLI says it (its kind, options as
//! flags, the exit status), the run's configuration as JSON, and `describe
//! --sweep-block-chunks`'s table.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use insitubatch_native::DatasetSpec;
use serde_json::json;

use super::Cli;

/// An engine error as the CLI says it: option names as flags (`--patch-mode`), through core's
/// one rendering of an option error's text.
pub(super) fn render_error(e: &insitubatch_native::core::Error) -> String {
    e.message_in(&flag_of)
}

/// The flag of a spec option (`read_policy.backoff_s` → `--backoff-s`, `shuffle` →
/// `--no-shuffle`), read from clap's own definition: the flags are the spec's fields, so a
/// field's flag is the argument with its name. A path the CLI has no flag for stays as it is.
pub(super) fn flag_of(path: &str) -> String {
    use clap::CommandFactory;
    let name = path.rsplit('.').next().unwrap_or(path);
    let cli = Cli::command();
    let flag = cli
        .get_subcommands()
        .flat_map(clap::Command::get_arguments)
        .find(|a| a.get_id() == name)
        .and_then(clap::Arg::get_long)
        .map(|long| format!("--{long}"));
    flag.unwrap_or_else(|| path.to_string())
}

/// The exit of a failed command: an engine error names its kind (`error[invalid_option]: ...`)
/// and its options as flags, and exits with 2 where a flag's value was refused (an option
/// out of bounds, an array the store lacks: as clap does for a bad flag), else 1; any other
/// error as it is, with 1.
/// The engine's error `c` is (or holds, as `NativeError::Core`), if any.
pub(super) fn engine_error<'a>(
    c: &'a (dyn std::error::Error + 'static),
) -> Option<&'a insitubatch_native::core::Error> {
    c.downcast_ref::<insitubatch_native::core::Error>().or_else(|| match c.downcast_ref() {
        Some(insitubatch_native::NativeError::Core(e)) => Some(e),
        _ => None,
    })
}

pub(crate) fn report_error(e: &anyhow::Error) -> ExitCode {
    use insitubatch_native::core::ErrorKind;
    // The chain's contexts (`--resume FILE: ...`), then the engine's error as the CLI says it.
    let mut parts = Vec::new();
    let mut kind = None;
    for c in e.chain() {
        if let Some(err) = engine_error(c) {
            parts.push(render_error(err));
            kind = Some(err.kind());
            break;
        }
        parts.push(c.to_string());
    }
    let Some(kind) = kind else {
        let _ = writeln!(std::io::stderr(), "error: {e:#}");
        return ExitCode::from(1);
    };
    let _ = writeln!(std::io::stderr(), "error[{kind}]: {}", parts.join(": "));
    let input = [ErrorKind::InvalidOption, ErrorKind::ArrayNotFound, ErrorKind::NotAnArray];
    ExitCode::from(if input.contains(&kind) { 2 } else { 1 })
}

/// The run's configuration as JSON: the spec as serde writes it, with the threads the pool
/// has and the epoch the run starts at.
pub(super) fn config_json(spec: &DatasetSpec, threads: usize, epoch: u64) -> Result<serde_json::Value> {
    let mut config = serde_json::to_value(spec)?;
    if let Some(o) = config.as_object_mut() {
        o.insert("threads".to_owned(), json!(threads));
        o.insert("epoch".to_owned(), json!(epoch));
    }
    Ok(config)
}

/// `describe --sweep-block-chunks` as a table, one row per value asked.
pub(super) fn render_quality_curve(curve: &[insitubatch_native::QualityPoint]) -> String {
    let mut out =
        String::from("what if block_chunks were ...\n  block_chunks  widened  quality  floor       est. peak\n");
    for p in curve {
        out.push_str(&format!(
            "  {:>12}  {:>7}  {:>7}  {:<10}  {}\n",
            p.block_chunks,
            p.block_chunks_widened,
            p.quality.map_or_else(|| "n/a".to_string(), |q| format!("{q:.3}")),
            insitubatch_native::human_bytes(p.floor_bytes),
            insitubatch_native::human_bytes(p.estimated_peak_bytes)
        ));
    }
    out
}
