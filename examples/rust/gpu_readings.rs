//! Prints what trainlog's GPU collector reads on this machine, once a second: each GPU's NVML
//! utilization, SM activity, SM occupancy and tensor activity (GPM, Hopper and later), power,
//! and the energy used since it started, as one JSON object a line.
//!
//! `cargo run --release -p trainlog --example gpu_readings -- [SECONDS]` (10 by default); it
//! watches the GPUs `CUDA_VISIBLE_DEVICES` leaves visible.

use std::time::Duration;
use trainlog::collect::gpu::GpuSampler;

fn main() {
    let seconds: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(10);
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let mut sampler = match GpuSampler::open(visible.as_deref()) {
        Ok(sampler) => sampler,
        Err(why) => {
            eprintln!("no GPU readings: {why}");
            std::process::exit(1);
        }
    };
    println!("{}", serde_json::Value::Array(sampler.describe_devices()));
    for second in 0..=seconds {
        let readings: serde_json::Map<String, serde_json::Value> =
            sampler.sample().into_iter().map(|(key, value)| (key, serde_json::json!(value))).collect();
        println!("{}", serde_json::json!({"second": second, "readings": readings}));
        std::thread::sleep(Duration::from_secs(1));
    }
}
