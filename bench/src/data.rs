//! Synthetic training metrics for the benchmarks: a deterministic PRNG, realistic curves
//! (noisy decaying losses, rising accuracies, an LR schedule, throughput, memory), and
//! request bodies pre-encoded as Arrow IPC streams or JSON.

use std::io::Write;

/// xorshift64* — deterministic, fast, good enough for benchmark noise.
#[derive(Debug, Clone)]
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> Self {
        // Never zero, and well mixed even for small seeds.
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Roughly normal, mean 0 and variance 1 (sum of four uniforms, rescaled).
    pub fn noise(&mut self) -> f64 {
        let s = self.unit() + self.unit() + self.unit() + self.unit();
        (s - 2.0) * 3f64.sqrt()
    }
}

/// How a value was produced, which decides its precision: PyTorch metrics come from float32
/// tensors (`loss.item()` is an f64 holding an f32), Python-side arithmetic is full f64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// Metric from a float32 tensor: an f64 that holds an f32 exactly.
    Tensor32,
    /// Every value a full-precision f64.
    Full64,
}

/// The ten metric keys a training loop logs at every step.
pub const KEYS: [&str; 10] = [
    "train/loss",
    "val/loss",
    "train/acc",
    "val/acc",
    "grad_norm",
    "loss/aux",
    "lr",
    "throughput",
    "gpu_mem_gb",
    "epoch",
];

/// One client's generator: a run's curves with its own noise and timing.
pub struct RunCurves {
    rng: XorShift,
    precision: Precision,
    /// Wall-clock timestamp (ms) of the next step.
    next_ts: i64,
    /// Per-run variation of the curves.
    scale: f64,
    total_steps: f64,
}

impl RunCurves {
    pub fn new(seed: u64, precision: Precision, total_steps: u64) -> Self {
        let mut rng = XorShift::new(seed + 1);
        let scale = 0.9 + 0.2 * rng.unit();
        Self {
            rng,
            precision,
            next_ts: 1_735_689_600_000 + (seed as i64) * 7_919,
            scale,
            total_steps: total_steps as f64,
        }
    }

    fn t32(&self, v: f64) -> f64 {
        match self.precision {
            Precision::Tensor32 => v as f32 as f64,
            Precision::Full64 => v,
        }
    }

    /// Timestamp of this step; the clock then advances 10-100 ms.
    pub fn tick(&mut self) -> i64 {
        let ts = self.next_ts;
        self.next_ts += 10 + (self.rng.next_u64() % 91) as i64;
        ts
    }

    /// The value of key `k` (an index into `KEYS`) at `step`.
    pub fn value(&mut self, k: usize, step: i64) -> f64 {
        let s = step as f64;
        let n = self.rng.noise();
        match k {
            0 => self.t32(2.0 * self.scale * (-s / 3e5).exp() + 0.05 * n + 0.1),
            1 => self.t32(2.1 * self.scale * (-s / 3.2e5).exp() + 0.03 * n + 0.15),
            2 => self.t32((1.0 - 0.9 * (-s / 2e5).exp() + 0.01 * n).clamp(0.0, 1.0)),
            3 => self.t32((0.97 - 0.87 * (-s / 2.2e5).exp() + 0.008 * n).clamp(0.0, 1.0)),
            4 => self.t32((1.0 + 0.3 * n).abs() * (0.5 + (-s / 1e5).exp())),
            5 => self.t32(0.3 * (-s / 5e5).exp() + 0.01 * n.abs()),
            // Cosine schedule with warm-up, computed in Python floats.
            6 => {
                let warm = 2000.0;
                if s < warm {
                    1e-3 * (s + 1.0) / warm
                } else {
                    let p = ((s - warm) / (self.total_steps - warm).max(1.0)).min(1.0);
                    1e-5 + 0.5 * (1e-3 - 1e-5) * (1.0 + (std::f64::consts::PI * p).cos())
                }
            }
            // Samples per second: batch size over a measured wall time.
            7 => 256.0 / (0.08 + 0.004 * n.abs()),
            // torch.cuda.memory_allocated() / 2**30: whole MiB, slowly varying.
            8 => (17_600.0 + 40.0 * (s / 1e4).sin() + (4.0 * n).round()).round() / 1024.0,
            // Fractional epoch: step over steps per epoch.
            _ => s / 5_000.0,
        }
    }
}

