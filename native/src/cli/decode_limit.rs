//! `bench --decode-limit`: fetch every stored chunk of the first variable, then decode them
//! all on every core: the ceiling any loader can reach on this machine.

use std::borrow::Cow;
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use rayon::prelude::*;
use serde_json::json;

use super::args::RunArgs;
use super::bench::CpuTimes;

/// Fetch every stored chunk of the first variable, then decode them all with zarrs on all
/// cores: the ceiling any loader can reach on this machine.
pub(super) fn cmd_decode_limit(url: &str, knobs: &RunArgs, as_json: bool) -> Result<()> {
    use zarrs::array::{Array, ArrayMetadata, ArrayToBytesCodecTraits, CodecOptions};
    let rt = insitubatch_native::NativeRuntime::new(knobs.threads)?;
    let storage = knobs.storage(url)?;
    let first = match knobs.variables.first() {
        Some(v) => v.clone(),
        None => {
            let arrays = rt.block_on(insitubatch_native::core::internals::open_arrays(storage.as_ref(), None))?;
            arrays.first().map(|a| a.path().to_string()).ok_or_else(|| anyhow!("no arrays: {url}"))?
        }
    };
    let path = first.trim_matches('/').to_string();
    let key = |name: &str| if path.is_empty() { name.to_string() } else { format!("{path}/{name}") };
    let meta: ArrayMetadata = match rt.block_on(storage.get(&key("zarr.json"))).map_err(|e| anyhow!("{e}: {url}"))? {
        Some(b) => serde_json::from_slice(&b).context("malformed zarr.json")?,
        None => match rt.block_on(storage.get(&key(".zarray"))).map_err(|e| anyhow!("{e}: {url}"))? {
            Some(b) => serde_json::from_slice(&b).context("malformed .zarray")?,
            None => bail!("no zarr array {first:?}: {url}"),
        },
    };
    let array =
        Array::new_with_metadata(Arc::new(zarrs::storage::store::MemoryStore::new()), &format!("/{path}"), meta)
            .map_err(|e| anyhow!("cannot read array {first:?} ({e}): {url}"))?;
    let grid = array.chunk_grid_shape().to_vec();
    let n: u64 = grid.iter().product();
    let coords: Vec<Vec<u64>> = (0..n)
        .map(|mut i| {
            let mut c = vec![0; grid.len()];
            for k in (0..grid.len()).rev() {
                c[k] = i % grid[k];
                i /= grid[k];
            }
            c
        })
        .collect();
    // 1. Fetch everything (not timed), concurrently on tokio.
    let keys: Vec<String> = coords.iter().map(|c| array.chunk_key(c).as_str().to_string()).collect();
    let fetched: Vec<Option<bytes::Bytes>> = rt
        .block_on(async {
            use futures::stream::{self, StreamExt, TryStreamExt};
            stream::iter(keys.iter().map(|k| storage.get(k))).buffered(knobs.max_inflight.max(1)).try_collect().await
        })
        .map_err(|e| anyhow!("{e}: {url}"))?;
    let chunks: Vec<(Vec<u64>, bytes::Bytes)> =
        coords.into_iter().zip(fetched).filter_map(|(c, b)| b.map(|b| (c, b))).collect();
    // 2. Decode everything, timed.
    let codecs = array.codecs();
    let opts = CodecOptions::default().with_concurrent_target(1);
    let pool = rt.pool.rayon();
    let threads = pool.current_num_threads();
    let cpu0 = CpuTimes::now();
    let t0 = Instant::now();
    let decoded: u64 = pool.install(|| {
        chunks
            .par_iter()
            .map(|(c, b)| -> Result<u64> {
                let shape = array.chunk_shape(c).map_err(|e| anyhow!("{e}"))?;
                let out = codecs
                    .decode(Cow::Borrowed(&b[..]), &shape, array.data_type(), array.fill_value(), &opts)
                    .map_err(|e| anyhow!("cannot decode chunk {c:?} ({e}): {url}"))?;
                let raw = out.into_fixed().map_err(|e| anyhow!("{e}"))?;
                Ok(raw.len() as u64)
            })
            .try_reduce(|| 0, |a, b| Ok(a + b))
    })?;
    let secs = t0.elapsed().as_secs_f64().max(1e-9);
    // The decode alone: the fetch above is done, so this is the CPU a loader cannot avoid.
    let cpu = CpuTimes::now().zip(cpu0).map(|(now, before)| now.since(before));
    let mbs = decoded as f64 / 1e6 / secs;
    if as_json {
        let mut row = json!({"decode_limit_mb_per_s": mbs, "threads": threads, "variable": first, "chunks": chunks.len(), "decoded_bytes": decoded, "seconds": secs});
        if let Some(cpu) = cpu {
            cpu.add_to(&mut row, "decode_cpu_", decoded);
        }
        outln!("{row}");
    } else {
        let per_gb = cpu.and_then(|c| c.s_per_gb(decoded));
        let cpu_text = per_gb.map_or_else(String::new, |g| format!(", {g:.2} CPU-s per GB"));
        outln!(
            "decode limit: {mbs:.1} MB/s on {threads} threads ({} chunks of {first}, {decoded} bytes in {secs:.2}s{cpu_text})",
            chunks.len()
        );
    }
    Ok(())
}
