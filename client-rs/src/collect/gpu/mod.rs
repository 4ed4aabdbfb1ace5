//! GPU readings through NVML, limited to the GPUs the process can see (`CUDA_VISIBLE_DEVICES`).
//!
//! NVML (`libnvidia-ml.so.1`) is loaded at run time, so a machine without the NVIDIA driver simply
//! has no GPU readings: [`GpuSampler::open`] answers why, and [`describe`] reports
//! `"available": false` with the reason.
//!
//! The sampling logic talks to the driver only through the [`GpuBackend`] and [`GpuDevice`]
//! traits, so it can be tested with a fake backend on a machine without a GPU.
//!
//! Mapping of `CUDA_VISIBLE_DEVICES` entries to NVML devices:
//! - an index `i` is taken as the NVML index `i`. CUDA's default order (`CUDA_DEVICE_ORDER`
//!   unset, "FASTEST_FIRST") may differ from NVML's PCI bus order on machines with mixed GPU
//!   models; with `CUDA_DEVICE_ORDER=PCI_BUS_ID` the two agree. On machines with identical GPUs
//!   (the usual training box) both orders are the PCI bus order.
//! - a UUID (`GPU-…`), possibly abbreviated to a prefix, selects the NVML device whose UUID starts
//!   with it; a prefix matching several devices is invalid, as in CUDA.
//! - a MIG UUID (`MIG-…`, or the older `MIG-GPU-<uuid>/<gi>/<ci>` form) is mapped to its *parent*
//!   GPU: readings (utilization, memory, power, temperature) are those of the whole physical GPU,
//!   because NVML does not report utilization, power or temperature per MIG instance. Two MIG
//!   instances of one GPU therefore show the same readings under two indices.
//!
//! As in CUDA, the first entry that is malformed, out of range, unknown or repeated ends the list:
//! the entries before it stay visible, the rest are ignored.

use std::collections::HashSet;

use serde_json::{json, Value};

/// What `CUDA_VISIBLE_DEVICES` leaves visible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VisibleDevices {
    /// Variable unset: every GPU is visible.
    All,
    /// No GPU is visible: `""`, `"-1"`, `"none"`, or a first entry that is invalid.
    None,
    /// The listed devices, in the order CUDA numbers them (0, 1, …).
    List(Vec<DeviceRef>),
}

/// One entry of `CUDA_VISIBLE_DEVICES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceRef {
    /// A device index (taken as an NVML index, see the module documentation).
    Index(u32),
    /// A GPU or MIG UUID, or a prefix of one, including its `GPU-` / `MIG-` prefix.
    Uuid(String),
}

/// Parses the value of `CUDA_VISIBLE_DEVICES` (`None` when the variable is unset).
///
/// Entries are comma-separated and trimmed; parsing stops at the first entry that is neither an
/// unsigned integer nor a `GPU-…`/`MIG-…` UUID (CUDA ignores it and everything after it). An empty
/// resulting list is [`VisibleDevices::None`].
pub fn parse_visible_devices(value: Option<&str>) -> VisibleDevices {
    let Some(value) = value else {
        return VisibleDevices::All;
    };
    let mut list = Vec::new();
    for entry in value.split(',') {
        match parse_entry(entry.trim()) {
            Some(device) => list.push(device),
            None => break,
        }
    }
    if list.is_empty() {
        VisibleDevices::None
    } else {
        VisibleDevices::List(list)
    }
}

fn parse_entry(entry: &str) -> Option<DeviceRef> {
    if entry.is_empty() {
        return None;
    }
    if entry.bytes().all(|b| b.is_ascii_digit()) {
        return entry.parse::<u32>().ok().map(DeviceRef::Index);
    }
    let upper = entry.get(..4).map(str::to_ascii_uppercase);
    match upper.as_deref() {
        Some("GPU-") | Some("MIG-") if entry.len() > 4 => Some(DeviceRef::Uuid(entry.to_owned())),
        _ => None,
    }
}

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
}

/// [`GpuBackend`] over NVML, loaded at run time.
pub struct NvmlBackend {
    nvml: nvml_wrapper::Nvml,
}

impl NvmlBackend {
    /// Loads and initializes NVML; fails where the NVIDIA driver (libnvidia-ml) is absent.
    pub fn init() -> Result<Self, String> {
        nvml_wrapper::Nvml::init()
            .map(|nvml| NvmlBackend { nvml })
            .map_err(|e| format!("NVML could not be loaded: {e}"))
    }
}

