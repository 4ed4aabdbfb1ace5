//! GPU readings through NVML, limited to the GPUs the process can see (`CUDA_VISIBLE_DEVICES`).
//!
//! NVML (`libnvidia-ml.so.1`) is loaded at run time, so a machine without the NVIDIA driver simply
//! has no GPU readings: [`GpuSampler::open`] answers why, and [`describe`] reports
//! `"available": false` with the reason.
//!
//! The sampling logic talks to the driver only through the [`GpuBackend`] and [`GpuDevice`]
//! traits, so it can be tested with a fake backend on a machine without a GPU (and end to end
//! with the stand-in library of `tests/nvml-standin`).
//!
//! Besides NVML's `util` (the share of time any kernel ran, 100% for a GPU running one tiny
//! kernel at a time or stuck in a collective), GPUs with GPM (Hopper and later) give the share of
//! the SMs doing work and of tensor-core activity; every GPU gives its energy counter.

use std::any::Any;

use serde_json::{json, Value};

mod nvml;
mod sampler;
mod visible;

pub use nvml::NvmlBackend;
pub use sampler::GpuSampler;
pub use visible::{parse_visible_devices, DeviceRef, VisibleDevices};

/// Access to the GPU driver (NVML in production, a fake in tests). `Send` so that a
/// [`GpuSampler`] can be moved to the thread that samples.
pub trait GpuBackend: Send {
    /// Number of GPUs the driver knows.
    fn device_count(&self) -> Result<u32, String>;
    /// The device with this driver (NVML) index.
    fn device(&self, index: u32) -> Result<Box<dyn GpuDevice + '_>, String>;
    /// Driver version, e.g. "550.54.15".
    fn driver_version(&self) -> Result<String, String>;
    /// Highest CUDA version the driver supports, "major.minor".
    fn cuda_version(&self) -> Result<String, String>;
    /// The index of the GPU holding the MIG instance whose UUID starts with `mig_uuid_prefix`
    /// (`Ok(None)`: no such instance). The default knows no MIG instances.
    fn mig_parent_index(&self, mig_uuid_prefix: &str) -> Result<Option<u32>, String> {
        let _ = mig_uuid_prefix;
        Ok(None)
    }
}

/// One GPU. Each reading may fail on its own (e.g. power is not supported on some boards).
pub trait GpuDevice {
    /// Product name, e.g. "NVIDIA H100 80GB HBM3".
    fn name(&self) -> Result<String, String>;
    /// UUID, e.g. "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6".
    fn uuid(&self) -> Result<String, String>;
    /// Percent of the last sample period during which a kernel ran (0..100).
    fn utilization_percent(&self) -> Result<f64, String>;
    /// Used device memory, bytes.
    fn memory_used_bytes(&self) -> Result<f64, String>;
    /// Total device memory, bytes.
    fn memory_total_bytes(&self) -> Result<f64, String>;
    /// Power draw, watts.
    fn power_watts(&self) -> Result<f64, String>;
    /// Core temperature, degrees Celsius.
    fn temperature_c(&self) -> Result<f64, String>;
    /// Energy used since the driver loaded, millijoules (Volta and later).
    fn total_energy_millijoules(&self) -> Result<u64, String> {
        Err("NotSupported".to_owned())
    }
    /// Whether the GPU answers GPM (GPU performance monitoring: Hopper and later).
    fn gpm_supported(&self) -> Result<bool, String> {
        Ok(false)
    }
    /// A snapshot of the GPU's GPM counters now.
    fn gpm_sample(&self) -> Result<GpmSample, String> {
        Err("NotSupported".to_owned())
    }
    /// The GPM metrics over the time between two samples this device took.
    fn gpm_metrics(&self, earlier: &GpmSample, later: &GpmSample) -> Result<GpmMetrics, String> {
        let _ = (earlier, later);
        Err("NotSupported".to_owned())
    }
}

/// A snapshot of one GPU's GPM counters, as the backend that took it keeps it; only that
/// backend's [`GpuDevice::gpm_metrics`] reads it.
pub struct GpmSample(pub Box<dyn Any + Send>);

/// What GPM says of the time between two samples, each in percent (`None`: not answered).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpmMetrics {
    /// Share of time each SM had at least one warp assigned, averaged over the SMs
    /// (`NVML_GPM_METRIC_SM_UTIL`).
    pub sm_active: Option<f64>,
    /// Warps resident against the SMs' maximum (`NVML_GPM_METRIC_SM_OCCUPANCY`).
    pub sm_occupancy: Option<f64>,
    /// Share of time the SMs ran any tensor-core instruction (`NVML_GPM_METRIC_ANY_TENSOR_UTIL`).
    pub tensor_active: Option<f64>,
}

/// How many GPUs NVML sees on this machine (all of them, whatever `CUDA_VISIBLE_DEVICES` says).
pub fn device_count() -> Result<u32, String> {
    NvmlBackend::init()?.device_count()
}

/// The visible GPUs, described for the run's environment record:
/// `{"available", "reason", "driver_version", "cuda_version", "devices": [...]}`.
/// Reads `CUDA_VISIBLE_DEVICES`; never panics.
pub fn describe() -> Value {
    let visible = std::env::var_os("CUDA_VISIBLE_DEVICES").map(|v| v.to_string_lossy().into_owned());
    describe_from(NvmlBackend::init().map(|b| Box::new(b) as Box<dyn GpuBackend>), visible.as_deref())
}

/// [`describe`] over a given backend (or the reason there is none) and `CUDA_VISIBLE_DEVICES` value.
pub fn describe_from(backend: Result<Box<dyn GpuBackend>, String>, visible: Option<&str>) -> Value {
    let backend = match backend {
        Ok(backend) => backend,
        Err(reason) => return unavailable(reason, None, None),
    };
    let driver = backend.driver_version().ok();
    let cuda = backend.cuda_version().ok();
    match GpuSampler::with_backend(backend, visible) {
        Ok(sampler) => sampler.describe_value(),
        Err(reason) => unavailable(reason, driver, cuda),
    }
}

fn unavailable(reason: String, driver: Option<String>, cuda: Option<String>) -> Value {
    json!({
        "available": false,
        "reason": reason,
        "driver_version": driver,
        "cuda_version": cuda,
        "devices": [],
    })
}

#[cfg(test)]
mod tests;
