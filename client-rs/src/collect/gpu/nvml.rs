//! [`GpuBackend`] over NVML (`libnvidia-ml.so.1`), loaded once per process at run time.

use std::sync::OnceLock;

use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::Nvml;

use super::visible::uuid_has_prefix;
use super::{GpmMetrics, GpmSample, GpuBackend, GpuDevice};

/// NVML, initialized on first use and kept for the life of the process: GPM samples borrow it,
/// and the sampler keeps the previous sample of each GPU from one reading to the next.
static NVML: OnceLock<Result<Nvml, String>> = OnceLock::new();

fn nvml() -> Result<&'static Nvml, String> {
    NVML.get_or_init(|| Nvml::init().map_err(|e| format!("NVML could not be loaded: {e}")))
        .as_ref()
        .map_err(Clone::clone)
}

/// [`GpuBackend`] over NVML.
pub struct NvmlBackend {
    nvml: &'static Nvml,
}

impl NvmlBackend {
    /// Loads and initializes NVML; fails where the NVIDIA driver (libnvidia-ml) is absent.
    pub fn init() -> Result<Self, String> {
        nvml().map(|nvml| NvmlBackend { nvml })
    }
}

fn err_string(e: nvml_wrapper::error::NvmlError) -> String {
    e.to_string()
}

impl GpuBackend for NvmlBackend {
    fn device_count(&self) -> Result<u32, String> {
        self.nvml.device_count().map_err(err_string)
    }

    fn device(&self, index: u32) -> Result<Box<dyn GpuDevice + '_>, String> {
        let device = self.nvml.device_by_index(index).map_err(err_string)?;
        Ok(Box::new(NvmlDevice { nvml: self.nvml, device }))
    }

    fn driver_version(&self) -> Result<String, String> {
        self.nvml.sys_driver_version().map_err(err_string)
    }

    fn cuda_version(&self) -> Result<String, String> {
        let version = self.nvml.sys_cuda_driver_version().map_err(err_string)?;
        Ok(format!(
            "{}.{}",
            nvml_wrapper::cuda_driver_version_major(version),
            nvml_wrapper::cuda_driver_version_minor(version)
        ))
    }

    fn mig_parent_index(&self, mig_uuid_prefix: &str) -> Result<Option<u32>, String> {
        let count = self.nvml.device_count().map_err(err_string)?;
        for index in 0..count {
            let Ok(device) = self.nvml.device_by_index(index) else { continue };
            // Not supported (no MIG on this GPU) -> no instances to look at.
            let slots = device.mig_device_count().unwrap_or(0);
            for slot in 0..slots {
                // Unpopulated slots answer NotFound.
                let Ok(mig) = device.mig_device_by_index(slot) else { continue };
                if mig.uuid().is_ok_and(|uuid| uuid_has_prefix(&uuid, mig_uuid_prefix)) {
                    return Ok(Some(index));
                }
            }
        }
        Ok(None)
    }
}

struct NvmlDevice {
    nvml: &'static Nvml,
    device: nvml_wrapper::Device<'static>,
}

/// The GPM metrics the sampler records, in the order [`GpmMetrics`] takes them.
const GPM_METRICS: [GpmMetricId; 3] = [GpmMetricId::SmUtil, GpmMetricId::SmOccupancy, GpmMetricId::AnyTensorUtil];

fn nvml_gpm_sample(sample: &GpmSample) -> Result<&nvml_wrapper::gpm::GpmSample<'static>, String> {
    sample.0.downcast_ref().ok_or_else(|| "a GPM sample taken by another backend".to_owned())
}

impl GpuDevice for NvmlDevice {
    fn name(&self) -> Result<String, String> {
        self.device.name().map_err(err_string)
    }

    fn uuid(&self) -> Result<String, String> {
        self.device.uuid().map_err(err_string)
    }

    fn utilization_percent(&self) -> Result<f64, String> {
        self.device.utilization_rates().map(|u| f64::from(u.gpu)).map_err(err_string)
    }

    fn memory_used_bytes(&self) -> Result<f64, String> {
        self.device.memory_info().map(|m| m.used as f64).map_err(err_string)
    }

    fn memory_total_bytes(&self) -> Result<f64, String> {
        self.device.memory_info().map(|m| m.total as f64).map_err(err_string)
    }

    fn power_watts(&self) -> Result<f64, String> {
        // NVML answers milliwatts.
        self.device.power_usage().map(|mw| f64::from(mw) / 1000.0).map_err(err_string)
    }

    fn temperature_c(&self) -> Result<f64, String> {
        use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
        self.device.temperature(TemperatureSensor::Gpu).map(f64::from).map_err(err_string)
    }

    fn total_energy_millijoules(&self) -> Result<u64, String> {
        self.device.total_energy_consumption().map_err(err_string)
    }

    fn gpm_supported(&self) -> Result<bool, String> {
        self.device.gpm_support().map_err(err_string)
    }

    fn gpm_sample(&self) -> Result<GpmSample, String> {
        self.device.gpm_sample().map(|sample| GpmSample(Box::new(sample))).map_err(err_string)
    }

    fn gpm_metrics(&self, earlier: &GpmSample, later: &GpmSample) -> Result<GpmMetrics, String> {
        let (earlier, later) = (nvml_gpm_sample(earlier)?, nvml_gpm_sample(later)?);
        let results =
            nvml_wrapper::gpm::gpm_metrics_get(self.nvml, earlier, later, &GPM_METRICS).map_err(err_string)?;
        let value = |i: usize| results.get(i).and_then(|r| r.as_ref().ok()).map(|m| m.value);
        Ok(GpmMetrics { sm_active: value(0), sm_occupancy: value(1), tensor_active: value(2) })
    }
}
