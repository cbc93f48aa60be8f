//! The `insitubatch` CLI: `demo`, `describe`, `bench` (the commands are in `cli/`).

#[cfg(all(feature = "jemalloc", target_os = "linux", not(target_env = "musl")))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Keep freed pages (no decay) in one arena: decoded chunks and batches are large and move
/// between threads (read on tokio, decoded and gathered on rayon, dropped by the caller), so
/// this makes every steady-state allocation reuse already-faulted memory. Peak memory is
/// still bounded by the pool budget; it is just not handed back to the OS between epochs.
/// Huge pages are left to the system (`thp:default`): asking for them (`thp:always`) made
/// the cold epoch's system time bimodal (0.1 s to 5 s on the same run, see
/// docs/lab/benchmarks.md "Where the cold spread came from"): a 2 MiB fault costs little when
/// the memory behind it is already backed, and seconds per GiB when a VM's free page
/// reporting has handed it back to the host or the kernel must reclaim page cache for it.
#[cfg(all(feature = "jemalloc", target_os = "linux", not(target_env = "musl")))]
#[allow(non_upper_case_globals, reason = "jemalloc reads this exact symbol name")]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static _rjem_malloc_conf: &[u8] = b"dirty_decay_ms:-1,muzzy_decay_ms:-1,narenas:1,thp:default\0";

mod cli;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, report_error, run};

fn main() -> ExitCode {
    std::panic::set_hook(Box::new(|info| {
        let _ = writeln!(std::io::stderr(), "error: internal error: {info}");
    }));
    let cli = Cli::parse();
    let default = if cli.verbose { "info" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => report_error(&e),
    }
}
