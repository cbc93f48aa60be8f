//! A machine's ranks sharing one `cache_dir` (`shared_cache`) and node affinity, across real
//! processes reading a loopback object store that counts what it serves.
//!
//! The processes are this test binary started again as workers ([`worker`], run with
//! `--ignored`): each opens the dataset, says so, and runs one epoch each time the test
//! tells it to. The test decides what runs at once and where each epoch ends, so nothing
//! here depends on timing; the counts are the engine's choices.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use insitubatch_native::core::{Batch, HedgeSpec};
use insitubatch_native::{CacheOptions, DatasetSpec, OpenOptions, ReadPolicySpec, demo, open};
use insitubatch_tests::{CloudStore, digest};
use scratch::scratch_dir;
use serde_json::{Value, json};

// The native crate's tests' helper, one copy (std only).
#[path = "../../native/tests/common/scratch.rs"]
mod scratch;

const BIN: &str = env!("CARGO_BIN_EXE_cloud-store");
/// Samples: the demo store's t2m is chunked by 8 and u10 by 12, so a rank unit is 24
/// samples and 96 make 4 units: one per rank, none dropped, every chunk drawn each epoch.
const N_TIME: u64 = 96;
const WORLD: usize = 4;
/// Sample-axis chunks of the two arrays (each one chunk file in the cache).
const CHUNKS: u64 = N_TIME / 8 + N_TIME / 12;
const WORKER_ENV: &str = "INSITUBATCH_SHARED_CACHE_WORKER";

/// What a worker opens.
fn options(rank: usize, node_ranks: Option<usize>, cache: Option<CacheOptions>, endpoint: &str) -> OpenOptions {
    let cache = cache.unwrap_or_default();
    OpenOptions::from_spec(DatasetSpec {
        fractions: (1.0, 0.0, 0.0),
        batch_size: 6,
        block_chunks: 2,
        seed: 11,
        rank,
        world_size: WORLD,
        node_ranks,
        // One request per chunk: a hedge would count twice at the store.
        read_policy: ReadPolicySpec { hedge: HedgeSpec::Flag(false), ..ReadPolicySpec::default() },
        // A loopback endpoint and no signing: no client ever looks for cloud credentials.
        storage_options: [
            ("aws_endpoint".into(), endpoint.into()),
            ("aws_allow_http".into(), "true".into()),
            ("aws_skip_signature".into(), "true".into()),
            ("aws_region".into(), "us-east-1".into()),
        ]
        .into(),
        cache_dir: (!cache.dir.as_os_str().is_empty()).then(|| cache.dir.display().to_string()),
        persist: cache.persist,
        readonly_cache: cache.readonly,
        shared_cache: cache.shared,
        ..DatasetSpec::default()
    })
}

fn shared(dir: &Path) -> CacheOptions {
    CacheOptions { dir: dir.to_path_buf(), persist: true, shared: true, ..CacheOptions::default() }
}

/// The demo store under `<root>/bucket/demo.zarr`, served by its own counting store.
struct Fixture {
    root: PathBuf,
    store: CloudStore,
}

impl Fixture {
    fn new(name: &str) -> Self {
        let root = scratch_dir("shared-cache").join(name);
        let _ = std::fs::remove_dir_all(&root);
        demo::write_demo_store_sized(&root.join("bucket").join("demo.zarr"), N_TIME).expect("write the demo store");
        let store = CloudStore::start(BIN, &root, &[]);
        Self { root, store }
    }

