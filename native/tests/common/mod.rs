//! What the CLI's tests share: running the built binary, and demo stores in a folder of the
//! test's own.

use std::path::PathBuf;
use std::process::{Command, Output};

use insitubatch_native::demo;
use scratch::scratch_dir;

mod scratch;

/// Run the `insitubatch` binary with `args` (warnings only in its log).
pub fn cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_insitubatch")).args(args).env("RUST_LOG", "warn").output().expect("start")
}

/// A demo store of `n_time` samples called `name`, in a folder of the test binary `test`.
pub fn demo_store(test: &str, name: &str, n_time: u64) -> String {
    let dir = scratch_dir(test);
    let path: PathBuf = demo::write_demo_store_sized(&dir.join(name), n_time).expect("write demo store");
    path.display().to_string()
}
