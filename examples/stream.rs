//! Batches as a `futures::Stream` in a tokio application.
//!
//! `cargo run -p insitubatch-examples --example stream [STORE_URL]` (default: the demo store,
//! written on first use). Opening reads metadata on the engine's own runtime, so it runs on
//! a blocking thread; the stream itself is awaited on any executor.

use futures::StreamExt;
use insitubatch_native::{OpenOptions, Split, demo};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = match std::env::args().nth(1) {
        Some(url) => url,
        None => demo::write_demo_store(&demo::default_demo_path())?.display().to_string(),
    };
    let ds = tokio::task::spawn_blocking(move || insitubatch_native::open(&url, OpenOptions::default())).await??;
    println!("{}", ds.describe(1)?.render());

    let mut batches = ds.stream(Split::Train)?;
    let mut samples = 0;
    while let Some(batch) = batches.next().await {
        let batch = batch?;
        // A zero-copy ndarray view of the batch's (rows, lat, lon) array.
        let t2m = batch.view::<f32>("t2m")?;
        samples += t2m.shape()[0];
        let first = &batch.sample_indices[..3.min(batch.len())];
        println!(
            "batch {:>3}: t2m {:?}, samples {first:?}…, mean {:.2} K",
            batch.index,
            t2m.shape(),
            t2m.mean().unwrap_or(f32::NAN)
        );
    }
    let stats = ds.last_pass().ok_or_else(|| anyhow::anyhow!("no pass report"))?;
    println!("{samples} samples; {}", stats.summary());
    let drawable = ds.describe(1)?.config.drawable_samples.into_iter().find(|(s, _)| s == "train").map(|(_, n)| n);
    anyhow::ensure!(drawable == Some(samples as u64), "every train sample once: {samples} of {drawable:?}");
    Ok(())
}
