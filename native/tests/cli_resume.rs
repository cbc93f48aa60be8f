//! The CLI's exact mid-epoch resume across real processes: `bench` and `demo` stopped by
//! SIGTERM or SIGINT at a known point (`--pause-after-batches`, a hidden flag that prints a
//! line and waits: the test acts on that line, never on a sleep) write the checkpoint of the
//! pass in progress (`--checkpoint FILE`) and exit non-zero; `--resume FILE` then yields exactly
//! the rest of that pass, so the two runs together print the samples of one uninterrupted
//! epoch, each once and in order (`--print-sample-indices`, hidden).
#![cfg(target_os = "linux")]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use insitubatch_native::{Checkpoint, demo};
use scratch::scratch_dir;

#[path = "common/scratch.rs"]
mod scratch;

const N_TIME: u64 = 48;

fn dir() -> PathBuf {
    scratch_dir("cli-resume")
}

fn url() -> String {
    static STORE: OnceLock<PathBuf> = OnceLock::new();
    let store =
        STORE.get_or_init(|| demo::write_demo_store_sized(&dir().join("demo.zarr"), N_TIME).expect("write demo store"));
    store.display().to_string()
}

/// `insitubatch COMMAND <store> ...` with the options every run here shares.
fn cli(command: &str, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_insitubatch"));
    c.arg(command);
    let url = url();
    if command == "demo" {
        c.args(["--url", &url]);
    } else {
        c.args([url.as_str(), "--epochs", "1"]);
    }
    c.args(["--threads", "2", "--batch-size", "5", "--block-chunks", "2", "--seed", "3", "--print-sample-indices"]);
    c.args(args);
    c.env("RUST_LOG", "warn");
    c
}

/// One batch as `--print-sample-indices` prints it: (epoch, batch index, sample indices).
type Printed = (u64, u64, Vec<u64>);

fn parse_line(line: &str) -> Option<Printed> {
    let rest = line.strip_prefix("samples ")?;
    let mut parts = rest.split(' ');
    let epoch = parts.next()?.parse().ok()?;
    let index = parts.next()?.parse().ok()?;
    let samples = parts.next()?.split(',').map(|s| s.parse().unwrap()).collect();
    Some((epoch, index, samples))
}

fn printed(stdout: &str) -> Vec<Printed> {
    stdout.lines().filter_map(parse_line).collect()
}

