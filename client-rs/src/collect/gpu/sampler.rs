//! [`GpuSampler`]: the readings of the watched GPUs, each sampling call, through a [`GpuBackend`].

use serde_json::{json, Value};

use super::nvml::NvmlBackend;
use super::visible::{parse_visible_devices, resolve_visible, Visible, VisibleDevices};
use super::{GpmSample, GpuBackend, GpuDevice};

/// Joules a GPU used since the sampler opened, from NVML's energy counter (millijoules since the
/// driver loaded). The counter going back (a driver reload) adds nothing: energy never decreases.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct EnergyMeter {
    last_counter_mj: Option<u64>,
    used_mj: u64,
}

impl EnergyMeter {
    /// Starts from the counter's reading at open (`None`: it did not answer; the first reading
    /// that does becomes the start).
    pub fn starting_at(counter_mj: Option<u64>) -> Self {
        EnergyMeter { last_counter_mj: counter_mj, used_mj: 0 }
    }

    /// Takes a new reading of the counter and answers the joules used since the start.
    pub fn joules_at(&mut self, counter_mj: u64) -> f64 {
        if let Some(last) = self.last_counter_mj {
            self.used_mj += counter_mj.saturating_sub(last);
        }
        self.last_counter_mj = Some(counter_mj);
        self.used_mj as f64 / 1000.0
    }
}

/// One watched GPU and what its readings carry from one sampling call to the next.
struct WatchedGpu {
    visible: Visible,
    /// Whether the GPU answers GPM (Hopper and later): only then are SM and tensor activity read.
    gpm_supported: bool,
    /// The GPM sample of the previous call: metrics cover the time between two samples.
    previous_gpm: Option<GpmSample>,
    energy: EnergyMeter,
}

/// Samples the GPUs visible to this process.
pub struct GpuSampler {
    backend: Box<dyn GpuBackend>,
    gpus: Vec<WatchedGpu>,
}

impl std::fmt::Debug for GpuSampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let visible: Vec<&Visible> = self.gpus.iter().map(|gpu| &gpu.visible).collect();
        f.debug_struct("GpuSampler").field("visible", &visible).finish_non_exhaustive()
    }
}

fn describe_visible_value(visible: Option<&str>) -> String {
    match visible {
        Some(v) => format!("{v:?}"),
        None => "unset".to_owned(),
    }
}

impl GpuSampler {
    /// Opens NVML and selects the GPUs that `visible` (the value of `CUDA_VISIBLE_DEVICES`,
    /// `None` when unset) leaves visible. The error says why there are no GPU readings.
    pub fn open(visible: Option<&str>) -> Result<GpuSampler, String> {
        if parse_visible_devices(visible) == VisibleDevices::None {
            // Not worth loading the driver library.
            return Err(format!("no GPU visible (CUDA_VISIBLE_DEVICES={})", describe_visible_value(visible)));
        }
        let backend = NvmlBackend::init()?;
        GpuSampler::with_backend(Box::new(backend), visible)
    }

    /// As [`GpuSampler::open`], over any backend (tests use a fake one).
    pub fn with_backend(backend: Box<dyn GpuBackend>, visible: Option<&str>) -> Result<GpuSampler, String> {
        let parsed = parse_visible_devices(visible);
        if parsed == VisibleDevices::None {
            return Err(format!("no GPU visible (CUDA_VISIBLE_DEVICES={})", describe_visible_value(visible)));
        }
        let count = backend.device_count().map_err(|e| format!("NVML could not count the GPUs: {e}"))?;
        if count == 0 {
            return Err("no GPU visible (NVML found no GPU)".to_owned());
        }
        let selected = resolve_visible(backend.as_ref(), &parsed, count);
        if selected.is_empty() {
            return Err(format!(
                "no GPU visible (CUDA_VISIBLE_DEVICES={} matches none of the {count} GPUs NVML found)",
                describe_visible_value(visible)
            ));
        }
        let gpus = selected
            .into_iter()
            .map(|visible| {
                let device = backend.device(visible.nvml_index).ok();
                let gpm_supported = device.as_ref().is_some_and(|d| d.gpm_supported().unwrap_or(false));
                let counter = device.as_ref().and_then(|d| d.total_energy_millijoules().ok());
                WatchedGpu { visible, gpm_supported, previous_gpm: None, energy: EnergyMeter::starting_at(counter) }
            })
            .collect();
        Ok(GpuSampler { backend, gpus })
    }

    /// Number of visible GPUs.
    pub fn len(&self) -> usize {
        self.gpus.len()
    }

    /// Whether no GPU is visible (never true for a sampler that opened).
    pub fn is_empty(&self) -> bool {
        self.gpus.is_empty()
    }

