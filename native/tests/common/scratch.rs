//! Folders for the fixtures a test binary's tests share. Included by path (`#[path]`) by the
//! integration tests of this crate and of tests/, so there is one copy: std only.

use std::path::{Path, PathBuf};

/// A folder of this test process's own for `kind` under the system temp dir,
/// `insitubatch-<kind>-<pid>` (not created). The tests keep the fixtures they share there,
/// in a `static`, which is never dropped: first the folders of that kind left by processes
/// that are gone are removed, or every run left its own behind (about 200 MB per CI run,
/// 2026-12-06). The pid keeps apart the processes of one test binary that run at once (two
/// checkouts sharing a target dir, nextest). Which processes are gone is read from `/proc`,
/// so on other systems the old folders stay.
pub fn scratch_dir(kind: &str) -> PathBuf {
    let tmp = std::env::temp_dir();
    let prefix = format!("insitubatch-{kind}-");
    if cfg!(target_os = "linux") {
        for entry in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
            let name = entry.file_name();
            let pid = name.to_str().and_then(|n| n.strip_prefix(&prefix)).and_then(|p| p.parse::<u32>().ok());
            if let Some(pid) = pid
                && !Path::new("/proc").join(pid.to_string()).exists()
            {
                // Another process may be removing it too: either may find it gone.
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    tmp.join(format!("{prefix}{}", std::process::id()))
}
