//! A training loop in Rust: candle fits next-step 2 m temperature from this step's, on
//! shuffled windowed batches of the demo store (input `t2m` at t, target `t2m` at t + 1).
//!
//! `cargo run -p insitubatch-examples --example train [STORE_URL]` (default: the demo store).
//! Each batch is handed to candle as a tensor copied from a zero-copy ndarray view; the
//! model is `y = w·x + b` (two parameters, starting at zero), fitted by gradient descent.

use candle_core::{Device, Tensor, Var};
use insitubatch_native::{OpenOptions, Variable, demo};

/// A rough scale so the inputs are near unit size (kelvin around 273 ± 30).
const OFFSET_K: f32 = 273.0;
const SCALE_K: f32 = 30.0;
const EPOCHS: u64 = 4;
const LEARNING_RATE: f64 = 0.5;

fn main() -> anyhow::Result<()> {
    let url = match std::env::args().nth(1) {
        Some(url) => url,
        None => demo::write_demo_store(&demo::default_demo_path())?.display().to_string(),
    };
    // Two labelled views of one array: the input and the same field one step later.
    let t2m = insitubatch_native::open(&url, OpenOptions::default())?.dataset().variables()[0].geometry.clone();
    let window = vec![
        Variable { label: "x".into(), geometry: t2m.clone() },
        Variable { label: "y".into(), geometry: t2m.shift(1) },
    ];
    let ds = insitubatch_native::open(&url, OpenOptions { labelled: Some(window), ..OpenOptions::default() })?;

    let device = Device::Cpu;
    let w = Var::zeros((), candle_core::DType::F32, &device)?;
    let b = Var::zeros((), candle_core::DType::F32, &device)?;
    let mut losses = Vec::new();
    for epoch in 0..EPOCHS {
        ds.set_epoch(epoch);
        let (mut total, mut batches) = (0f32, 0);
        for batch in ds.train()? {
            let batch = batch?;
            let (x, y) = (tensor(&batch, "x", &device)?, tensor(&batch, "y", &device)?);
            let pred = x.broadcast_mul(w.as_tensor())?.broadcast_add(b.as_tensor())?;
            let loss = (pred - y)?.sqr()?.mean_all()?;
            let grads = loss.backward()?;
            for var in [&w, &b] {
                let g = grads.get(var).ok_or_else(|| anyhow::anyhow!("no gradient"))?;
                var.set(&(var.as_tensor() - g.affine(LEARNING_RATE, 0.0)?)?)?;
            }
            total += loss.to_scalar::<f32>()?;
            batches += 1;
        }
        let mean = total / batches as f32;
        let (wv, bv) = (w.as_tensor().to_scalar::<f32>()?, b.as_tensor().to_scalar::<f32>()?);
        println!("epoch {epoch}: {batches} batches, mean loss {mean:.6}, w {wv:.4}, b {bv:.4}");
        losses.push(mean);
    }
    anyhow::ensure!(losses.last() < losses.first(), "the loss did not fall: {losses:?}");
    Ok(())
}

/// One label of a batch as a normalized candle tensor of shape `(rows, lat, lon)`.
fn tensor(batch: &insitubatch_native::Batch, label: &str, device: &Device) -> anyhow::Result<Tensor> {
    let view = batch.view::<f32>(label)?;
    let values: Vec<f32> = view.iter().map(|v| (v - OFFSET_K) / SCALE_K).collect();
    Ok(Tensor::from_vec(values, view.shape(), device)?)
}