    /// One reading per visible GPU and quantity, `i` numbering GPUs as CUDA does:
    /// `sys/gpu.{i}.util`, `.mem_used_bytes`, `.mem_total_bytes`, `.power_w`, `.temp_c`,
    /// `.energy_j` (joules since the sampler opened), and on GPUs with GPM, from the second call
    /// on, `.sm_active`, `.sm_occupancy`, `.tensor_active` (percent, over the time since the
    /// previous call). A reading that fails (or is not finite) is left out alone.
    pub fn sample(&mut self) -> Vec<(String, f64)> {
        let mut out = Vec::with_capacity(self.gpus.len() * 9);
        for (i, gpu) in self.gpus.iter_mut().enumerate() {
            let Ok(device) = self.backend.device(gpu.visible.nvml_index) else { continue };
            let mut readings: Vec<(&str, Result<f64, String>)> = vec![
                ("util", device.utilization_percent()),
                ("mem_used_bytes", device.memory_used_bytes()),
                ("mem_total_bytes", device.memory_total_bytes()),
                ("power_w", device.power_watts()),
                ("temp_c", device.temperature_c()),
                ("energy_j", device.total_energy_millijoules().map(|mj| gpu.energy.joules_at(mj))),
            ];
            if gpu.gpm_supported {
                readings.extend(gpm_readings(device.as_ref(), &mut gpu.previous_gpm));
            }
            for (name, reading) in readings {
                if let Ok(value) = reading {
                    if value.is_finite() {
                        out.push((format!("sys/gpu.{i}.{name}"), value));
                    }
                }
            }
        }
        out
    }

    /// One JSON object per visible GPU: index (CUDA's), nvml_index, name, uuid,
    /// memory_total_bytes (null where the driver did not answer), mig (the MIG entry, or null),
    /// and gpm (whether the GPU answers GPM, so has SM and tensor activity series).
    pub fn describe_devices(&self) -> Vec<Value> {
        self.gpus
            .iter()
            .enumerate()
            .map(|(i, gpu)| {
                let device = self.backend.device(gpu.visible.nvml_index).ok();
                let name = device.as_ref().and_then(|d| d.name().ok());
                let uuid = device.as_ref().and_then(|d| d.uuid().ok());
                let memory = device.as_ref().and_then(|d| d.memory_total_bytes().ok()).filter(|m| m.is_finite());
                json!({
                    "index": i,
                    "nvml_index": gpu.visible.nvml_index,
                    "name": name,
                    "uuid": uuid,
                    "memory_total_bytes": memory.map(|m| m as u64),
                    "mig": gpu.visible.mig,
                    "gpm": gpu.gpm_supported,
                })
            })
            .collect()
    }

    /// The names of the visible GPUs that answered one, in CUDA's order (for the price table).
    pub fn gpu_names(&self) -> Vec<String> {
        self.gpus
            .iter()
            .filter_map(|gpu| self.backend.device(gpu.visible.nvml_index).ok().and_then(|d| d.name().ok()))
            .collect()
    }

    /// The driver's version, when it answers.
    pub fn driver_version(&self) -> Option<String> {
        self.backend.driver_version().ok()
    }

    pub(super) fn describe_value(&self) -> Value {
        json!({
            "available": true,
            "reason": Value::Null,
            "driver_version": self.backend.driver_version().ok(),
            "cuda_version": self.backend.cuda_version().ok(),
            "devices": self.describe_devices(),
        })
    }
}

/// SM activity, SM occupancy and tensor-core activity over the time since the previous GPM
/// sample, which the new sample replaces. NVML's `util` counts the time any kernel ran, so it
/// reads 100% for tiny kernels run back to back or a collective stuck waiting; these count the
/// share of the SMs doing work (on an H200, a matmul loop: util 100%, SM active 96.6%, tensor
/// 89.1%; tiny kernels with a sync between each: util 9-14%, SM active 0.0%).
fn gpm_readings(device: &dyn GpuDevice, previous: &mut Option<GpmSample>) -> Vec<(&'static str, Result<f64, String>)> {
    let Ok(current) = device.gpm_sample() else { return Vec::new() };
    let earlier = previous.replace(current);
    let (Some(earlier), Some(later)) = (earlier, previous.as_ref()) else { return Vec::new() };
    let Ok(metrics) = device.gpm_metrics(&earlier, later) else { return Vec::new() };
    let answered = |value: Option<f64>| value.ok_or_else(|| "not answered".to_owned());
    vec![
        ("sm_active", answered(metrics.sm_active)),
        ("sm_occupancy", answered(metrics.sm_occupancy)),
        ("tensor_active", answered(metrics.tensor_active)),
    ]
}