/// How many GPUs NVML sees on this machine (all of them, whatever `CUDA_VISIBLE_DEVICES` says).
pub fn device_count() -> Result<u32, String> {
    NvmlBackend::init()?.device_count()
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
        Ok(Box::new(NvmlDevice { device }))
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

struct NvmlDevice<'a> {
    device: nvml_wrapper::Device<'a>,
}

impl GpuDevice for NvmlDevice<'_> {
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
}

/// Case-insensitive "starts with" for UUIDs (CUDA accepts abbreviated UUIDs).
fn uuid_has_prefix(uuid: &str, prefix: &str) -> bool {
    uuid.as_bytes().get(..prefix.len()).is_some_and(|head| head.eq_ignore_ascii_case(prefix.as_bytes()))
}

/// One GPU visible to CUDA.
#[derive(Debug, Clone, PartialEq)]
struct Visible {
    /// NVML index of the (parent) GPU.
    nvml_index: u32,
    /// The `CUDA_VISIBLE_DEVICES` entry for a MIG instance, so `describe_devices` can tell.
    mig: Option<String>,
}

/// Resolves what `CUDA_VISIBLE_DEVICES` leaves visible to NVML indices, in CUDA's order.
fn resolve_visible(backend: &dyn GpuBackend, visible: &VisibleDevices, count: u32) -> Vec<Visible> {
    let entries = match visible {
        VisibleDevices::None => return Vec::new(),
        VisibleDevices::All => return (0..count).map(|nvml_index| Visible { nvml_index, mig: None }).collect(),
        VisibleDevices::List(entries) => entries,
    };
    // UUIDs are read once, lazily: only UUID entries need them.
    let mut uuids: Option<Vec<Option<String>>> = None;
    let mut seen: HashSet<String> = HashSet::new();
    let mut out = Vec::new();
    for entry in entries {
        let resolved = match entry {
            DeviceRef::Index(i) if *i < count => Some(Visible { nvml_index: *i, mig: None }),
            DeviceRef::Index(_) => None,
            DeviceRef::Uuid(prefix) if prefix.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("MIG-")) => {
                resolve_mig(backend, prefix, count, &mut uuids)
            }
            DeviceRef::Uuid(prefix) => {
                let uuids = uuids.get_or_insert_with(|| read_uuids(backend, count));
                unique_uuid_match(uuids, prefix).map(|nvml_index| Visible { nvml_index, mig: None })
            }
        };
        let Some(resolved) = resolved else { break };
        // A repeated device ends the list, as in CUDA.
        let identity = match &resolved.mig {
            Some(mig) => format!("mig:{}", mig.to_ascii_lowercase()),
            None => format!("gpu:{}", resolved.nvml_index),
        };
        if !seen.insert(identity) {
            break;
        }
        out.push(resolved);
    }
    out
}

fn read_uuids(backend: &dyn GpuBackend, count: u32) -> Vec<Option<String>> {
    (0..count).map(|i| backend.device(i).ok().and_then(|d| d.uuid().ok())).collect()
}

/// The index of the only device whose UUID starts with `prefix` (None: no match or ambiguous).
fn unique_uuid_match(uuids: &[Option<String>], prefix: &str) -> Option<u32> {
    let mut matches = uuids
        .iter()
        .enumerate()
        .filter(|(_, uuid)| uuid.as_deref().is_some_and(|u| uuid_has_prefix(u, prefix)))
        .map(|(i, _)| i);
    let first = matches.next()?;
    if matches.next().is_some() {
        return None;
    }
    u32::try_from(first).ok()
}

fn resolve_mig(
    backend: &dyn GpuBackend,
    entry: &str,
    count: u32,
    uuids: &mut Option<Vec<Option<String>>>,
) -> Option<Visible> {
    // Pre-R470 form: MIG-GPU-<parent uuid>/<gpu instance>/<compute instance>.
    let rest = entry.get(4..).unwrap_or("");
    let nvml_index = if rest.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("GPU-")) {
        let parent = rest.split('/').next().unwrap_or(rest);
        let uuids = uuids.get_or_insert_with(|| read_uuids(backend, count));
        unique_uuid_match(uuids, parent)?
    } else {
        backend.mig_parent_index(entry).ok().flatten().filter(|i| *i < count)?
    };
    Some(Visible { nvml_index, mig: Some(entry.to_owned()) })
}

