//! A Rust training loop logged to trainlog: fits y = 3x - 2 by gradient descent.
//!
//! `cargo run --release -p trainlog --example train` (server from `TRAINLOG_SERVER`, else local).

use serde_json::json;

fn main() -> Result<(), trainlog::Error> {
    let lr = 0.05;
    let data: Vec<(f64, f64)> = (0..256)
        .map(|i| {
            let x = i as f64 / 128.0 - 1.0;
            (x, 3.0 * x - 2.0)
        })
        .collect();
    let run = trainlog::Run::builder("examples")
        .name("linear-rust")
        .config(json!({"lr": lr, "model": {"kind": "linear"}}))
        .label("example")
        .start()?;
    let (mut w, mut b) = (0.0f64, 0.0f64);
    let n = data.len() as f64;
    let mut loss = f64::NAN;
    for step in 0..500 {
        let grad_w: f64 = data.iter().map(|(x, y)| 2.0 * (w * x + b - y) * x).sum::<f64>() / n;
        let grad_b: f64 = data.iter().map(|(x, y)| 2.0 * (w * x + b - y)).sum::<f64>() / n;
        w -= lr * grad_w;
        b -= lr * grad_b;
        loss = data.iter().map(|(x, y)| (w * x + b - y).powi(2)).sum::<f64>() / n;
        run.log(step, &[("train/loss", loss), ("params/w", w), ("params/b", b)]);
    }
    run.finish()?;
    println!("run {}: w={w:.3} b={b:.3} loss={loss:.6}", run.id());
    Ok(())
}
