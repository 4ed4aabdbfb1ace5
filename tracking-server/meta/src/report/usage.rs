//! What one run contributes to the training report, computed from its job, its GPU utilization
//! samples and its sweep trial: pure arithmetic, no SQL.

use crate::jobs::{AttemptFigures, JobFigures};

/// The utilization thresholds (percent) a report may count GPU-seconds as active above.
pub const THRESHOLDS: [u32; 20] = [0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60, 65, 70, 75, 80, 85, 90, 95];

/// The threshold a report uses unless asked for another.
pub const DEFAULT_THRESHOLD: u32 = 10;

/// One GPU's utilization samples (ms since the epoch, percent), in time order.
pub type Samples = Vec<(i64, f64)>;

/// A span of time the run's GPUs existed (one attempt of its job) and what one GPU-second of it
/// cost, where every node of it had a price.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Span {
    pub start_ms: i64,
    /// i64::MAX while the attempt runs.
    pub end_ms: i64,
    pub usd_per_gpu_s: Option<f64>,
}

/// The spans of a job's attempts, each at its own price.
pub fn spans(attempts: &[AttemptFigures]) -> Vec<Span> {
    attempts
        .iter()
        .map(|a| Span {
            start_ms: a.start_ms,
            end_ms: a.end_ms.unwrap_or(i64::MAX),
            usd_per_gpu_s: (a.gpu_hours > 0.0 && a.unpriced_nodes == 0).then(|| a.cost_usd / (a.gpu_hours * 3600.0)),
        })
        .collect()
}

/// GPU-seconds above each threshold of [`THRESHOLDS`], what they cost, and the seconds the
/// samples cover.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Activity {
    pub above: [f64; 20],
    /// The cost of the GPU-seconds above each threshold, each at its own span's price.
    pub above_usd: [f64; 20],
    pub covered_s: f64,
}

/// Counts each sample for the time to the next sample of its GPU, but never for more than one
/// sampling interval (the series' median gap): a longer gap is time nothing was measured, which
/// is not active. With the job's `spans`, a sample counts only inside the span it was taken in
/// (no GPU existed between attempts), at that span's price. A series of one sample covers nothing.
pub fn activity(series: &[Samples], spans: Option<&[Span]>) -> Activity {
    let mut out = Activity::default();
    for samples in series {
        if samples.len() < 2 {
            continue;
        }
        let mut gaps: Vec<i64> = samples.windows(2).map(|w| (w[1].0 - w[0].0).max(0)).collect();
        gaps.sort_unstable();
        let interval = gaps[gaps.len() / 2];
        for (i, (t, value)) in samples.iter().enumerate() {
            let mut end = samples.get(i + 1).map_or(t + interval, |next| next.0).min(t.saturating_add(interval));
            let mut price = None;
            if let Some(spans) = spans {
                let Some(span) = spans.iter().find(|s| s.start_ms <= *t && *t < s.end_ms) else { continue };
                end = end.min(span.end_ms);
                price = span.usd_per_gpu_s;
            }
            let seconds = (end - t).max(0) as f64 / 1000.0;
            out.covered_s += seconds;
            for (slot, threshold) in THRESHOLDS.iter().enumerate() {
                if *value > f64::from(*threshold) {
                    out.above[slot] += seconds;
                    out.above_usd[slot] += seconds * price.unwrap_or(0.0);
                }
            }
        }
    }
    out
}

/// The run as the report needs it, besides its job.
#[derive(Debug, Clone, PartialEq)]
pub struct RunBasics {
    pub status: String,
    pub start_ms: i64,
    pub end_ms: Option<i64>,
    /// Joules its GPUs used: the last values of its `…energy_j` series, added up.
    pub energy_j: Option<f64>,
    /// The FLOPs its model did, all GPUs together: the last value of its `flops` series (else
    /// of `train/total_flos`, which the Hugging Face callback logs).
    pub flops: Option<f64>,
    /// The last value of its `cost/usd` series, for a run with no job record.
    pub cost_series_usd: Option<f64>,
    /// When its sweep trial was created, for a run that is one.
    pub trial_created_ms: Option<i64>,
    /// When its sweep trial last started, for a run that is one.
    pub trial_started_ms: Option<i64>,
}