/// Samples the GPUs visible to this process.
pub struct GpuSampler {
    backend: Box<dyn GpuBackend>,
    visible: Vec<Visible>,
}

impl std::fmt::Debug for GpuSampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuSampler").field("visible", &self.visible).finish_non_exhaustive()
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
        Ok(GpuSampler { backend, visible: selected })
    }

    /// Number of visible GPUs.
    pub fn len(&self) -> usize {
        self.visible.len()
    }

    /// Whether no GPU is visible (never true for a sampler that opened).
    pub fn is_empty(&self) -> bool {
        self.visible.is_empty()
    }

    /// One reading per visible GPU and quantity: `sys/gpu.{i}.util`, `.mem_used_bytes`,
    /// `.mem_total_bytes`, `.power_w`, `.temp_c`, `i` numbering GPUs as CUDA does. A reading that
    /// fails (or is not finite) is left out alone.
    pub fn sample(&mut self) -> Vec<(String, f64)> {
        let mut out = Vec::with_capacity(self.visible.len() * 5);
        for (i, visible) in self.visible.iter().enumerate() {
            let Ok(device) = self.backend.device(visible.nvml_index) else { continue };
            let readings: [(&str, Result<f64, String>); 5] = [
                ("util", device.utilization_percent()),
                ("mem_used_bytes", device.memory_used_bytes()),
                ("mem_total_bytes", device.memory_total_bytes()),
                ("power_w", device.power_watts()),
                ("temp_c", device.temperature_c()),
            ];
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
    /// memory_total_bytes (null where the driver did not answer), and mig (the MIG entry, or null).
    pub fn describe_devices(&self) -> Vec<Value> {
        self.visible
            .iter()
            .enumerate()
            .map(|(i, visible)| {
                let device = self.backend.device(visible.nvml_index).ok();
                let name = device.as_ref().and_then(|d| d.name().ok());
                let uuid = device.as_ref().and_then(|d| d.uuid().ok());
                let memory = device.as_ref().and_then(|d| d.memory_total_bytes().ok()).filter(|m| m.is_finite());
                json!({
                    "index": i,
                    "nvml_index": visible.nvml_index,
                    "name": name,
                    "uuid": uuid,
                    "memory_total_bytes": memory.map(|m| m as u64),
                    "mig": visible.mig,
                })
            })
            .collect()
    }

    /// The names of the visible GPUs that answered one, in CUDA's order (for the price table).
    pub fn gpu_names(&self) -> Vec<String> {
        self.visible
            .iter()
            .filter_map(|visible| self.backend.device(visible.nvml_index).ok().and_then(|d| d.name().ok()))
            .collect()
    }

    /// The driver's version, when it answers.
    pub fn driver_version(&self) -> Option<String> {
        self.backend.driver_version().ok()
    }

    fn describe_value(&self) -> Value {
        json!({
            "available": true,
            "reason": Value::Null,
            "driver_version": self.backend.driver_version().ok(),
            "cuda_version": self.backend.cuda_version().ok(),
            "devices": self.describe_devices(),
        })
    }
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
mod tests {
    use super::*;

    fn uuid(s: &str) -> DeviceRef {
        DeviceRef::Uuid(s.to_owned())
    }

    #[test]
    fn samplers_can_move_to_a_sampling_thread() {
        // Compiles only if the types are Send; the sampler also works after the move.
        fn assert_send<T: Send>(_: std::marker::PhantomData<T>) {}
        assert_send(std::marker::PhantomData::<NvmlBackend>);
        let sampler = GpuSampler::with_backend(fake(), Some("1")).unwrap();
        let system = super::super::system::SystemSampler::new();
        let (gpu, sys) = std::thread::spawn(move || {
            let (mut sampler, mut system) = (sampler, system);
            (sampler.sample(), system.sample())
        })
        .join()
        .unwrap();
        assert_eq!(gpu.len(), 4, "{gpu:?}");
        assert!(sys.iter().any(|(k, _)| k == "sys/ram.total_bytes"), "{sys:?}");
    }

    #[test]
    fn parse_unset_is_all() {
        assert_eq!(parse_visible_devices(None), VisibleDevices::All);
    }

    #[test]
    fn parse_indices_in_given_order() {
        assert_eq!(
            parse_visible_devices(Some("2,0,1")),
            VisibleDevices::List(vec![DeviceRef::Index(2), DeviceRef::Index(0), DeviceRef::Index(1)])
        );
    }

    #[test]
    fn parse_trims_spaces() {
        assert_eq!(
            parse_visible_devices(Some(" 1 , 3 ,\tGPU-8932f937 ")),
            VisibleDevices::List(vec![DeviceRef::Index(1), DeviceRef::Index(3), uuid("GPU-8932f937")])
        );
    }

    #[test]
    fn parse_uuids_and_mig_uuids() {
        let value = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6,MIG-4b8a1f2e-9a4b-5c2d-8e6f-0a1b2c3d4e5f,MIG-GPU-8932f937-d72c-4106-c12f-20bd9faed9f6/1/0";
        assert_eq!(
            parse_visible_devices(Some(value)),
            VisibleDevices::List(vec![
                uuid("GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"),
                uuid("MIG-4b8a1f2e-9a4b-5c2d-8e6f-0a1b2c3d4e5f"),
                uuid("MIG-GPU-8932f937-d72c-4106-c12f-20bd9faed9f6/1/0"),
            ])
        );
    }

    #[test]
    fn parse_nothing_visible() {
        for value in ["", "  ", "-1", "none", "NoDevFiles", "-1,0", ",0"] {
            assert_eq!(parse_visible_devices(Some(value)), VisibleDevices::None, "value {value:?}");
        }
    }

    #[test]
    fn parse_stops_at_first_invalid_entry() {
        assert_eq!(
            parse_visible_devices(Some("0,1,-1,2")),
            VisibleDevices::List(vec![DeviceRef::Index(0), DeviceRef::Index(1)])
        );
        assert_eq!(parse_visible_devices(Some("3,x7,1")), VisibleDevices::List(vec![DeviceRef::Index(3)]));
        assert_eq!(parse_visible_devices(Some("0,,1")), VisibleDevices::List(vec![DeviceRef::Index(0)]));
        assert_eq!(parse_visible_devices(Some("1,GPU-,2")), VisibleDevices::List(vec![DeviceRef::Index(1)]));
        assert_eq!(parse_visible_devices(Some("0,1.5")), VisibleDevices::List(vec![DeviceRef::Index(0)]));
    }

    // ---- fake backend ----

    #[derive(Clone)]
    struct FakeGpu {
        name: Option<&'static str>,
        uuid: &'static str,
        util: f64,
        mem_used: f64,
        mem_total: f64,
        power: Option<f64>,
        temp: f64,
        migs: Vec<&'static str>,
    }

    struct FakeBackend {
        gpus: Vec<FakeGpu>,
    }

    struct FakeDevice<'a> {
        gpu: &'a FakeGpu,
    }

    impl GpuBackend for FakeBackend {
        fn device_count(&self) -> Result<u32, String> {
            Ok(self.gpus.len() as u32)
        }
        fn device(&self, index: u32) -> Result<Box<dyn GpuDevice + '_>, String> {
            self.gpus
                .get(index as usize)
                .map(|gpu| Box::new(FakeDevice { gpu }) as Box<dyn GpuDevice + '_>)
                .ok_or_else(|| "InvalidArg".to_owned())
        }
        fn driver_version(&self) -> Result<String, String> {
            Ok("550.54.15".to_owned())
        }
        fn cuda_version(&self) -> Result<String, String> {
            Ok("12.4".to_owned())
        }
        fn mig_parent_index(&self, prefix: &str) -> Result<Option<u32>, String> {
            Ok(self.gpus.iter().position(|g| g.migs.iter().any(|m| uuid_has_prefix(m, prefix))).map(|i| i as u32))
        }
    }

    impl GpuDevice for FakeDevice<'_> {
        fn name(&self) -> Result<String, String> {
            self.gpu.name.map(str::to_owned).ok_or_else(|| "Unknown".to_owned())
        }
        fn uuid(&self) -> Result<String, String> {
            Ok(self.gpu.uuid.to_owned())
        }
        fn utilization_percent(&self) -> Result<f64, String> {
            Ok(self.gpu.util)
        }
        fn memory_used_bytes(&self) -> Result<f64, String> {
            Ok(self.gpu.mem_used)
        }
        fn memory_total_bytes(&self) -> Result<f64, String> {
            Ok(self.gpu.mem_total)
        }
        fn power_watts(&self) -> Result<f64, String> {
            self.gpu.power.ok_or_else(|| "NotSupported".to_owned())
        }
        fn temperature_c(&self) -> Result<f64, String> {
            Ok(self.gpu.temp)
        }
    }

    /// Device 0: all fine. Device 1: power fails. Device 2: name fails, has MIG instances.
    fn fake() -> Box<dyn GpuBackend> {
        Box::new(FakeBackend {
            gpus: vec![
                FakeGpu {
                    name: Some("NVIDIA H100 80GB HBM3"),
                    uuid: "GPU-aaaa1111-0000-0000-0000-000000000000",
                    util: 10.0,
                    mem_used: 1e9,
                    mem_total: 80e9,
                    power: Some(300.5),
                    temp: 40.0,
                    migs: vec![],
                },
                FakeGpu {
                    name: Some("NVIDIA A100-SXM4-40GB"),
                    uuid: "GPU-bbbb2222-0000-0000-0000-000000000000",
                    util: 20.0,
                    mem_used: 2e9,
                    mem_total: 40e9,
                    power: None,
                    temp: 50.0,
                    migs: vec![],
                },
                FakeGpu {
                    name: None,
                    uuid: "GPU-aaaa3333-0000-0000-0000-000000000000",
                    util: 30.0,
                    mem_used: 3e9,
                    mem_total: 24e9,
                    power: Some(70.0),
                    temp: 60.0,
                    migs: vec!["MIG-cccc4444-0000-0000-0000-000000000000", "MIG-dddd5555-0000-0000-0000-000000000000"],
                },
            ],
        })
    }

    fn get(sample: &[(String, f64)], key: &str) -> Option<f64> {
        sample.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    #[test]
    fn samples_all_gpus_and_drops_only_failing_readings() {
        let mut sampler = GpuSampler::with_backend(fake(), None).unwrap();
        let sample = sampler.sample();
        // 3 GPUs x 5 readings, less GPU 1's power.
        assert_eq!(sample.len(), 14, "{sample:?}");
        assert_eq!(get(&sample, "sys/gpu.0.util"), Some(10.0));
        assert_eq!(get(&sample, "sys/gpu.0.mem_used_bytes"), Some(1e9));
        assert_eq!(get(&sample, "sys/gpu.0.mem_total_bytes"), Some(80e9));
        assert_eq!(get(&sample, "sys/gpu.0.power_w"), Some(300.5));
        assert_eq!(get(&sample, "sys/gpu.0.temp_c"), Some(40.0));
        assert_eq!(get(&sample, "sys/gpu.1.power_w"), None);
        assert_eq!(get(&sample, "sys/gpu.1.util"), Some(20.0));
        assert_eq!(get(&sample, "sys/gpu.1.temp_c"), Some(50.0));
        // A failing name does not stop readings.
        assert_eq!(get(&sample, "sys/gpu.2.power_w"), Some(70.0));
        assert_eq!(get(&sample, "sys/gpu.2.mem_total_bytes"), Some(24e9));
    }

    #[test]
    fn visible_devices_renumber_in_cuda_order() {
        let mut sampler = GpuSampler::with_backend(fake(), Some("2,0")).unwrap();
        let sample = sampler.sample();
        assert_eq!(get(&sample, "sys/gpu.0.util"), Some(30.0), "gpu.0 is NVML device 2");
        assert_eq!(get(&sample, "sys/gpu.1.util"), Some(10.0), "gpu.1 is NVML device 0");
        assert!(sample.iter().all(|(k, _)| !k.starts_with("sys/gpu.2.")), "{sample:?}");
        let devices = sampler.describe_devices();
        assert_eq!(devices.len(), 2);
        assert_eq!(devices[0]["index"], 0);
        assert_eq!(devices[0]["nvml_index"], 2);
        assert_eq!(devices[0]["name"], Value::Null);
        assert_eq!(devices[1]["nvml_index"], 0);
        assert_eq!(devices[1]["name"], "NVIDIA H100 80GB HBM3");
        assert_eq!(devices[1]["memory_total_bytes"], 80_000_000_000u64);
        // The failing name is skipped.
        assert_eq!(sampler.gpu_names(), vec!["NVIDIA H100 80GB HBM3".to_owned()]);
    }

    #[test]
    fn uuid_prefix_selects_device() {
        let mut sampler = GpuSampler::with_backend(fake(), Some("GPU-BBBB2222")).unwrap();
        let sample = sampler.sample();
        assert_eq!(get(&sample, "sys/gpu.0.util"), Some(20.0));
        assert_eq!(sample.len(), 4, "only the A100, without power: {sample:?}");
        assert_eq!(sampler.gpu_names(), vec!["NVIDIA A100-SXM4-40GB".to_owned()]);
    }

    #[test]
    fn ambiguous_or_unknown_uuid_ends_the_list() {
        // "GPU-aaaa" matches devices 0 and 2: invalid, so nothing after "1" is visible.
        let sampler = GpuSampler::with_backend(fake(), Some("1,GPU-aaaa,0")).unwrap();
        assert_eq!(sampler.describe_devices().iter().map(|d| d["nvml_index"].clone()).collect::<Vec<_>>(), vec![1]);
        let sampler = GpuSampler::with_backend(fake(), Some("0,GPU-ffff,1")).unwrap();
        assert_eq!(sampler.len(), 1);
    }

    #[test]
    fn out_of_range_or_repeated_index_ends_the_list() {
        let sampler = GpuSampler::with_backend(fake(), Some("1,7,0")).unwrap();
        assert_eq!(sampler.len(), 1);
        let sampler = GpuSampler::with_backend(fake(), Some("1,0,1,2")).unwrap();
        assert_eq!(sampler.len(), 2);
        let err = GpuSampler::with_backend(fake(), Some("5")).unwrap_err();
        assert!(err.contains("no GPU visible"), "{err}");
    }

    #[test]
    fn mig_uuids_map_to_parent_gpu() {
        let mut sampler =
            GpuSampler::with_backend(fake(), Some("MIG-dddd5555,MIG-GPU-bbbb2222-0000-0000-0000-000000000000/1/0"))
                .unwrap();
        let devices = sampler.describe_devices();
        assert_eq!(devices.len(), 2);
        assert_eq!(devices[0]["nvml_index"], 2);
        assert_eq!(devices[0]["mig"], "MIG-dddd5555");
        assert_eq!(devices[1]["nvml_index"], 1);
        let sample = sampler.sample();
        assert_eq!(get(&sample, "sys/gpu.0.util"), Some(30.0));
        assert_eq!(get(&sample, "sys/gpu.1.util"), Some(20.0));
        // Two instances of one GPU are two visible devices; an unknown MIG ends the list.
        let sampler = GpuSampler::with_backend(fake(), Some("MIG-cccc4444,MIG-dddd5555,MIG-eeee")).unwrap();
        assert_eq!(sampler.len(), 2);
    }

    #[test]
    fn nothing_visible_is_an_error_with_the_reason() {
        let err = GpuSampler::with_backend(fake(), Some("-1")).unwrap_err();
        assert!(err.contains("no GPU visible") && err.contains("CUDA_VISIBLE_DEVICES=\"-1\""), "{err}");
        let empty: Box<dyn GpuBackend> = Box::new(FakeBackend { gpus: vec![] });
        let err = GpuSampler::with_backend(empty, None).unwrap_err();
        assert!(err.contains("no GPU"), "{err}");
    }

    #[test]
    fn describe_from_fake_backend() {
        let value = describe_from(Ok(fake()), Some("0"));
        assert_eq!(value["available"], true);
        assert_eq!(value["reason"], Value::Null);
        assert_eq!(value["driver_version"], "550.54.15");
        assert_eq!(value["cuda_version"], "12.4");
        assert_eq!(value["devices"].as_array().map(Vec::len), Some(1));
        assert_eq!(value["devices"][0]["uuid"], "GPU-aaaa1111-0000-0000-0000-000000000000");

        let value = describe_from(Ok(fake()), Some(""));
        assert_eq!(value["available"], false);
        assert_eq!(value["driver_version"], "550.54.15");
        assert!(value["reason"].as_str().is_some_and(|r| r.contains("no GPU visible")), "{value}");
    }

    /// This machine has no NVIDIA driver: the no-GPU path must answer a reason, not panic.
    /// (On a machine with a GPU, the sampler must open and give readings instead.)
    #[test]
    fn no_gpu_path_on_this_machine() {
        match nvml_wrapper::Nvml::init() {
            Err(_) => {
                let err = GpuSampler::open(None).unwrap_err();
                assert!(err.contains("NVML"), "{err}");
                let value = describe();
                assert_eq!(value["available"], false);
                assert!(value["reason"].as_str().is_some_and(|r| r.contains("NVML")), "{value}");
                assert_eq!(value["devices"], json!([]));
            }
            Ok(_) => {
                let mut sampler = GpuSampler::open(None).unwrap();
                assert!(sampler.sample().iter().any(|(k, _)| k == "sys/gpu.0.mem_total_bytes"));
                assert_eq!(describe()["available"], true);
            }
        }
    }
}