/// A batch of points in row form: keys (indexes into `KEYS`), steps, values, timestamps.
pub struct Rows {
    pub keys: Vec<&'static str>,
    pub steps: Vec<i64>,
    pub values: Vec<f64>,
    pub timestamps: Vec<i64>,
}

impl Rows {
    pub fn with_capacity(n: usize) -> Self {
        Self {
            keys: Vec::with_capacity(n),
            steps: Vec::with_capacity(n),
            values: Vec::with_capacity(n),
            timestamps: Vec::with_capacity(n),
        }
    }

    pub fn len(&self) -> usize {
        self.steps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    pub fn push(&mut self, key: &'static str, step: i64, value: f64, ts: i64) {
        self.keys.push(key);
        self.steps.push(step);
        self.values.push(value);
        self.timestamps.push(ts);
    }

    pub fn arrow(&self) -> Vec<u8> {
        trainlog_tests::arrow_stream(&self.keys, &self.steps, &self.values, Some(&self.timestamps))
    }

    /// `{"points":[{"key":..,"step":..,"value":..,"timestamp":..},...]}`; values in Rust's shortest
    /// round-trip form, which is valid JSON for the finite values generated here.
    pub fn json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len() * 90 + 16);
        out.extend_from_slice(b"{\"points\":[");
        for i in 0..self.len() {
            if i > 0 {
                out.push(b',');
            }
            let v = self.values[i];
            assert!(v.is_finite(), "generated values are finite");
            write!(
                out,
                "{{\"key\":\"{}\",\"step\":{},\"value\":{:?},\"timestamp\":{}}}",
                self.keys[i], self.steps[i], v, self.timestamps[i]
            )
            .expect("writing to a Vec");
        }
        out.extend_from_slice(b"]}");
        out
    }
}

/// The batches one client sends: `batches` batches of `steps_per_batch` consecutive steps, each
/// step carrying every key in `KEYS` (step-major, as a training loop logs them).
pub fn client_batches(seed: u64, precision: Precision, batches: usize, steps_per_batch: usize) -> Vec<Rows> {
    let total_steps = (batches * steps_per_batch) as u64;
    let mut curves = RunCurves::new(seed, precision, total_steps);
    let mut out = Vec::with_capacity(batches);
    for b in 0..batches {
        let mut rows = Rows::with_capacity(steps_per_batch * KEYS.len());
        for i in 0..steps_per_batch {
            let step = (b * steps_per_batch + i) as i64;
            let ts = curves.tick();
            for (k, key) in KEYS.iter().enumerate() {
                let v = curves.value(k, step);
                rows.push(key, step, v, ts);
            }
        }
        out.push(rows);
    }
    out
}

/// A single-key series of `n` points (a loss curve) in batches of at most `batch` points.
pub fn single_key_batches(seed: u64, key: &'static str, n: usize, batch: usize) -> Vec<Rows> {
    let mut curves = RunCurves::new(seed, Precision::Tensor32, n as u64);
    let mut out = Vec::new();
    let mut step = 0usize;
    while step < n {
        let len = batch.min(n - step);
        let mut rows = Rows::with_capacity(len);
        for _ in 0..len {
            let ts = curves.tick();
            let v = curves.value(0, step as i64);
            rows.push(key, step as i64, v, ts);
            step += 1;
        }
        out.push(rows);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_shaped() {
        let a = client_batches(3, Precision::Tensor32, 2, 5);
        let b = client_batches(3, Precision::Tensor32, 2, 5);
        assert_eq!(a[1].values, b[1].values);
        assert_eq!(a[0].len(), 50);
        assert_eq!(a[1].steps[0], 5);
        let json: serde_json::Value = serde_json::from_slice(&a[0].json()).expect("valid JSON");
        assert_eq!(json["points"].as_array().map(Vec::len), Some(50));
        assert!(a[0].timestamps.windows(2).all(|w| w[0] <= w[1]));
    }
}
