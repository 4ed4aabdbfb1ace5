//! Tests of the GPU collector over a fake backend.

use super::sampler::EnergyMeter;
use super::visible::uuid_has_prefix;
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
    energy_mj: Option<u64>,
    gpm: Option<FakeGpmCounters>,
}

/// Running totals, as a GPU's performance counters count: the metrics over an interval are the
/// differences between two samples of them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct FakeGpmCounters {
    seconds: f64,
    sm_active_seconds: f64,
    sm_occupancy_seconds: f64,
    tensor_active_seconds: f64,
}

impl FakeGpmCounters {
    /// Runs the counters on for `seconds` at these percentages.
    fn advance(&mut self, seconds: f64, sm_active: f64, sm_occupancy: f64, tensor_active: f64) {
        self.seconds += seconds;
        self.sm_active_seconds += seconds * sm_active / 100.0;
        self.sm_occupancy_seconds += seconds * sm_occupancy / 100.0;
        self.tensor_active_seconds += seconds * tensor_active / 100.0;
    }
}

/// The fake's GPUs, shared with the test so that it can change readings between samples.
type FakeGpus = std::sync::Arc<std::sync::Mutex<Vec<FakeGpu>>>;

struct FakeBackend {
    gpus: FakeGpus,
}

impl FakeBackend {
    fn boxed(gpus: Vec<FakeGpu>) -> (Box<dyn GpuBackend>, FakeGpus) {
        let shared = FakeGpus::new(std::sync::Mutex::new(gpus));
        (Box::new(FakeBackend { gpus: shared.clone() }), shared)
    }
}

struct FakeDevice {
    gpu: FakeGpu,
}

impl GpuBackend for FakeBackend {
    fn device_count(&self) -> Result<u32, String> {
        Ok(self.gpus.lock().unwrap().len() as u32)
    }
    fn device(&self, index: u32) -> Result<Box<dyn GpuDevice + '_>, String> {
        self.gpus
            .lock()
            .unwrap()
            .get(index as usize)
            .map(|gpu| Box::new(FakeDevice { gpu: gpu.clone() }) as Box<dyn GpuDevice + '_>)
            .ok_or_else(|| "InvalidArg".to_owned())
    }
    fn driver_version(&self) -> Result<String, String> {
        Ok("550.54.15".to_owned())
    }
    fn cuda_version(&self) -> Result<String, String> {
        Ok("12.4".to_owned())
    }
    fn mig_parent_index(&self, prefix: &str) -> Result<Option<u32>, String> {
        let gpus = self.gpus.lock().unwrap();
        Ok(gpus.iter().position(|g| g.migs.iter().any(|m| uuid_has_prefix(m, prefix))).map(|i| i as u32))
    }
}

impl GpuDevice for FakeDevice {
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
    fn total_energy_millijoules(&self) -> Result<u64, String> {
        self.gpu.energy_mj.ok_or_else(|| "NotSupported".to_owned())
    }
    fn gpm_supported(&self) -> Result<bool, String> {
        Ok(self.gpu.gpm.is_some())
    }
    fn gpm_sample(&self) -> Result<GpmSample, String> {
        let counters = self.gpu.gpm.ok_or_else(|| "NotSupported".to_owned())?;
        Ok(GpmSample(Box::new(counters)))
    }
    fn gpm_metrics(&self, earlier: &GpmSample, later: &GpmSample) -> Result<GpmMetrics, String> {
        let earlier: &FakeGpmCounters = earlier.0.downcast_ref().ok_or("not a fake sample")?;
        let later: &FakeGpmCounters = later.0.downcast_ref().ok_or("not a fake sample")?;
        let seconds = later.seconds - earlier.seconds;
        if seconds <= 0.0 {
            return Err("InvalidArg: the later sample is not later".to_owned());
        }
        let percent = |end: f64, start: f64| Some(100.0 * (end - start) / seconds);
        Ok(GpmMetrics {
            sm_active: percent(later.sm_active_seconds, earlier.sm_active_seconds),
            sm_occupancy: percent(later.sm_occupancy_seconds, earlier.sm_occupancy_seconds),
            tensor_active: percent(later.tensor_active_seconds, earlier.tensor_active_seconds),
        })
    }
}

