//! The disk tier (`cache_dir`, `persist`, `readonly_cache`) across real processes: the
//! `insitubatch` binary is started as separate holders, writers and readers of one cache
//! directory, killed with SIGKILL, and checked against the source values and against runs
//! without a cache (epoch digests: sample order and every byte).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, OnceLock};

use insitubatch_native::core::internals::open_array;
use insitubatch_native::core::testing::{MemoryStorage, write_f32_array};
use insitubatch_native::core::{
    CommitRecord, Dataset, DatasetOptions, Knobs, Split, SplitOptions, Storage, Variable, split_by_chunk,
};
use insitubatch_native::{BatchDigest, CacheOptions, DatasetSpec, NativeRuntime, OpenOptions, demo, open};
use scratch::scratch_dir;
use serde_json::Value;

#[path = "common/scratch.rs"]
mod scratch;

const N_TIME: u64 = 48;

fn store() -> &'static Path {
    static STORE: OnceLock<PathBuf> = OnceLock::new();
    STORE.get_or_init(|| {
        let dir = scratch_dir("disk-tier").join("demo.zarr");
        demo::write_demo_store_sized(&dir, N_TIME).expect("write demo store")
    })
}

fn url() -> String {
    store().display().to_string()
}

fn cache_dir(name: &str) -> PathBuf {
    let d = scratch_dir("disk-tier").join(name);
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// `insitubatch bench <store> --json --digest` with extra arguments.
fn cli(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_insitubatch"));
    c.args(["bench", &url(), "--json", "--digest", "--threads", "2", "--batch-size", "5", "--block-chunks", "2"]);
    c.args(args);
    c.env("RUST_LOG", "warn");
    c
}

/// Run to the end: Ok(report) or Err(stderr).
fn run(args: &[&str]) -> Result<Value, String> {
    let out = cli(args).output().expect("start insitubatch");
    if out.status.success() {
        Ok(serde_json::from_slice(&out.stdout).expect("bench --json prints JSON"))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn digests(report: &Value) -> Vec<String> {
    report["epochs"].as_array().unwrap().iter().map(|e| e["digest"].as_str().unwrap().to_string()).collect()
}

fn per_epoch(report: &Value, key: &str) -> Vec<u64> {
    report["epochs"].as_array().unwrap().iter().map(|e| e[key].as_u64().unwrap()).collect()
}

/// A process that opened the dataset (and so holds the cache lock) and waits on stdin.
struct Holder {
    child: Child,
    pid: u32,
}

fn hold(args: &[&str]) -> Result<Holder, String> {
    let mut cmd = cli(args);
    cmd.arg("--hold").stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("start insitubatch");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    match line.strip_prefix("opened ") {
        Some(pid) => Ok(Holder { pid: pid.trim().parse().unwrap(), child }),
        None => {
            let out = child.wait_with_output().unwrap();
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}

impl Holder {
    /// Let it run its epochs and exit; its report.
    fn finish(mut self) -> Value {
        drop(self.child.stdin.take());
        let out = self.child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(text.lines().last().unwrap()).unwrap()
    }
}

fn persist_args(dir: &Path) -> Vec<String> {
    vec!["--cache-dir".into(), dir.display().to_string(), "--persist".into()]
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn a_persisted_cache_serves_a_fresh_process_with_zero_reads_and_identical_batches() {
    let dir = cache_dir("cross-run");
    let p = persist_args(&dir);
    let plain = run(&["--epochs", "2"]).unwrap();
    let warm = run(&[args(&p), vec!["--epochs", "2"]].concat()).unwrap();
    assert_eq!(digests(&warm), digests(&plain), "the cache changed the batches");
    assert!(per_epoch(&warm, "storage_reads")[0] > 0);
    let again = run(&[args(&p), vec!["--epochs", "2"]].concat()).unwrap();
    assert_eq!(digests(&again), digests(&plain));
    assert_eq!(per_epoch(&again, "storage_reads"), [0, 0], "a warm run fetched");
    assert!(per_epoch(&again, "revived_chunks")[0] > 0);
    assert_eq!(again["disk_tier"]["stored"], 0, "a warm run rewrote chunks");
}

#[test]
fn a_second_writer_and_a_reader_are_refused_while_a_writer_holds_the_directory() {
    let dir = cache_dir("second-writer");
    let p = persist_args(&dir);
    let holder = hold(&args(&p)).unwrap();
    // Another process (this one) as a writer: refused with the holder's pid and how to check it.
    let e = open(
        &url(),
        OpenOptions::from_spec(DatasetSpec {
            cache_dir: Some(dir.display().to_string()),
            persist: true,
            ..Default::default()
        }),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains(&format!("pid {}", holder.pid)), "{e}");
    assert!(e.contains("fuser -v") && e.contains("Do NOT delete the lockfile"), "{e}");
    assert!(e.ends_with(&dir.join(".insitu.lock").display().to_string()), "the path comes last: {e}");
    // The lock is keyed on cache_dir, not persist: a spill-only writer is refused too.
    let e = run(&["--cache-dir", &dir.display().to_string()]).unwrap_err();
    assert!(e.contains("one writer per cache_dir"), "{e}");
    let e = run(&["--cache-dir", &dir.display().to_string(), "--readonly-cache"]).unwrap_err();
    assert!(e.contains("read-only while a writer holds it"), "{e}");
    holder.finish();
    // Released on exit: now a reader gets in.
    run(&["--cache-dir", &dir.display().to_string(), "--readonly-cache", "--epochs", "1"]).unwrap();
}

#[test]
fn many_readers_coexist_and_exclude_a_writer() {
    let dir = cache_dir("readers");
    let p = persist_args(&dir);
    run(&[args(&p), vec!["--epochs", "1"]].concat()).unwrap();
    let ro = [
        "--cache-dir".to_string(),
        dir.display().to_string(),
        "--readonly-cache".into(),
        "--epochs".into(),
        "1".into(),
    ];
    let r1 = hold(&args(&ro)).unwrap();
    let r2 = hold(&args(&ro)).unwrap();
    let e = run(&args(&p)).unwrap_err();
    assert!(e.contains("read-only openers"), "{e}");
    let (a, b) = (r1.finish(), r2.finish());
    assert_eq!(digests(&a), digests(&b));
    assert_eq!(per_epoch(&a, "storage_reads"), [0]);
}

#[test]
fn a_sigkilled_holder_releases_its_lock_at_once() {
    let dir = cache_dir("sigkill-lock");
    let p = persist_args(&dir);
    let mut holder = hold(&args(&p)).unwrap();
    assert!(run(&args(&p)).is_err(), "held");
    holder.child.kill().unwrap(); // SIGKILL
    holder.child.wait().unwrap();
    // No wait, no cleanup: the kernel released it with the process.
    run(&[args(&p), vec!["--epochs", "1"]].concat()).unwrap();
}

/// A writer run with `--pause-after-chunks n`, stopped where it announces `paused after n
/// chunks`: exactly `n` chunks written and logged, and the process blocked. The point at
/// which a test kills it is explicit, so no sleep or polling decides what the kill hits.
fn paused_writer(args: &[&str], n: u64, stderr: &Path) -> Child {
    let n_arg = n.to_string();
    let mut child = cli(&[args, &["--pause-after-chunks", &n_arg]].concat())
        .stdout(Stdio::piped())
        // A file, not a pipe nobody reads: a chatty writer must never block on stderr.
        .stderr(std::fs::File::create(stderr).unwrap())
        .spawn()
        .expect("start insitubatch");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    if line.trim() != format!("paused after {n} chunks") {
        let status = child.wait().unwrap();
        panic!(
            "the writer did not pause after {n} chunks ({status}); stdout: {line:?}, stderr: {}",
            std::fs::read_to_string(stderr).unwrap_or_default()
        );
    }
    child
}

#[test]
fn kill_nine_mid_epoch_then_a_clean_run_reads_the_source_values() {
    use std::os::unix::process::ExitStatusExt;
    const BEFORE_KILL: u64 = 3;
    let total_chunks = N_TIME.div_ceil(8) + N_TIME.div_ceil(12);
    assert!(BEFORE_KILL < total_chunks, "the kill must land mid-epoch");
    let dir = cache_dir("kill-mid-epoch");
    let p = persist_args(&dir);
    let plain = run(&["--epochs", "1"]).unwrap();
    // A writer stopped after exactly BEFORE_KILL chunks of its first epoch, then SIGKILLed.
    let stderr = dir.with_extension("stderr");
    let mut child = paused_writer(&[args(&p), vec!["--epochs", "1"]].concat(), BEFORE_KILL, &stderr);
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(9), "the writer ended before the kill ({status})");
    let log = dir.join("insitu_cache.jsonl");
    let logged = std::fs::read_to_string(&log).unwrap().lines().count() - 1;
    assert_eq!(logged as u64, BEFORE_KILL, "the log does not hold exactly the chunks written before the kill");
    // A crash mid-append leaves a torn line, and a crash mid-write a temporary chunk file;
    // add both as the worst case.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .map(|mut f| {
            use std::io::Write;
            f.write_all(b"{\"array\":\"t2m\",\"chunk\":5,\"fi").unwrap();
        })
        .unwrap();
    let torn_tmp = dir.join("t2m__0000000000000000__5.npy.4242.insitu-tmp");
    std::fs::write(&torn_tmp, b"\x93NUMPY half a chunk").unwrap();
    let after = run(&[args(&p), vec!["--epochs", "1"]].concat()).unwrap();
    assert_eq!(digests(&after), digests(&plain), "data after a crash differs from a run without a cache");
    assert!(
        per_epoch(&after, "revived_chunks")[0] >= BEFORE_KILL,
        "the chunks written before the kill were not reused: {after}"
    );
    assert_eq!(
        after["disk_tier"]["stored"],
        total_chunks - BEFORE_KILL,
        "only the missing chunks are written: {after}"
    );
    assert!(!torn_tmp.exists(), "the temporary file a killed writer left was not swept");
    // And every value served from the (now complete) cache equals the source.
    let ds = open(
        &url(),
        OpenOptions::from_spec(DatasetSpec {
            fractions: (1.0, 0.0, 0.0),
            cache_dir: Some(dir.display().to_string()),
            readonly_cache: true,
            ..Default::default()
        }),
    )
    .unwrap();
    let (ny, nx) = (demo::DEMO_LAT, demo::DEMO_LON);
    let mut seen = 0;
    for b in ds.train().unwrap() {
        let b = b.unwrap();
        for (label, a) in &b.arrays {
            let v = a.as_slice::<f32>().unwrap();
            for (r, &t) in b.sample_indices.iter().enumerate() {
                for (i, (y, x)) in [(0, 0), (ny / 2, nx / 3), (ny - 1, nx - 1)].into_iter().enumerate() {
                    let got = v[r * (ny * nx) as usize + (y * nx + x) as usize];
                    assert_eq!(got.to_bits(), demo::demo_value(label, t, y, x).to_bits(), "{label} t={t} point {i}");
                }
            }
            seen += b.len();
        }
    }
    assert_eq!(seen as u64, 2 * N_TIME);
    assert_eq!(ds.last_pass().unwrap().storage_reads, 0);
}

/// The chunk files of `array` in `dir`, by chunk index.
fn chunk_files(dir: &Path, array: &str) -> Vec<PathBuf> {
    let mut files: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_string();
            let chunk =
                name.strip_prefix(&format!("{array}__"))?.strip_suffix(".npy")?.rsplit("__").next()?.parse().ok()?;
            Some((chunk, p))
        })
        .collect();
    files.sort();
    files.into_iter().map(|(_, p)| p).collect()
}

/// A cached chunk file altered on disk (a flipped byte, a truncation, another chunk's file
/// under its name, an NPY planted under its name with a record of its own bytes) is never
/// served: a read-only run refuses, naming the file; a persist run reads those chunks from
/// the store, with the batches of a run without a cache, and writes them again.
#[test]
fn altered_chunk_files_are_refused_or_read_from_the_store_never_served() {
    use std::io::Write;
    let dir = cache_dir("altered");
    let d = dir.display().to_string();
    let plain = run(&["--epochs", "1"]).unwrap();
    run(&["--cache-dir", &d, "--persist", "--epochs", "1"]).unwrap();
    let files = chunk_files(&dir, "t2m");
    assert!(files.len() >= 4, "{files:?}");
    let mut flipped = std::fs::read(&files[0]).unwrap();
    flipped[128 + 40] ^= 0x08;
    std::fs::OpenOptions::new().write(true).open(&files[0]).unwrap().write_all(&flipped).unwrap();
    let len = std::fs::metadata(&files[1]).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&files[1]).unwrap().set_len(len / 2).unwrap();
    std::fs::copy(&files[3], &files[2]).unwrap();
    let original = std::fs::read(&files[3]).unwrap();
    let (header, rest) = original.split_at(128);
    let data = vec![0x42u8; rest.len() - CommitRecord::LEN];
    let planted = [header, &data, CommitRecord::over(&[header, &data]).as_bytes()].concat();
    std::fs::write(&files[3], planted).unwrap();

    let e = run(&["--cache-dir", &d, "--readonly-cache", "--epochs", "1"]).unwrap_err();
    assert!(e.contains("so it is not served") && e.contains("persist=True"), "{e}");
    assert!(files.iter().take(4).any(|f| e.trim_end().ends_with(&f.display().to_string())), "the file last: {e}");
    let healed = run(&["--cache-dir", &d, "--persist", "--epochs", "1"]).unwrap();
    assert_eq!(digests(&healed), digests(&plain), "an altered file changed the batches");
    assert!(per_epoch(&healed, "storage_reads")[0] > 0, "the altered chunks were not read from the store");
    assert_eq!(healed["disk_tier"]["stored"], 4, "each altered chunk is written again: {healed}");
    let ro = run(&["--cache-dir", &d, "--readonly-cache", "--epochs", "1"]).unwrap();
    assert_eq!(digests(&ro), digests(&plain));
    assert_eq!(per_epoch(&ro, "storage_reads"), [0]);
}

