//! GPUs' peak dense tensor-core TFLOPS (BF16/FP16), from the versioned data file
//! `schema/data/peak_tflops.csv` built into the binary: what model FLOPs utilization divides by.

/// The data file, as built in.
const PEAK_TFLOPS_CSV: &str = include_str!("../data/peak_tflops.csv");

/// The data file's version (its `# version:` line).
pub fn peak_tflops_version() -> &'static str {
    PEAK_TFLOPS_CSV.lines().find_map(|l| l.strip_prefix("# version:")).map_or("", str::trim)
}

/// The peak dense TFLOPS of one GPU named `gpu_name` (as NVML names it, "NVIDIA H100 80GB
/// HBM3"): the row whose words all appear in the name, the one with the most words; None for a
/// GPU the file does not hold.
pub fn peak_dense_tflops(gpu_name: &str) -> Option<f64> {
    let name = crate::gpu_names::gpu_name_words(gpu_name);
    PEAK_TFLOPS_CSV
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("gpu,"))
        .filter_map(|l| {
            let mut fields = l.splitn(3, ',');
            let (gpu, tflops) = (fields.next()?, fields.next()?.trim().parse::<f64>().ok()?);
            Some((crate::gpu_names::gpu_name_match(gpu, &name)?, tflops))
        })
        .max_by_key(|(n, _)| *n)
        .map(|(_, tflops)| tflops)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpus_match_their_most_specific_row() {
        assert_eq!(peak_dense_tflops("NVIDIA H100 80GB HBM3"), Some(989.4));
        assert_eq!(peak_dense_tflops("NVIDIA H100 PCIe"), Some(756.5));
        assert_eq!(peak_dense_tflops("NVIDIA H200"), Some(989.4));
        assert_eq!(peak_dense_tflops("NVIDIA A100-SXM4-40GB"), Some(312.0));
        assert_eq!(peak_dense_tflops("NVIDIA L4"), Some(121.0));
        assert_eq!(peak_dense_tflops("NVIDIA L40S"), Some(362.05), "L40S is not an L4");
        assert_eq!(peak_dense_tflops("NVIDIA GeForce RTX 4090"), None);
        assert_eq!(peak_tflops_version(), "2026-11-28");
    }
}