/// Device 0: all fine. Device 1: power fails. Device 2: name fails, has MIG instances.
fn fake() -> Box<dyn GpuBackend> {
    FakeBackend::boxed(vec![
        FakeGpu {
            name: Some("NVIDIA H100 80GB HBM3"),
            uuid: "GPU-aaaa1111-0000-0000-0000-000000000000",
            util: 10.0,
            mem_used: 1e9,
            mem_total: 80e9,
            power: Some(300.5),
            temp: 40.0,
            migs: vec![],
            energy_mj: None,
            gpm: None,
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
            energy_mj: None,
            gpm: None,
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
            energy_mj: None,
            gpm: None,
        },
    ])
    .0
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
    let (empty, _) = FakeBackend::boxed(vec![]);
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

fn h100_with(energy_mj: Option<u64>, gpm: Option<FakeGpmCounters>) -> FakeGpu {
    FakeGpu {
        name: Some("NVIDIA H100 80GB HBM3"),
        uuid: "GPU-eeee0000-0000-0000-0000-000000000000",
        util: 100.0,
        mem_used: 1e9,
        mem_total: 80e9,
        power: Some(650.0),
        temp: 70.0,
        migs: vec![],
        energy_mj,
        gpm,
    }
}

#[test]
fn energy_meter_adds_only_forward_steps_of_the_counter() {
    let mut meter = EnergyMeter::starting_at(Some(5_000));
    assert_eq!(meter.joules_at(5_000), 0.0);
    assert_eq!(meter.joules_at(7_500), 2.5);
    // The driver reloaded: the counter restarts near 0; the energy so far stays.
    assert_eq!(meter.joules_at(200), 2.5);
    assert_eq!(meter.joules_at(1_200), 3.5);
    // A counter that did not answer at open starts at its first reading.
    let mut late = EnergyMeter::starting_at(None);
    assert_eq!(late.joules_at(9_000_000), 0.0);
    assert_eq!(late.joules_at(9_001_000), 1.0);
}

#[test]
fn energy_j_counts_from_the_counter_at_open() {
    let (backend, gpus) = FakeBackend::boxed(vec![h100_with(Some(1_000_000), None)]);
    let mut sampler = GpuSampler::with_backend(backend, None).unwrap();
    gpus.lock().unwrap()[0].energy_mj = Some(1_250_500);
    assert_eq!(get(&sampler.sample(), "sys/gpu.0.energy_j"), Some(250.5));
    gpus.lock().unwrap()[0].energy_mj = Some(1_000);
    assert_eq!(get(&sampler.sample(), "sys/gpu.0.energy_j"), Some(250.5), "a counter going back adds nothing");
    gpus.lock().unwrap()[0].energy_mj = Some(3_000);
    assert_eq!(get(&sampler.sample(), "sys/gpu.0.energy_j"), Some(252.5));
    // A GPU without the counter has no energy series.
    let mut without = GpuSampler::with_backend(fake(), None).unwrap();
    assert!(without.sample().iter().all(|(k, _)| !k.ends_with(".energy_j")));
}

#[test]
fn a_gpu_without_gpm_has_no_sm_series() {
    let (backend, _gpus) = FakeBackend::boxed(vec![h100_with(Some(0), None)]);
    let mut sampler = GpuSampler::with_backend(backend, None).unwrap();
    for _ in 0..3 {
        let sample = sampler.sample();
        assert_eq!(get(&sample, "sys/gpu.0.util"), Some(100.0));
        assert!(sample.iter().all(|(k, _)| !k.contains(".sm_") && !k.ends_with(".tensor_active")), "{sample:?}");
    }
    assert_eq!(sampler.describe_devices()[0]["gpm"], false);
}

#[test]
fn gpm_metrics_cover_the_time_between_the_previous_sample_and_this_one() {
    let (backend, gpus) = FakeBackend::boxed(vec![h100_with(None, Some(FakeGpmCounters::default()))]);
    let mut sampler = GpuSampler::with_backend(backend, None).unwrap();
    assert_eq!(sampler.describe_devices()[0]["gpm"], true);
    let first = sampler.sample();
    assert_eq!(get(&first, "sys/gpu.0.sm_active"), None, "one sample covers no time yet");
    let readings = |sample: &[(String, f64)]| {
        ["util", "sm_active", "sm_occupancy", "tensor_active"]
            .map(|m| get(sample, &format!("sys/gpu.0.{m}")).map(|v| (v * 1e6).round() / 1e6))
    };

    // Busy: a matmul loop. Then 10 s of tiny kernels: util still reads 100.
    gpus.lock().unwrap()[0].gpm.as_mut().unwrap().advance(10.0, 95.0, 60.0, 88.0);
    let busy = sampler.sample();
    assert_eq!(readings(&busy), [Some(100.0), Some(95.0), Some(60.0), Some(88.0)]);
    gpus.lock().unwrap()[0].gpm.as_mut().unwrap().advance(10.0, 2.0, 1.0, 0.0);
    let tiny = sampler.sample();
    assert_eq!(
        readings(&tiny),
        [Some(100.0), Some(2.0), Some(1.0), Some(0.0)],
        "the last interval only, not the average since open"
    );
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
