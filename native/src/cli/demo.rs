//! `demo`: write (once) and stream a small ERA5-like demo store, or stream `--url`.

use std::io::Write;
use std::time::Instant;

use anyhow::{Result, anyhow};
use insitubatch_native::demo;

use super::args::{RunArgs, open_ds, spec};
use super::resume::{ResumeArgs, Session};

pub(super) fn cmd_demo(url: Option<String>, resume: &ResumeArgs, knobs: &RunArgs) -> Result<()> {
    let mut session = Session::new(resume)?;
    let url = match url {
        Some(u) => u,
        None => {
            let path = demo::default_demo_path();
            if path.join(".complete").exists() {
                outln!("demo store: {}", path.display());
            } else {
                outln!("writing demo store to {} ...", path.display());
                let t = Instant::now();
                demo::write_demo_store(&path)?;
                outln!("written in {:.1}s", t.elapsed().as_secs_f64());
            }
            path.display().to_string()
        }
    };
    let ds = open_ds(&url, knobs, knobs.spec(spec().fractions)?, None)?;
    outln!("{}", ds.describe(1)?.render());
    session.on_signal_write(&ds, resume.checkpoint.as_deref())?;
    let t0 = Instant::now();
    let mut it = session.pass(&ds)?;
    let bar = indicatif::ProgressBar::new(it.n_batches() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "train epoch {prefix} [{bar:40}] {pos}/{len} batches {per_sec} eta {eta}",
        )
        .map_err(|e| anyhow!("{e}"))?
        .progress_chars("=> "),
    );
    bar.set_prefix(session.first_epoch(knobs.epoch).to_string());
    let (mut batches, mut samples, mut bytes, mut ttfb) = (0usize, 0u64, 0u64, None);
    while let Some(b) = it.next() {
        let b = b?;
        ttfb.get_or_insert_with(|| t0.elapsed().as_secs_f64());
        batches += 1;
        samples += b.len() as u64;
        bytes += b.arrays.values().map(|a| a.data.len() as u64).sum::<u64>();
        bar.inc(1);
        session.finished(&it, &b);
    }
    bar.finish();
    let secs = t0.elapsed().as_secs_f64();
    if let Some(stats) = ds.last_pass() {
        outln!("{}", stats.summary());
    }
    outln!(
        "result: {batches} batches, {samples} samples, {:.1} MB/s, first batch after {:.3}s, {:.2}s total",
        bytes as f64 / 1e6 / secs.max(1e-9),
        ttfb.unwrap_or(0.0),
        secs
    );
    Ok(())
}