/// What one run contributes to the report (a row of `run_usage`).
#[derive(Debug, Clone, PartialEq)]
pub struct RunUsage {
    /// running, finished, code, infra or killed.
    pub outcome: &'static str,
    pub failure: Option<String>,
    pub gpus: i64,
    pub gpu_model: String,
    pub provider: String,
    /// spot, on_demand, mixed, or empty when no attempt said.
    pub pricing: &'static str,
    /// Provisioned: each node's GPUs × how long it ran, over every attempt; from the GPU series
    /// for a run with no job record.
    pub gpu_hours: f64,
    pub spot_gpu_hours: f64,
    /// Whether `cost_usd` is the run's whole cost (every node priced).
    pub priced: bool,
    pub cost_usd: f64,
    /// GPU utilization series it has.
    pub gpu_series: i64,
    pub active_s: [f64; 20],
    /// What the active GPU-seconds cost, each at its attempt's price (0 for a run with no job).
    pub active_usd: [f64; 20],
    /// GPU-seconds its samples cover (each sample for at most one sampling interval).
    pub sampled_s: f64,
    /// What it would have cost at on-demand prices: None without a job, or where a spot node's
    /// on-demand price is not known.
    pub on_demand_usd: Option<f64>,
    /// From its submission (else its first start) to its end, for a finished run.
    pub time_to_result_ms: Option<i64>,
    /// What its active GPU-seconds were measured by: `sm_active` (GPM, where every GPU had it),
    /// `util` (NVML's utilization), `mixed`, or empty without a series.
    pub utilization_source: &'static str,
    /// Kilowatt-hours its GPUs used, where they measured it.
    pub energy_kwh: Option<f64>,
    /// Useful GPU-hours: its FLOPs / its GPU model's peak dense FLOPS, in hours (its model FLOPs
    /// utilization is these / `gpu_hours`); None without FLOPs or a known peak.
    pub useful_gpu_hours: Option<f64>,
    pub queue_wait_ms: Option<i64>,
    /// slurm, launcher or sweep.
    pub queue_source: Option<&'static str>,
}

/// Whether a failure's reason says the process was killed rather than failing on its own: the
/// kernel's OOM killer, or SIGKILL from anyone.
fn killed_by_the_system(reason: &str) -> bool {
    let lower = reason.to_ascii_lowercase();
    ["sigkill", "signal 9", "oom-kill", "oom killer", "out of memory: killed"].iter().any(|w| lower.contains(w))
}

/// How a run ended, for the report, and why it failed or was stopped: the evidence that decided
/// its last attempt's end, where its job recorded one.
pub fn outcome(status: &str, latest: Option<&AttemptFigures>) -> (&'static str, Option<String>) {
    let reason = latest.and_then(|a| a.reason.clone());
    let evidence = latest.and_then(|a| a.ended_by.clone());
    match status {
        "running" => ("running", None),
        // A trial its sweep stopped early ran as it should: the sweep working, not a failure.
        "finished" | "pruned" => ("finished", None),
        "killed" => ("killed", evidence),
        "preempted" => ("infra", Some(evidence.or(reason).unwrap_or_else(|| "preempted".into()))),
        "lost" => ("infra", Some(evidence.unwrap_or_else(|| "lost: its processes stopped sending heartbeats".into()))),
        _ => match latest.map(|a| a.status.as_str()) {
            Some("lost") => {
                ("infra", Some(reason.unwrap_or_else(|| "lost: its processes stopped sending heartbeats".into())))
            }
            Some("preempted") => ("infra", Some(evidence.or(reason).unwrap_or_else(|| "preempted".into()))),
            _ => match reason {
                Some(r) if killed_by_the_system(&r) => ("infra", Some(r)),
                r => ("code", r),
            },
        },
    }
}

/// A GPU model the job ran on (its latest attempt's first named one).
fn a_gpu_name(attempts: &[AttemptFigures]) -> Option<String> {
    attempts.iter().rev().find_map(|a| a.nodes.iter().find_map(|n| n.gpu_names.first().cloned()))
}

fn pricing_of(attempts: &[AttemptFigures]) -> &'static str {
    let spot = attempts.iter().filter(|a| a.spot == Some(true)).count();
    let said = attempts.iter().filter(|a| a.spot.is_some()).count();
    match (spot, said) {
        (_, 0) => "",
        (0, _) => "on_demand",
        (s, _) if s == attempts.len() => "spot",
        _ => "mixed",
    }
}