/// A cache folder writable by every user is refused, with what to do and the folder last.
#[test]
fn a_cache_folder_writable_by_every_user_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = cache_dir("world-writable");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = run(&["--cache-dir", &dir.display().to_string(), "--persist", "--epochs", "1"]).unwrap_err();
    assert!(e.contains("writable by every user") && e.contains("chmod 700"), "{e}");
    assert!(e.trim_end().ends_with(&dir.display().to_string()), "the folder last: {e}");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "nothing was written there");
}

#[test]
fn a_mapping_keeps_its_bytes_while_a_writer_readmits_the_same_chunk() {
    let dir = cache_dir("remap");
    let p = persist_args(&dir);
    run(&[args(&p), vec!["--epochs", "1"]].concat()).unwrap();
    let name = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("t2m__") && n.ends_with("__0.npy"))
        .unwrap();
    let path = dir.join(&name);
    let before = std::fs::read(&path).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    // What a reader holds: a mapping of the chunk file.
    // SAFETY: the test is checking exactly that writers never modify a mapped chunk file in
    // place (they write a new file and rename it over), so this mapping stays valid.
    let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
    use std::os::unix::fs::MetadataExt;
    let inode = std::fs::metadata(&path).unwrap().ino();
    // Another pipeline writes other names (the fingerprint is part of every name): untouched.
    std::fs::write(dir.join("insitu_cache.jsonl"), "").unwrap();
    run(&[args(&p), vec!["--epochs", "1", "--scale", "280,10"]].concat()).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode);
    // Lose the log (as if never written): the next writer of the same pipeline finds every
    // chunk by its name and revives it, rewriting nothing (a replaced file would be renamed
    // over, never written in place: cache::tests::a_replaced_file_does_not_change_...).
    std::fs::write(dir.join("insitu_cache.jsonl"), "").unwrap();
    let again = run(&[args(&p), vec!["--epochs", "1"]].concat()).unwrap();
    assert_eq!(per_epoch(&again, "storage_reads"), [0], "a chunk on disk was fetched again: {again}");
    assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode, "the chunk file was replaced");
    assert_eq!(&map[..], &before[..], "a held mapping changed under its reader");
    assert_eq!(std::fs::read(&path).unwrap(), before, "same name, same pipeline, same bytes");
}

