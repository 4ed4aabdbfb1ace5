//! Model FLOPs utilization as a series: where a run logs the FLOPs its model did (`flops`, or
//! the Hugging Face callback's `train/total_flos`), rank 0 logs `mfu` beside them, the FLOPs done
//! since this process began over what the job's GPUs could have done in that time at their peak
//! dense TFLOPS (`schema/data/peak_tflops.csv`).

use serde_json::{json, Value};
use std::sync::Mutex;

/// The keys read as the model's FLOPs so far (all GPUs together), the first present wins.
pub const FLOPS_KEYS: [&str; 2] = ["flops", "train/total_flos"];

/// The key of the series this meter writes.
pub const MFU_KEY: &str = "mfu";

/// Turns the FLOPs a run logs into its `mfu`.
#[derive(Debug)]
pub struct MfuMeter {
    /// FLOP/s the job's GPUs can do together at their peak.
    peak_flops_per_s: f64,
    gpus: u32,
    gpu_name: String,
    per_gpu_tflops: f64,
    /// The FLOPs and time the series counts from: (0, this process's start) for a new run; for
    /// a resumed run, its first logged FLOPs (the total so far includes earlier attempts).
    base: Mutex<Option<(f64, i64)>>,
}

impl MfuMeter {
    /// A meter for a job of `node_count` nodes like this one (`gpu_names` as NVML names the
    /// node's GPUs, `gpus` of them given to the job); None when there is no GPU, or one the
    /// peak file does not hold.
    pub fn new(gpu_names: &[String], gpus: u32, node_count: u32, resumed: bool, started_ms: i64) -> Option<Self> {
        let peaks: Vec<f64> =
            gpu_names.iter().map(|name| trainlog_schema::peak_flops::peak_dense_tflops(name)).collect::<Option<_>>()?;
        if peaks.is_empty() || gpus == 0 {
            return None;
        }
        let per_gpu_tflops = peaks.iter().sum::<f64>() / peaks.len() as f64;
        let total = gpus.saturating_mul(node_count.max(1));
        Some(MfuMeter {
            peak_flops_per_s: per_gpu_tflops * 1e12 * f64::from(total),
            gpus: total,
            gpu_name: gpu_names[0].clone(),
            per_gpu_tflops,
            base: Mutex::new((!resumed).then_some((0.0, started_ms))),
        })
    }

    /// The `mfu` to log beside `values` logged at `timestamp_ms`, if they hold the FLOPs so far
    /// (and not an `mfu` of the caller's own).
    pub fn observe(&self, timestamp_ms: i64, values: &[(&str, f64)]) -> Option<f64> {
        let flops = FLOPS_KEYS.iter().find_map(|key| values.iter().find(|(k, _)| k == key).map(|(_, v)| *v))?;
        if !flops.is_finite() || flops < 0.0 || values.iter().any(|(k, _)| *k == MFU_KEY) {
            return None;
        }
        let mut base = self.base.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some((base_flops, base_ms)) = *base else {
            *base = Some((flops, timestamp_ms));
            return None;
        };
        let seconds = (timestamp_ms - base_ms) as f64 / 1000.0;
        (seconds > 0.0 && flops >= base_flops).then(|| (flops - base_flops) / (self.peak_flops_per_s * seconds))
    }

    /// What the series divides by, for the run's metadata.
    pub fn describe(&self) -> Value {
        json!({
            "series": MFU_KEY,
            "flops_from": FLOPS_KEYS,
            "gpus": self.gpus,
            "gpu": self.gpu_name,
            "peak_dense_tflops_per_gpu": self.per_gpu_tflops,
            "peak_file_version": trainlog_schema::peak_flops::peak_tflops_version(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100s(n: usize) -> Vec<String> {
        vec!["NVIDIA H100 80GB HBM3".to_owned(); n]
    }

    #[test]
    fn a_new_run_counts_from_its_start_over_every_gpu_of_the_job() {
        let peak = trainlog_schema::peak_flops::peak_dense_tflops("NVIDIA H100 80GB HBM3").expect("H100 in the file");
        let m = MfuMeter::new(&h100s(2), 2, 2, false, 1_000).expect("meter");
        // 4 GPUs for 10 s at a quarter of their peak.
        let flops = 0.25 * peak * 1e12 * 4.0 * 10.0;
        let mfu = m.observe(11_000, &[("loss", 1.0), ("flops", flops)]).expect("mfu");
        assert!((mfu - 0.25).abs() < 1e-12, "{mfu}");
        assert_eq!(m.observe(12_000, &[("loss", 1.0)]), None, "no FLOPs, no mfu");
        assert_eq!(m.observe(12_000, &[("flops", flops), ("mfu", 0.5)]), None, "the caller's own mfu wins");
    }

    #[test]
    fn a_resumed_run_counts_from_its_first_flops_and_hf_total_flos_is_read() {
        let peak = trainlog_schema::peak_flops::peak_dense_tflops("NVIDIA H100 80GB HBM3").expect("H100");
        let m = MfuMeter::new(&h100s(1), 1, 1, true, 0).expect("meter");
        assert_eq!(m.observe(5_000, &[("train/total_flos", 1e18)]), None, "the first point is the base");
        let mfu = m.observe(7_000, &[("train/total_flos", 1e18 + peak * 1e12)]).expect("mfu");
        assert!((mfu - 0.5).abs() < 1e-12, "{mfu}");
    }

    #[test]
    fn no_meter_without_a_gpu_of_known_peak() {
        assert!(MfuMeter::new(&[], 0, 1, false, 0).is_none());
        assert!(MfuMeter::new(&["Imaginary GPU 9000".into()], 1, 1, false, 0).is_none());
    }
}