/// The series that say how busy each GPU was: its SM-active series where it has one of two
/// samples or more (GPM: the share of streaming multiprocessors at work), else its utilization
/// series (NVML: the share of time any kernel ran, 100 % for a GPU running one tiny kernel at a
/// time). Answers them and which source they are.
pub fn busy_series(keyed: Vec<(String, Samples)>) -> (Vec<Samples>, &'static str) {
    let mut by_gpu: std::collections::BTreeMap<String, (Option<Samples>, Option<Samples>)> = Default::default();
    for (key, samples) in keyed {
        let Some((gpu, kind)) = super::gpu_series(&key) else { continue };
        let slot = by_gpu.entry(gpu.to_owned()).or_default();
        match kind {
            super::GpuSeries::Util => slot.0 = Some(samples),
            super::GpuSeries::SmActive if samples.len() >= 2 => slot.1 = Some(samples),
            _ => {}
        }
    }
    let (mut series, mut sm, mut util) = (Vec::new(), 0, 0);
    for (_, (util_samples, sm_samples)) in by_gpu {
        match (sm_samples, util_samples) {
            (Some(s), _) => {
                sm += 1;
                series.push(s);
            }
            (None, Some(u)) if u.len() >= 2 => {
                util += 1;
                series.push(u);
            }
            _ => {}
        }
    }
    let source = match (sm, util) {
        (0, 0) => "",
        (_, 0) => "sm_active",
        (0, _) => "util",
        _ => "mixed",
    };
    (series, source)
}