    fn cache_dir(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// Objects the store holds for chunk data (u10's chunks are tiled on the inner axes).
    fn chunk_objects(&self) -> u64 {
        fn count(dir: &Path) -> u64 {
            std::fs::read_dir(dir).map_or(0, |entries| {
                entries.flatten().map(|e| if e.path().is_dir() { count(&e.path()) } else { 1 }).sum()
            })
        }
        let store = self.root.join("bucket").join("demo.zarr");
        count(&store.join("t2m").join("c")) + count(&store.join("u10").join("c"))
    }

    /// Each rank's batches of `epoch` read without any cache: what the workers must match.
    fn expected(&self, node_ranks: Option<usize>, epoch: u64) -> Vec<String> {
        (0..WORLD)
            .map(|rank| {
                let ds = open("s3://bucket/demo.zarr", options(rank, node_ranks, None, &self.store.base)).unwrap();
                ds.set_epoch(epoch);
                let batches: Vec<Batch> = ds.train().unwrap().collect::<Result<_, _>>().unwrap();
                digest(&batches)
            })
            .collect()
    }

    /// GETs of each chunk file since the last reset (metadata left out).
    fn chunk_gets(&self) -> Vec<(String, u64)> {
        let stats = self.store.stats();
        let mut gets: Vec<(String, u64)> = stats["paths"]
            .as_object()
            .expect("paths")
            .iter()
            .filter(|(p, _)| p.contains("/c/"))
            .map(|(p, c)| (p.clone(), c["requests"].as_u64().unwrap_or(0)))
            .collect();
        gets.sort();
        gets
    }
}

/// One worker process, driven line by line.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Worker {
    /// Start a worker of `rank`; it opens the dataset (taking the cache lock) on its own.
    fn start(fx: &Fixture, rank: usize, node_ranks: Option<usize>, cache_dir: &Path) -> Self {
        let config = json!({
            "endpoint": fx.store.base, "rank": rank, "node_ranks": node_ranks, "cache_dir": cache_dir,
        });
        let mut child = Command::new(std::env::current_exe().expect("this test binary"))
            .args(["worker", "--exact", "--ignored", "--nocapture", "--test-threads", "1"])
            .env(WORKER_ENV, config.to_string())
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start a worker");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        Self { child, stdin, stdout }
    }

    /// The next line the worker prints for the test (libtest's own output is skipped).
    fn line(&mut self) -> Value {
        loop {
            let mut line = String::new();
            let n = self.stdout.read_line(&mut line).expect("read a worker's line");
            assert!(n > 0, "a worker exited: {:?}", self.child.wait());
            // libtest's `test worker ... ` may start the same line.
            if let Some(at) = line.find("worker: ") {
                return serde_json::from_str(&line[at + "worker: ".len()..]).expect("a worker's JSON line");
            }
        }
    }

    fn send(&mut self, command: &str) {
        writeln!(self.stdin, "{command}").expect("write to a worker");
    }

    /// Close its stdin and wait for it to exit (releasing the cache lock), reading what it
    /// still prints (libtest's summary) so it never writes into a closed pipe.
    fn finish(self) {
        let Self { mut child, stdin, mut stdout } = self;
        drop(stdin);
        std::io::copy(&mut stdout, &mut std::io::sink()).expect("read a worker's last lines");
        let status = child.wait().expect("wait for a worker");
        assert!(status.success(), "a worker failed: {status}");
    }
}

/// Every worker opened (at once: each was started before any was waited for).
fn open_all(workers: &mut [Worker]) {
    for w in workers.iter_mut() {
        let said = w.line();
        assert_eq!(said["opened"], true, "{said}");
    }
}

/// Run `epoch` on every worker at once; their reports in rank order.
fn epoch_all(workers: &mut [Worker], epoch: u64) -> Vec<Value> {
    for w in workers.iter_mut() {
        w.send(&format!("epoch {epoch}"));
    }
    workers.iter_mut().map(Worker::line).collect()
}

fn digests(reports: &[Value]) -> Vec<String> {
    reports.iter().map(|r| r["digest"].as_str().expect("a digest").to_string()).collect()
}

/// The cache log's entries, as (array, chunk).
fn logged(dir: &Path) -> Vec<(String, u64)> {
    let text = std::fs::read_to_string(dir.join("insitu_cache.jsonl")).expect("the cache log");
    let mut entries: Vec<(String, u64)> = text
        .lines()
        .skip(1)
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("a log line");
            (v["array"].as_str().unwrap().to_string(), v["chunk"].as_u64().unwrap())
        })
        .collect();
    entries.sort();
    entries
}

