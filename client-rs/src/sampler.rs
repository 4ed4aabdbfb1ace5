//! The sampler thread: system and GPU metrics every interval, and the accumulated cost, logged
//! as `sys/…` and `cost/usd` series of the run.

use crate::collect::{cost, gpu, system};
use crate::run::Run;
use crate::sender::Shared;
use serde_json::json;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const COST_ONLY_INTERVAL: Duration = Duration::from_secs(10);

pub struct Sampler {
    stop: Arc<(Mutex<bool>, Condvar)>,
    handle: JoinHandle<()>,
}

impl Sampler {
    /// Starts sampling: system metrics every `interval` (None: off), and cost when `cost` is
    /// `Some(explicit price per hour or None to look it up)`. Fails when the thread cannot start.
    pub fn start(
        run: &Run,
        interval: Option<Duration>,
        cost: Option<Option<f64>>,
        resumed: crate::run::Resumed,
    ) -> crate::Result<Self> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let shared = run.shared.clone();
        let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
        let gpus = match gpu::GpuSampler::open(visible.as_deref()) {
            Ok(g) => Some(g),
            Err(reason) => {
                if interval.is_some() {
                    eprintln!("trainlog: no GPU readings ({reason}); recording CPU and memory only");
                }
                None
            }
        };
        let gpu_names = gpus.as_ref().map(|g| g.gpu_names()).unwrap_or_default();
        let spot = std::env::var("TRAINLOG_SPOT").is_ok_and(|v| v == "1" || v == "true");
        let provider = std::env::var("TRAINLOG_CLOUD_PROVIDER").ok();
        let price = cost.and_then(|explicit| cost::resolve_price(explicit, provider.as_deref(), spot, &gpu_names));
        if let Some((usd_per_hour, source)) = &price {
            run.set_metadata("cost", json!({"usd_per_hour": usd_per_hour, "source": source, "gpus": gpu_names}));
        }
        let every = interval.unwrap_or(COST_ONLY_INTERVAL);
        let stop2 = stop.clone();
        let handle = std::thread::Builder::new()
            .name("trainlog-sampler".into())
            .spawn(move || {
                let meter = price.map(|p| cost::CostMeter::new(p.0));
                sample_loop(shared, interval.is_some(), gpus, meter, resumed, every, stop2)
            })
            .map_err(crate::io_err("starting the sampler thread"))?;
        Ok(Self { stop, handle })
    }

    /// Stops the thread after a last sample, so the recorded cost covers the whole run.
    pub fn stop(self, _run: &Run) {
        let (flag, cv) = &*self.stop;
        *flag.lock().unwrap_or_else(|p| p.into_inner()) = true;
        cv.notify_all();
        let _ = self.handle.join();
    }
}

fn sample_loop(
    shared: Arc<Shared>,
    system_on: bool,
    mut gpus: Option<gpu::GpuSampler>,
    meter: Option<cost::CostMeter>,
    resumed: crate::run::Resumed,
    every: Duration,
    stop: Arc<(Mutex<bool>, Condvar)>,
) {
    let started = Instant::now();
    let mut sys = system_on.then(system::SystemSampler::new);
    let mut step = resumed.sampler_step;
    let cost_at = |elapsed: f64, m: &cost::CostMeter| resumed.cost_usd + m.accumulated_usd(elapsed);
    loop {
        let mut values: Vec<(String, f64)> = Vec::new();
        if let Some(s) = sys.as_mut() {
            values.extend(s.sample());
            if let Some(g) = gpus.as_mut() {
                values.extend(g.sample());
            }
        }
        if let Some(m) = &meter {
            values.push(("cost/usd".to_owned(), cost_at(started.elapsed().as_secs_f64(), m)));
        }
        let refs: Vec<(&str, f64)> = values.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        shared.enqueue(step, crate::now_ms(), &refs);
        step += 1;
        let (flag, cv) = &*stop;
        let guard = flag.lock().unwrap_or_else(|p| p.into_inner());
        if *guard {
            return;
        }
        let (guard, _) = cv.wait_timeout(guard, every).unwrap_or_else(|p| p.into_inner());
        if *guard {
            // One last reading at the end.
            drop(guard);
            if let Some(m) = &meter {
                shared.enqueue(step, crate::now_ms(), &[("cost/usd", cost_at(started.elapsed().as_secs_f64(), m))]);
            }
            return;
        }
    }
}