/// The run's row of the report, from its GPU series as [`busy_series`] chose them.
pub fn usage(
    run: &RunBasics,
    job: Option<&(JobFigures, Vec<AttemptFigures>)>,
    (gpu, utilization_source): (&[Samples], &'static str),
) -> RunUsage {
    let spans = job.map(|(_, attempts)| spans(attempts));
    let activity = activity(gpu, spans.as_deref());
    let gpu_series = gpu.iter().filter(|s| s.len() >= 2).count() as i64;
    let latest = job.and_then(|(_, attempts)| attempts.last());
    let (outcome, failure) = outcome(&run.status, latest);
    let mut u = RunUsage {
        outcome,
        failure,
        gpus: 0,
        gpu_model: String::new(),
        provider: String::new(),
        pricing: "",
        gpu_hours: 0.0,
        spot_gpu_hours: 0.0,
        priced: false,
        cost_usd: 0.0,
        gpu_series,
        active_s: activity.above,
        active_usd: activity.above_usd,
        sampled_s: activity.covered_s,
        on_demand_usd: None,
        time_to_result_ms: None,
        utilization_source,
        energy_kwh: run.energy_j.map(|j| j / 3.6e6),
        useful_gpu_hours: None,
        queue_wait_ms: None,
        queue_source: None,
    };
    let submitted = job.and_then(|(_, attempts)| attempts.first()).and_then(|a| a.submitted_ms);
    let first_start = match job {
        Some((figures, attempts)) => {
            u.gpus = figures.gpus;
            u.gpu_hours = figures.gpu_hours;
            u.spot_gpu_hours = attempts.iter().filter(|a| a.spot == Some(true)).map(|a| a.gpu_hours).sum();
            u.priced = figures.unpriced_nodes == 0;
            u.cost_usd = figures.cost_usd;
            u.on_demand_usd = attempts.iter().map(|a| a.on_demand_usd).sum();
            let peak = a_gpu_name(attempts).and_then(|name| trainlog_schema::peak_flops::peak_dense_tflops(&name));
            u.useful_gpu_hours = run
                .flops
                .zip(peak)
                .filter(|(flops, _)| flops.is_finite() && *flops >= 0.0 && u.gpu_hours > 0.0)
                .map(|(flops, tflops)| flops / (tflops * 1e12) / 3600.0);
            u.pricing = pricing_of(attempts);
            if let Some(a) = latest {
                u.provider = a.cloud.clone().unwrap_or_default().to_ascii_lowercase();
                u.gpu_model = a.nodes.iter().find_map(|n| n.gpu_names.first().cloned()).unwrap_or_default();
            }
            // Samples cannot cover more than the GPUs were there, nor cost more than they did.
            let limit = u.gpu_hours * 3600.0;
            u.sampled_s = u.sampled_s.min(limit);
            for (seconds, usd) in u.active_s.iter_mut().zip(&mut u.active_usd) {
                *seconds = seconds.min(limit);
                *usd = usd.min(u.cost_usd);
            }
            attempts.first().map_or(run.start_ms, |a| a.start_ms)
        }
        None => {
            u.gpus = gpu_series;
            u.gpu_hours = activity.covered_s / 3600.0;
            if let Some(cost) = run.cost_series_usd.filter(|c| c.is_finite() && *c >= 0.0) {
                u.priced = true;
                u.cost_usd = cost;
            }
            run.trial_started_ms.unwrap_or(run.start_ms)
        }
    };
    if let Some(submitted) = submitted {
        u.queue_wait_ms = Some((first_start - submitted).max(0));
        u.queue_source = Some("launcher");
    } else if let Some(created) = run.trial_created_ms {
        u.queue_wait_ms = Some((first_start - created).max(0));
        u.queue_source = Some("sweep");
    }
    if run.status == "finished" {
        let asked = submitted.or(run.trial_created_ms).unwrap_or(first_start).min(first_start);
        u.time_to_result_ms = run.end_ms.map(|end| (end - asked).max(0));
    }
    u
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(threshold: u32) -> usize {
        THRESHOLDS.iter().position(|t| *t == threshold).unwrap()
    }

    #[test]
    fn a_sample_counts_for_at_most_one_interval_and_gaps_are_not_active() {
        // 10 s apart: 90 % for 3 samples, 5 % for 2, then the sampler stops for 10 minutes.
        let s: Samples = vec![(0, 90.0), (10_000, 90.0), (20_000, 90.0), (30_000, 5.0), (40_000, 5.0), (640_000, 50.0)];
        let a = activity(&[s], None);
        // Six samples of 10 s each: the 600-second gap is not measured.
        assert_eq!(a.covered_s, 60.0);
        assert_eq!(a.above[slot(10)], 30.0 + 10.0, "three busy samples, and the last at 50 %");
        assert_eq!(a.above[slot(0)], a.covered_s);
        assert_eq!(a.above[slot(50)], 30.0, "50 % is not above 50");
        assert_eq!(a.above[slot(95)], 0.0);
        assert_eq!(a.above_usd, [0.0; 20], "no job, no price");
        assert_eq!(activity(&[vec![(0, 99.0)]], None), Activity::default(), "one sample covers nothing");
    }

    #[test]
    fn samples_count_only_inside_their_attempt_at_its_own_price() {
        // An on-demand attempt from 0 to 60 s at $0.01 a GPU-second, a recovery gap, then a spot
        // attempt from 100 s at $0.004; samples every 10 s, busy throughout, one GPU.
        let spans = [
            Span { start_ms: 0, end_ms: 60_000, usd_per_gpu_s: Some(0.01) },
            Span { start_ms: 100_000, end_ms: i64::MAX, usd_per_gpu_s: Some(0.004) },
        ];
        // A sample at 55 s would stand for 10 s, but its attempt ends at 60 s; the one at 70 s
        // was taken while no GPU existed.
        let s: Samples = vec![
            (0, 90.0),
            (10_000, 90.0),
            (20_000, 90.0),
            (30_000, 90.0),
            (40_000, 90.0),
            (50_000, 90.0),
            (55_000, 90.0),
            (70_000, 90.0),
            (100_000, 90.0),
            (110_000, 90.0),
            (120_000, 90.0),
        ];
        let a = activity(&[s], Some(&spans));
        assert_eq!(a.above[slot(10)], 55.0 + 5.0 + 30.0);
        assert!((a.above_usd[slot(10)] - (60.0 * 0.01 + 30.0 * 0.004)).abs() < 1e-12, "{:?}", a.above_usd);
        assert_eq!(a.covered_s, 90.0);
    }

    #[test]
    fn each_gpu_is_measured_by_sm_active_where_it_has_it() {
        let busy: Samples = vec![(0, 100.0), (10_000, 100.0)];
        let idle: Samples = vec![(0, 2.0), (10_000, 2.0)];
        let keyed = |pairs: &[(&str, &Samples)]| pairs.iter().map(|(k, s)| ((*k).to_owned(), (*s).clone())).collect();
        let (series, source) = busy_series(keyed(&[
            ("sys/gpu.0.util", &busy),
            ("sys/gpu.0.sm_active", &idle),
            ("sys/gpu.0.power_w", &busy),
        ]));
        assert_eq!((series, source), (vec![idle.clone()], "sm_active"), "SM active wins over util");
        let (series, source) = busy_series(keyed(&[
            ("sys/node/0/gpu.0.util", &busy),
            ("sys/node/0/gpu.0.sm_active", &idle),
            ("sys/node/1/gpu.0.util", &busy),
        ]));
        assert_eq!((series.len(), source), (2, "mixed"));
        let (series, source) =
            busy_series(keyed(&[("sys/gpu.0.util", &busy), ("sys/gpu.0.sm_active", &vec![(0, 2.0)])]));
        assert_eq!((series, source), (vec![busy.clone()], "util"), "one SM-active sample measures nothing");
        assert_eq!(busy_series(Vec::new()), (Vec::new(), ""));
    }

    fn blank_attempt() -> AttemptFigures {
        AttemptFigures {
            number: 1,
            status: "running".into(),
            start_ms: 0,
            end_ms: None,
            launcher: "none".into(),
            job_id: None,
            world_size: 1,
            node_count: 1,
            ranks: 1,
            cloud: None,
            region: None,
            zone: None,
            instance_type: None,
            cluster: None,
            spot: None,
            submitted_ms: None,
            ended_by: None,
            checkpoint_at_end: None,
            reason: None,
            last_lines: None,
            gpus: 0,
            usd_per_hour: None,
            price_sources: vec![],
            cost_usd: 0.0,
            on_demand_usd: Some(0.0),
            unpriced_nodes: 0,
            gpu_hours: 0.0,
            first_step: None,
            last_step: None,
            last_checkpoint_step: None,
            last_checkpoint_ms: None,
            steps_replayed: 0,
            lost_usd: 0.0,
            lost_gpu_hours: 0.0,
            lost_steps: 0,
            nodes: vec![],
            processes: vec![],
        }
    }

    #[test]
    fn failures_are_told_apart() {
        assert_eq!(outcome("preempted", None).0, "infra");
        assert_eq!(outcome("failed", None).0, "code");
        assert_eq!(outcome("killed", None).0, "killed");
        assert_eq!(outcome("lost", None).0, "infra");
        assert_eq!(outcome("pruned", None).0, "finished");
        let mut a = blank_attempt();
        a.status = "lost".into();
        assert_eq!(outcome("failed", Some(&a)).0, "infra");
        a.status = "failed".into();
        a.reason = Some("rank 0 failed: ValueError: bad".into());
        assert_eq!(outcome("failed", Some(&a)), ("code", a.reason.clone()));
        a.reason = Some("rank 3 failed: killed by SIGKILL".into());
        assert_eq!(outcome("failed", Some(&a)).0, "infra");
    }

    #[test]
    fn a_run_without_a_job_is_measured_by_its_series() {
        let run = RunBasics {
            status: "finished".into(),
            start_ms: 1_000,
            end_ms: Some(601_000),
            energy_j: Some(7.2e6),
            flops: Some(1e15),
            cost_series_usd: Some(2.5),
            trial_created_ms: Some(400),
            trial_started_ms: Some(1_000),
        };
        let s: Samples = (0..10).map(|i| (i * 60_000, if i < 5 { 80.0 } else { 0.0 })).collect();
        let u = usage(&run, None, (&[s.clone(), s], "util"));
        assert_eq!(u.gpus, 2);
        assert!((u.gpu_hours - 2.0 * 600.0 / 3600.0).abs() < 1e-12);
        assert_eq!(u.active_s[slot(10)], 2.0 * 300.0);
        assert!(u.priced);
        assert_eq!(u.cost_usd, 2.5);
        assert_eq!((u.queue_wait_ms, u.queue_source), (Some(600), Some("sweep")));
        assert_eq!(u.outcome, "finished");
        assert_eq!(u.time_to_result_ms, Some(601_000 - 400), "from the trial's creation");
        assert_eq!(u.on_demand_usd, None, "no job: no on-demand price");
        assert_eq!((u.energy_kwh, u.utilization_source), (Some(2.0), "util"));
        assert_eq!(u.useful_gpu_hours, None, "no job: no GPU model to divide by");
    }
}