#[test]
fn four_processes_fill_one_cache_dir_each_chunk_fetched_and_written_once() {
    let fx = Fixture::new("one-dir");
    let dir = fx.cache_dir("cache");
    let expected = [fx.expected(None, 0), fx.expected(None, 1)];
    fx.store.reset();
    let mut workers: Vec<Worker> = (0..WORLD).map(|r| Worker::start(&fx, r, None, &dir)).collect();
    open_all(&mut workers);
    let first = epoch_all(&mut workers, 0);
    assert_eq!(digests(&first), expected[0], "the batches differ from a run without a cache");
    let gets = fx.chunk_gets();
    assert_eq!(gets.len() as u64, fx.chunk_objects(), "every chunk object is read: {gets:?}");
    assert!(gets.iter().all(|(_, n)| *n == 1), "a chunk was fetched twice: {gets:?}");
    let log = logged(&dir);
    let mut unique = log.clone();
    unique.dedup();
    assert_eq!((log.len() as u64, unique.len()), (CHUNKS, log.len()), "each chunk written once: {log:?}");
    // Epoch 1 deals the chunks to other ranks, which find them in the shared directory.
    fx.store.reset();
    let second = epoch_all(&mut workers, 1);
    assert_eq!(digests(&second), expected[1]);
    assert_eq!(fx.chunk_gets(), vec![], "epoch 1 read chunks from the store");
    // What a rank did not still hold in memory came from the files the others wrote.
    let revived: u64 = second.iter().map(|r| r["revived_chunks"].as_u64().unwrap()).sum();
    assert!(revived > 0, "{second:?}");
    workers.into_iter().for_each(Worker::finish);
}

#[test]
fn with_node_affinity_each_nodes_second_epoch_reads_nothing_from_the_store() {
    let fx = Fixture::new("nodes");
    // Two nodes of two ranks, each node with its own cache_dir.
    let run = |node_ranks: Option<usize>, tag: &str| {
        let dirs = [fx.cache_dir(&format!("{tag}-node0")), fx.cache_dir(&format!("{tag}-node1"))];
        let mut workers: Vec<Worker> = (0..WORLD).map(|r| Worker::start(&fx, r, node_ranks, &dirs[r / 2])).collect();
        open_all(&mut workers);
        fx.store.reset();
        let first = epoch_all(&mut workers, 0);
        let first_gets: u64 = fx.chunk_gets().iter().map(|(_, n)| n).sum();
        fx.store.reset();
        let second = epoch_all(&mut workers, 1);
        let second_gets: u64 = fx.chunk_gets().iter().map(|(_, n)| n).sum();
        workers.into_iter().for_each(Worker::finish);
        (digests(&first), digests(&second), first_gets, second_gets)
    };
    let (first, second, first_gets, second_gets) = run(Some(2), "affinity");
    assert_eq!(first, fx.expected(Some(2), 0));
    assert_eq!(second, fx.expected(Some(2), 1));
    assert_eq!((first_gets, second_gets), (fx.chunk_objects(), 0), "epoch 2 of a node reads only its own cache");
    // Without affinity the same layout goes back to the store for what the other node cached.
    let (_, _, first_gets, second_gets) = run(None, "plain");
    assert_eq!(first_gets, fx.chunk_objects());
    assert!(second_gets > 0, "seed 11 deals epoch 1's units to the other node; the control shows nothing otherwise");
}