/// Run to the end; its printed batches.
fn run(command: &str, args: &[&str]) -> Vec<Printed> {
    let out = cli(command, args).output().expect("start insitubatch");
    assert!(out.status.success(), "{command} {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    printed(&String::from_utf8_lossy(&out.stdout))
}

/// Run with `--pause-after-batches n --checkpoint FILE`, send `signal` once it says it paused;
/// (the batches it printed, its exit code, its stderr).
fn interrupted(command: &str, args: &[&str], n: u64, checkpoint: &Path, signal: i32) -> (Vec<Printed>, i32, String) {
    let stderr = checkpoint.with_extension("stderr");
    let n_arg = n.to_string();
    let file = checkpoint.to_str().unwrap();
    let mut child = cli(command, &[args, &["--pause-after-batches", &n_arg, "--checkpoint", file]].concat())
        .stdout(Stdio::piped())
        // A file, not a pipe nobody reads: the process must never block on stderr.
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .expect("start insitubatch");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut batches = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        if out.read_line(&mut line).unwrap() == 0 {
            let status = child.wait().unwrap();
            panic!(
                "{command} ended ({status}) before pausing after {n} batches: {}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        }
        if line.trim() == format!("paused after {n} batches") {
            break;
        }
        batches.extend(parse_line(line.trim_end()));
    }
    // SAFETY: kill(2) on the pid of a child this test started and has not yet waited for.
    let sent = unsafe { libc::kill(i32::try_from(child.id()).unwrap(), signal) };
    assert_eq!(sent, 0, "kill failed");
    // Nothing more is printed after the pause: the rest of stdout is empty.
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert_eq!(printed(&rest), vec![], "no batch after the pause");
    let status = child.wait().unwrap();
    let code = status.code().unwrap_or_else(|| panic!("{command} was killed by the signal instead of handling it"));
    (batches, code, std::fs::read_to_string(&stderr).unwrap())
}

fn read_checkpoint(path: &Path) -> Checkpoint {
    Checkpoint::from_json(&std::fs::read_to_string(path).expect("the checkpoint file was written")).unwrap()
}

/// The interrupted and resumed runs together are the uninterrupted pass: the same batches, in
/// order, each sample once.
fn assert_one_pass(head: &[Printed], tail: &[Printed], whole: &[Printed]) {
    let joined: Vec<Printed> = head.iter().chain(tail).cloned().collect();
    assert_eq!(joined, whole, "the interrupted and resumed runs differ from the uninterrupted one");
    let samples: Vec<u64> = joined.iter().flat_map(|(_, _, s)| s.iter().copied()).collect();
    let unique: std::collections::HashSet<u64> = samples.iter().copied().collect();
    assert_eq!(unique.len(), samples.len(), "a sample twice");
}

#[test]
fn bench_sigterm_writes_the_checkpoint_and_resume_continues_the_pass_exactly() {
    const TAKEN: u64 = 3;
    let whole = run("bench", &["--epoch", "2"]);
    assert!(whole.len() as u64 > TAKEN + 1, "the pass must go on after the pause: {} batches", whole.len());
    assert!(whole.iter().all(|(e, _, _)| *e == 2));
    let file = dir().join("bench.ckpt.json");
    let (head, code, stderr) = interrupted("bench", &["--epoch", "2"], TAKEN, &file, libc::SIGTERM);
    assert_eq!(code, 143, "128 + SIGTERM; stderr: {stderr}");
    let p = file.display().to_string();
    assert!(stderr.contains("SIGTERM: wrote the checkpoint of epoch 2 of the train view (3 batches done)"), "{stderr}");
    assert!(stderr.contains(&format!("to {p}; continue with --resume {p}")), "{stderr}");
    assert_eq!(head.len() as u64, TAKEN);
    let c = read_checkpoint(&file);
    assert_eq!((c.epoch, c.batches, c.position, c.seed, c.batch_size), (2, TAKEN, TAKEN * 5, 3, 5));
    // No --epoch: the run starts at the checkpoint's.
    let tail = run("bench", &["--resume", file.to_str().unwrap()]);
    assert_one_pass(&head, &tail, &whole);
    // --json reports where the run resumed from.
    let out = cli("bench", &["--resume", file.to_str().unwrap(), "--json"]).output().unwrap();
    let report: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(report["config"]["resume"]["position"], TAKEN * 5);
    assert_eq!(report["epochs"][0]["pass"]["resumed_at"], TAKEN * 5);
}

#[test]
fn demo_sigint_writes_the_checkpoint_and_resume_continues_the_pass_exactly() {
    const TAKEN: u64 = 2;
    let whole = run("demo", &[]);
    assert!(whole.len() as u64 > TAKEN + 1, "{} batches", whole.len());
    let file = dir().join("demo.ckpt.json");
    let (head, code, stderr) = interrupted("demo", &[], TAKEN, &file, libc::SIGINT);
    assert_eq!(code, 130, "128 + SIGINT; stderr: {stderr}");
    assert!(stderr.contains("SIGINT: wrote the checkpoint of epoch 0 of the train view (2 batches done)"), "{stderr}");
    assert_eq!(read_checkpoint(&file).batches, TAKEN);
    let tail = run("demo", &["--resume", file.to_str().unwrap()]);
    assert_one_pass(&head, &tail, &whole);
}

#[test]
fn a_checkpoint_that_does_not_fit_is_refused_saying_why() {
    let file = dir().join("other-seed.ckpt.json");
    std::fs::create_dir_all(dir()).unwrap();
    let c = Checkpoint {
        version: 1,
        seed: 99,
        epoch: 0,
        split: insitubatch_native::core::Split::Train,
        batch_size: 5,
        world_size: 1,
        position: 5,
        batches: 1,
        history: vec![],
        node_ranks: None,
        rows_per_sample: None,
        draws: None,
    };
    std::fs::write(&file, c.to_json()).unwrap();
    let out = cli("bench", &["--resume", file.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("the checkpoint was taken with seed 99 but this pass has seed 3"), "{err}");
    std::fs::write(&file, "{\"position\": 1}").unwrap();
    let out = cli("bench", &["--resume", file.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("--resume {}", file.display())) && err.contains("malformed checkpoint JSON"),
        "{err}"
    );
    // The checkpoint decides the epoch: giving one too is refused by the parser.
    let out = cli("bench", &["--resume", file.to_str().unwrap(), "--epoch", "1"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `--print-sample-indices` prints a patched batch's origins too: one `[lat,lon]` per row.
fn printed_patches(stdout: &str) -> Vec<Vec<String>> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("patches "))
        .map(|rest| rest.split(' ').nth(2).unwrap().split(';').map(str::to_string).collect())
        .collect()
}

#[test]
fn patches_from_the_cli_cover_every_grid_patch_once_and_resume_exactly() {
    let patch = ["--patch", "lat=45,lon=90"];
    let out = cli("bench", &[&patch[..], &["--epoch", "1"]].concat()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (whole, origins) = (printed(&stdout), printed_patches(&stdout));
    // The demo field is 91 x 180: a 2 x 2 grid of patches per sample (the last row is not drawn).
    let rows: Vec<(u64, String)> =
        whole.iter().zip(&origins).flat_map(|((_, _, s), o)| s.iter().copied().zip(o.iter().cloned())).collect();
    let unique: std::collections::BTreeSet<&(u64, String)> = rows.iter().collect();
    assert_eq!(unique.len(), rows.len(), "a (sample, patch) twice");
    let samples: std::collections::BTreeSet<u64> = rows.iter().map(|r| r.0).collect();
    assert_eq!(rows.len(), samples.len() * 4);
    for o in ["[0,0]", "[0,90]", "[45,0]", "[45,90]"] {
        assert!(rows.iter().any(|r| r.1 == o), "origin {o} never drawn");
    }

    let file = dir().join("patches.ckpt.json");
    let (head, code, _) = interrupted("bench", &[&patch[..], &["--epoch", "1"]].concat(), 2, &file, libc::SIGTERM);
    assert_eq!(code, 143);
    assert_eq!(read_checkpoint(&file).rows_per_sample, Some(4));
    let tail = run("bench", &[&patch[..], &["--resume", file.to_str().unwrap()]].concat());
    let joined: Vec<Printed> = head.iter().chain(&tail).cloned().collect();
    assert_eq!(joined, whole, "the interrupted and resumed runs differ from the uninterrupted one");
    let out = cli("bench", &["--resume", file.to_str().unwrap()]).output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("4 rows per sample"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn sample_mask_and_weights_files_select_and_repeat_samples() {
    let mask = dir().join("mask.txt");
    let keep = |t: u64| !t.is_multiple_of(3);
    std::fs::write(&mask, (0..N_TIME).map(|t| if keep(t) { "1\n" } else { "0\n" }).collect::<String>()).unwrap();
    let drawn: Vec<u64> =
        run("bench", &["--sample-mask", mask.to_str().unwrap()]).into_iter().flat_map(|(_, _, s)| s).collect();
    let mut sorted = drawn.clone();
    sorted.sort_unstable();
    let want: Vec<u64> = (0..N_TIME).filter(|&t| keep(t) && drawn.contains(&t)).collect();
    assert!(!drawn.is_empty() && drawn.iter().all(|&t| keep(t)), "a masked sample drawn: {drawn:?}");
    assert_eq!(sorted, want, "each kept sample at most once");

    let weights = dir().join("weights.txt");
    std::fs::write(&weights, (0..N_TIME).map(|t| if t < 8 { "2," } else { "1," }).collect::<String>()).unwrap();
    let drawn: Vec<u64> = run("bench", &["--sample-weights", weights.to_str().unwrap(), "--fractions", "1,0,0"])
        .into_iter()
        .flat_map(|(_, _, s)| s)
        .collect();
    for t in 0..N_TIME {
        let n = drawn.iter().filter(|&&d| d == t).count();
        assert_eq!(n, if t < 8 { 2 } else { 1 }, "sample {t}");
    }
    std::fs::write(&weights, "1 x").unwrap();
    let out = cli("bench", &["--sample-weights", weights.to_str().unwrap()]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("entry 1 (\"x\") is not a number"));
}
