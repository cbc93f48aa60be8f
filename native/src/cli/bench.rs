//! `bench`: time epochs of the train view (wall, CPU, peak memory, the pass's stats), one
//! JSON row per epoch.

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Result, anyhow};
use insitubatch_native::NativeDataset;
use insitubatch_native::core::TierOpener;
use serde_json::json;

use super::args::{RunArgs, open_ds};
use super::output::config_json;
use super::pausing::PauseAfter;
use super::resume::{ResumeArgs, Session};

/// `bench` options beyond the knobs.
pub(super) struct BenchRun {
    pub(super) epochs: u64,
    pub(super) as_json: bool,
    pub(super) digest: bool,
    pub(super) hold: bool,
    pub(super) step_ms: u64,
    pub(super) pause_after_chunks: Option<u64>,
}

/// CPU seconds this process has spent so far (every thread), user and system apart: the
/// cost of a run beside its wall time, which a parent cannot split by epoch. From
/// `getrusage(RUSAGE_SELF)` (microseconds); `None` off Linux.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct CpuTimes {
    pub(super) user_s: f64,
    pub(super) sys_s: f64,
}

impl CpuTimes {
    #[cfg(target_os = "linux")]
    pub(super) fn now() -> Option<Self> {
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: getrusage writes a whole `rusage` into the pointer it is given and nothing else.
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) } != 0 {
            return None;
        }
        // SAFETY: the call succeeded, so it initialised the struct (zeroed before in any case).
        let usage = unsafe { usage.assume_init() };
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        Some(Self { user_s: secs(usage.ru_utime), sys_s: secs(usage.ru_stime) })
    }

    #[cfg(not(target_os = "linux"))]
    pub(super) fn now() -> Option<Self> {
        None
    }

    /// What was spent between `earlier` and `self`.
    pub(super) fn since(self, earlier: Self) -> Self {
        Self { user_s: self.user_s - earlier.user_s, sys_s: self.sys_s - earlier.sys_s }
    }

    pub(super) fn total_s(self) -> f64 {
        self.user_s + self.sys_s
    }

    /// User + system CPU seconds per 1e9 decoded bytes: what a user on a cloud bill pays per
    /// gigabyte. `None` when nothing was decoded.
    pub(super) fn s_per_gb(self, decoded_bytes: u64) -> Option<f64> {
        (decoded_bytes > 0).then(|| self.total_s() / (decoded_bytes as f64 / 1e9))
    }

    /// The JSON fields of a row that spent these times on `decoded_bytes`, under `prefix`:
    /// `{prefix}user_s`, `{prefix}sys_s` and `{prefix}s_per_gb`.
    pub(super) fn add_to(self, row: &mut serde_json::Value, prefix: &str, decoded_bytes: u64) {
        row[format!("{prefix}user_s")] = json!(self.user_s);
        row[format!("{prefix}sys_s")] = json!(self.sys_s);
        row[format!("{prefix}s_per_gb")] = json!(self.s_per_gb(decoded_bytes));
    }
}

pub(super) fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()))
        })
        .map_or(0, |kb| kb * 1024)
}

pub(super) fn cmd_bench(url: &str, run: &BenchRun, resume: &ResumeArgs, knobs: &RunArgs) -> Result<()> {
    let (epochs, as_json) = (run.epochs, run.as_json);
    let mut session = Session::new(resume)?;
    let resumed = session.resume.clone();
    let first_epoch = session.first_epoch(knobs.epoch);
    // `bench` times the whole array unless told otherwise.
    let spec = knobs.spec((1.0, 0.0, 0.0))?;
    let tier: Option<Arc<dyn TierOpener>> = match run.pause_after_chunks {
        None => None,
        Some(after) => {
            let flags = spec.resolve()?.cache.ok_or_else(|| anyhow!("--pause-after-chunks needs --cache-dir"))?;
            Some(Arc::new(PauseAfter { cache: insitubatch_native::CacheOptions::from_flags(&flags)?, after }))
        }
    };
    let t_open = Instant::now();
    let ds = open_ds(url, knobs, spec.clone(), tier)?;
    let open_s = t_open.elapsed().as_secs_f64();
    // Before --hold's line: a signal after it finds a checkpoint to write.
    session.on_signal_write(&ds, resume.checkpoint.as_deref())?;
    if run.hold {
        outln!("opened {}", std::process::id());
        let _ = std::io::stdout().flush();
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
    }
    let report = ds.describe(1)?;
    let threads = ds.runtime().pool.rayon().current_num_threads();
    let variables: Vec<String> = ds.dataset().variables().iter().map(|v| v.label.clone()).collect();
    let mut rows = Vec::new();
    for k in 0..epochs {
        let row = bench_epoch(&ds, run, &mut session, first_epoch + k, k == 0, t_open)?;
        rows.push(row);
    }
    let mut config = config_json(&spec, threads, knobs.epoch)?;
    config["epochs"] = json!(epochs);
    if let Some(c) = &resumed {
        config["epoch"] = json!(first_epoch);
        config["resume"] = serde_json::to_value(c)?;
    }
    let out = json!({
        "url": url,
        "variables": variables,
        "config": config,
        "epochs": rows,
        "peak_rss_bytes": peak_rss_bytes(),
        "process_cpu_s": CpuTimes::now().map(CpuTimes::total_s),
        "open_s": open_s,
        "disk_tier": ds.dataset().tier_counters(),
        "describe_estimated_peak_bytes": report.memory.estimated_peak_bytes,
    });
    if as_json {
        outln!("{}", serde_json::to_string(&out)?);
    } else {
        outln!(
            "peak RSS {} (describe estimated {})",
            insitubatch_native::human_bytes(peak_rss_bytes()),
            insitubatch_native::human_bytes(report.memory.estimated_peak_bytes)
        );
    }
    Ok(())
}