#[test]
fn a_filler_killed_mid_epoch_costs_no_correctness() {
    use std::os::unix::process::ExitStatusExt;
    let fx = Fixture::new("kill");
    let dir = fx.cache_dir("cache");
    let expected = fx.expected(None, 0);
    let mut workers: Vec<Worker> = (0..WORLD).map(|r| Worker::start(&fx, r, None, &dir)).collect();
    open_all(&mut workers);
    // Rank 3 stops after its first batch, mid-epoch, and is killed there.
    workers[3].send("epoch 0 stop-after 1");
    assert_eq!(workers[3].line()["paused"], true);
    let mut killed = workers.pop().expect("rank 3");
    killed.child.kill().expect("SIGKILL");
    assert_eq!(killed.child.wait().unwrap().signal(), Some(9));
    // The worst a kill leaves: a half-written temporary chunk file and a torn log line.
    let torn_tmp = dir.join("t2m__0000000000000000__5.npy.4242-0.insitu-tmp");
    std::fs::write(&torn_tmp, b"\x93NUMPY half a chunk").unwrap();
    std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("insitu_cache.jsonl"))
        .and_then(|mut f| f.write_all(b"{\"array\":\"t2m\",\"chunk\":5,\"fi"))
        .unwrap();
    // The others finish, a new rank 3 joins while they hold the directory, and every rank's
    // batches are what a run without a cache serves.
    let mut reports = epoch_all(&mut workers, 0);
    workers.push(Worker::start(&fx, 3, None, &dir));
    open_all(&mut workers[3..]);
    workers[3].send("epoch 0");
    reports.push(workers[3].line());
    assert_eq!(digests(&reports), expected);
    assert_eq!(digests(&epoch_all(&mut workers, 1)), fx.expected(None, 1));
    workers.into_iter().for_each(Worker::finish);
    // Alone again, an opener sweeps the temporary file and every chunk file reads as the source.
    let ds = open("s3://bucket/demo.zarr", options(0, None, Some(shared(&dir)), &fx.store.base)).unwrap();
    assert!(!torn_tmp.exists(), "the temporary file a killed filler left was not swept");
    drop(ds);
    let ro = CacheOptions { dir: dir.clone(), readonly: true, ..CacheOptions::default() };
    let batches: Vec<Batch> = open("s3://bucket/demo.zarr", options(3, None, Some(ro), &fx.store.base))
        .unwrap()
        .train()
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(digest(&batches), expected[3], "a cached chunk file does not read as the source");
}

/// A worker process (started by the tests above with `WORKER_ENV` set; ignored otherwise):
/// opens the dataset, prints `worker: {"opened":true}`, then for each line `epoch E
/// [stop-after B]` runs epoch E and prints its digest and counts (or, after B batches, prints
/// `{"paused":true}` and waits to be killed). Exits when stdin closes.
#[test]
#[ignore = "a worker process of the shared-cache tests, started by them"]
fn worker() {
    let Ok(config) = std::env::var(WORKER_ENV) else {
        return;
    };
    let c: Value = serde_json::from_str(&config).expect("worker config");
    let rank = c["rank"].as_u64().unwrap() as usize;
    let node_ranks = c["node_ranks"].as_u64().map(|k| k as usize);
    let cache = shared(Path::new(c["cache_dir"].as_str().unwrap()));
    let ds = open("s3://bucket/demo.zarr", options(rank, node_ranks, Some(cache), c["endpoint"].as_str().unwrap()))
        .expect("a worker opens the dataset");
    let say = |v: Value| {
        let mut out = std::io::stdout().lock();
        writeln!(out, "worker: {v}").and_then(|()| out.flush()).expect("write to the test");
    };
    say(json!({ "opened": true }));
    for line in std::io::stdin().lock().lines() {
        let line = line.expect("a command");
        let words: Vec<&str> = line.split_whitespace().collect();
        let epoch: u64 = words[1].parse().expect("an epoch");
        let stop_after: Option<usize> = words.get(3).map(|b| b.parse().expect("a batch count"));
        ds.set_epoch(epoch);
        let mut batches = Vec::new();
        for b in ds.train().unwrap() {
            batches.push(b.expect("a batch"));
            if Some(batches.len()) == stop_after {
                say(json!({ "paused": true }));
                // Until the test kills this process.
                loop {
                    std::thread::park();
                }
            }
        }
        let stats = ds.last_pass().expect("a pass ended");
        say(json!({
            "digest": digest(&batches),
            "storage_reads": stats.storage_reads,
            "revived_chunks": stats.revived_chunks,
        }));
    }
}
