//! The sampler thread: system and GPU metrics every interval, and the accumulated cost, logged
//! as `sys/…` series of the run (`sys/node/{n}/…` in a job of several nodes), and the job's
//! cost so far as `cost/usd` and `cost/lost_usd`.

use crate::collect::{cost, gpu, system};
use crate::membership::Membership;
use crate::sender::Shared;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const COST_ONLY_INTERVAL: Duration = Duration::from_secs(10);

/// What one process samples: its node's system series (a node leader), and the job's cost
/// (rank 0).
pub struct SamplerPlan {
    /// How often to read the system; None: no system series.
    pub system_every: Option<Duration>,
    /// The node's GPUs, opened before the run joined (their names priced the node).
    pub gpus: Option<gpu::GpuSampler>,
    /// `sys/`, or `sys/node/{n}/` in a job of several nodes.
    pub system_prefix: String,
    /// Log the job's cost: from the server's figures when it gave some, else at this node's
    /// price (when known) on top of what the run had cost before.
    pub cost: Option<(Option<f64>, Arc<Membership>)>,
    pub resumed: crate::run::Resumed,
}

pub struct Sampler {
    stop: Arc<(Mutex<bool>, Condvar)>,
    handle: JoinHandle<()>,
}

impl Sampler {
    /// Starts the sampling thread; fails only when the thread cannot start.
    pub fn start(shared: Arc<Shared>, plan: SamplerPlan) -> crate::Result<Self> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let every = plan.system_every.unwrap_or(COST_ONLY_INTERVAL);
        let stop2 = stop.clone();
        let handle = std::thread::Builder::new()
            .name("trainlog-sampler".into())
            .spawn(move || sample_loop(shared, plan, every, stop2))
            .map_err(crate::io_err("starting the sampler thread"))?;
        Ok(Self { stop, handle })
    }

    /// Stops the thread after a last sample, so the recorded cost covers the whole run.
    pub fn stop(self) {
        let (flag, cv) = &*self.stop;
        *flag.lock().unwrap_or_else(|p| p.into_inner()) = true;
        cv.notify_all();
        let _ = self.handle.join();
    }
}

/// The job's cost now: the server's figure carried forward, else this node's price since the
/// sampler started on top of the run's earlier cost.
fn cost_now(plan: &SamplerPlan, started: Instant) -> Vec<(String, f64)> {
    let Some((local_price, membership)) = &plan.cost else { return Vec::new() };
    // A job none of whose nodes has a price has no cost series (not a series of zeros).
    let priced = |b: &crate::membership::CostBase| local_price.is_some() || b.usd_per_hour > 0.0 || b.cost_usd > 0.0;
    match membership.cost_base().filter(priced) {
        Some(base) => {
            vec![("cost/usd".to_owned(), base.cost_at(crate::now_ms())), ("cost/lost_usd".to_owned(), base.lost_usd)]
        }
        None => match local_price {
            Some(price) => {
                let meter = cost::CostMeter::new(*price);
                vec![(
                    "cost/usd".to_owned(),
                    plan.resumed.cost_usd + meter.accumulated_usd(started.elapsed().as_secs_f64()),
                )]
            }
            None => Vec::new(),
        },
    }
}

fn sample_loop(shared: Arc<Shared>, mut plan: SamplerPlan, every: Duration, stop: Arc<(Mutex<bool>, Condvar)>) {
    let started = Instant::now();
    let mut sys = plan.system_every.is_some().then(system::SystemSampler::new);
    let mut step = plan.resumed.sampler_step;
    let prefix = plan.system_prefix.clone();
    let renamed = |(key, value): (String, f64)| match key.strip_prefix(trainlog_schema::SYSTEM_PREFIX) {
        Some(rest) if prefix != trainlog_schema::SYSTEM_PREFIX => (format!("{prefix}{rest}"), value),
        _ => (key, value),
    };
    // A resumed run's GPU energy goes on from where its series stopped.
    let energy_before = plan.resumed.energy_j.clone();
    let with_energy_before = |(key, value): (String, f64)| match energy_before.get(&key) {
        Some(before) => (key, before + value),
        None => (key, value),
    };
    loop {
        let mut values: Vec<(String, f64)> = Vec::new();
        if let Some(s) = sys.as_mut() {
            values.extend(s.sample().into_iter().map(renamed));
            if let Some(g) = plan.gpus.as_mut() {
                values.extend(g.sample().into_iter().map(renamed).map(with_energy_before));
            }
        }
        values.extend(cost_now(&plan, started));
        let refs: Vec<(&str, f64)> = values.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        if !refs.is_empty() {
            shared.enqueue(step, crate::now_ms(), &refs);
        }
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
            let last = cost_now(&plan, started);
            let refs: Vec<(&str, f64)> = last.iter().map(|(k, v)| (k.as_str(), *v)).collect();
            if !refs.is_empty() {
                shared.enqueue(step, crate::now_ms(), &refs);
            }
            return;
        }
    }
}