#[test]
fn a_changed_transform_is_refused_as_stale_then_reset() {
    let dir = cache_dir("stale");
    let p = persist_args(&dir);
    run(&[args(&p), vec!["--epochs", "1", "--scale", "280,10"]].concat()).unwrap();
    let e = run(&[args(&p), vec!["--scale", "280,20"]].concat()).unwrap_err();
    assert!(e.contains("stale") && e.contains("\"t2m\"") && e.contains("reset_stale_cache"), "{e}");
    let plain = run(&["--epochs", "1", "--scale", "280,20"]).unwrap();
    let reset = run(&[args(&p), vec!["--epochs", "1", "--scale", "280,20", "--reset-stale-cache"]].concat()).unwrap();
    assert_eq!(digests(&reset), digests(&plain));
    assert!(per_epoch(&reset, "storage_reads")[0] > 0, "a reset array is read cold");
    let ro =
        run(&["--cache-dir", &dir.display().to_string(), "--readonly-cache", "--epochs", "1", "--scale", "280,20"])
            .unwrap();
    assert_eq!(digests(&ro), digests(&plain));
}

#[test]
fn a_readonly_run_over_a_warm_cache_reads_nothing_and_a_miss_names_the_chunk() {
    let dir = cache_dir("readonly");
    let d = dir.display().to_string();
    let plain = run(&["--epochs", "2"]).unwrap();
    run(&["--cache-dir", &d, "--persist", "--epochs", "1"]).unwrap();
    let ro = run(&["--cache-dir", &d, "--readonly-cache", "--epochs", "2"]).unwrap();
    assert_eq!(digests(&ro), digests(&plain));
    assert_eq!(per_epoch(&ro, "storage_reads"), [0, 0]);
    // A cache warmed for t2m alone is incomplete for a run reading u10 too.
    let only_t2m = cache_dir("readonly-subset");
    let s = only_t2m.display().to_string();
    run(&["--cache-dir", &s, "--persist", "--epochs", "1", "--var", "t2m"]).unwrap();
    let e = run(&["--cache-dir", &s, "--readonly-cache", "--var", "t2m", "--var", "u10"]).unwrap_err();
    assert!(e.contains("of array \"u10\" is not in the cache") && e.contains("readonly_cache=True"), "{e}");
    let e = run(&["--cache-dir", &s, "--readonly-cache", "--reset-stale-cache"]).unwrap_err();
    assert!(e.contains("contradict"), "{e}");
}