/// One epoch of `bench`: its JSON row (printed as a line too unless `--json`).
pub(super) fn bench_epoch(
    ds: &NativeDataset,
    run: &BenchRun,
    session: &mut Session,
    epoch: u64,
    first: bool,
    t_open: Instant,
) -> Result<serde_json::Value> {
    ds.set_epoch(epoch);
    let cpu0 = CpuTimes::now();
    let t0 = Instant::now();
    let (mut samples, mut bytes, mut ttfb) = (0u64, 0u64, None);
    let mut digest = run.digest.then(insitubatch_native::BatchDigest::default);
    let mut it = session.pass(ds)?;
    while let Some(b) = it.next() {
        let b = b?;
        ttfb.get_or_insert_with(|| t0.elapsed().as_secs_f64());
        samples += b.len() as u64;
        bytes += b.arrays.values().map(|a| a.data.len() as u64).sum::<u64>();
        if let Some(d) = &mut digest {
            d.update(&b);
        }
        if run.step_ms > 0 {
            std::thread::sleep(std::time::Duration::from_millis(run.step_ms));
        }
        session.finished(&it, &b);
    }
    let secs = t0.elapsed().as_secs_f64().max(1e-9);
    let cpu = CpuTimes::now().zip(cpu0).map(|(now, before)| now.since(before));
    let last = ds.last_pass();
    let stage = last.as_ref().map_or_else(|| "unknown".to_string(), |s| s.limiting_stage.to_string());
    let mut row = json!({
        "epoch": epoch,
        "kind": if first { "cold" } else { "warm" },
        "seconds": secs,
        "samples": samples,
        "decoded_bytes": bytes,
        "mb_per_s": bytes as f64 / 1e6 / secs,
        "samples_per_s": samples as f64 / secs,
        "ttfb_s": ttfb.unwrap_or(0.0),
        // From the process's start of work (open included): meaningful for the first epoch only.
        "first_batch_since_start_s": first.then(|| (t0 - t_open).as_secs_f64() + ttfb.unwrap_or(0.0)),
        "limiting_stage": stage,
    });
    if let Some(cpu) = cpu {
        // This epoch's own CPU (every thread of the process), apart from open and the others.
        cpu.add_to(&mut row, "cpu_", bytes);
    }
    if let Some(p) = &last {
        row["storage_reads"] = json!(p.storage_reads);
        row["revived_chunks"] = json!(p.revived_chunks);
        row["reread_chunks"] = json!(p.reread_chunks);
        row["resident_peak_chunks"] = json!(p.depths.resident_peak_chunks);
        row["dropped_samples"] = json!(p.dropped_samples);
        row["pass"] = serde_json::to_value(p)?;
    }
    if let Some(d) = digest {
        row["digest"] = json!(d.finish());
    }
    if !run.as_json {
        outln!(
            "epoch {epoch} ({}): {samples} samples in {secs:.2}s, {:.1} MB/s, {:.0} samples/s, ttfb {:.3}s, limited by {}",
            row["kind"].as_str().unwrap_or(""),
            row["mb_per_s"].as_f64().unwrap_or(0.0),
            row["samples_per_s"].as_f64().unwrap_or(0.0),
            ttfb.unwrap_or(0.0),
            row["limiting_stage"].as_str().unwrap_or("")
        );
        if let Some(s) = ds.last_pass() {
            outln!("  {}", s.summary());
        }
    }
    Ok(row)
}