/// Windows under shuffle read a chunk from several blocks. With a persisting tier the
/// automatic budget is the two-block floor, a block's chunks go as it drains, and a later
/// block revives them from disk: each stored chunk is still fetched once, and the batches
/// are those of a run that held the whole split.
#[test]
fn windowed_shuffle_with_persist_releases_per_block_and_revives_from_disk() {
    let rt = NativeRuntime::new(Some(2)).unwrap();
    let storage = MemoryStorage::new();
    write_f32_array(&storage, "t2m", &[192, 4, 4], &[4, 4, 4], None, None, |i| i as f32);
    let counts = storage.clone();
    let storage: Arc<dyn Storage> = Arc::new(storage);
    let array = rt.block_on(open_array(storage.as_ref(), "t2m")).unwrap();
    let geometry = array.geometry(0).unwrap();
    let manifest =
        split_by_chunk(&geometry, &SplitOptions { fractions: (1.0, 0.0, 0.0), ..Default::default() }).unwrap();
    let build = |tier: Option<CacheOptions>| {
        let vars = vec![
            Variable { label: "x".into(), geometry: geometry.clone() },
            Variable { label: "y".into(), geometry: geometry.shift(6) },
        ];
        Dataset::builder(Arc::clone(&storage), rt.runtime.clone())
            .opened(vec![array.clone()])
            .variables(vars)
            .manifest(manifest.clone())
            .options(DatasetOptions {
                knobs: Knobs { batch_size: 4, block_chunks: 2, max_inflight: 4, ..Default::default() },
                tier: tier.map(|t| Arc::new(t) as _),
                ..Default::default()
            })
            .build()
            .unwrap()
    };
    let epoch = |ds: &Dataset| {
        let mut d = BatchDigest::default();
        let mut stream = ds.iter(Split::Train).unwrap();
        while let Some(b) = futures::executor::block_on(stream.next_batch()) {
            d.update(&b.unwrap());
        }
        drop(stream);
        (d.finish(), ds.last_pass().unwrap())
    };
    let held = build(None);
    let (want, _) = epoch(&held);
    let dir = cache_dir("windowed");
    let spilled = build(Some(CacheOptions { dir, persist: true, ..Default::default() }));
    let (held_mem, spill_mem) = (held.describe(1).unwrap().memory, spilled.describe(1).unwrap().memory);
    assert!(
        spill_mem.read_once_bytes < held_mem.read_once_bytes / 2,
        "persist did not lower the automatic budget: {} vs {}",
        spill_mem.read_once_bytes,
        held_mem.read_once_bytes
    );
    drop(held);
    let before = counts.total_reads();
    let (got, stats) = epoch(&spilled);
    assert_eq!(got, want, "batches differ from the run that held the split");
    assert!(stats.reread_chunks > 0 && stats.revived_chunks > 0, "{}", stats.summary());
    assert_eq!(counts.total_reads() - before, 48, "every stored chunk fetched exactly once: {}", stats.summary());
    assert!(stats.summary().contains("revived from disk"), "{}", stats.summary());
}
