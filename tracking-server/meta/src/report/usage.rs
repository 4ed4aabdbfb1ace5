//! What one run contributes to the training report, computed from its job, its GPU utilization
//! samples and its sweep trial: pure arithmetic, no SQL.

use crate::jobs::{AttemptFigures, JobFigures};

/// The utilization thresholds (percent) a report may count GPU-seconds as active above.
pub const THRESHOLDS: [u32; 20] = [0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60, 65, 70, 75, 80, 85, 90, 95];

/// The threshold a report uses unless asked for another.
pub const DEFAULT_THRESHOLD: u32 = 10;

/// A sample stands for the time to the next one, but never more than this many times its series'
/// median gap: a longer gap means the sampler was not running, and that time is not active.
const GAP_CAP: i64 = 3;

/// One GPU's utilization samples (ms since the epoch, percent), in time order.
pub type Samples = Vec<(i64, f64)>;

/// GPU-seconds above each threshold of [`THRESHOLDS`], and the seconds the samples cover.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Activity {
    pub above: [f64; 20],
    pub covered_s: f64,
}

/// Counts each sample for the time to the next sample of its GPU (at most [`GAP_CAP`] times the
/// series' median gap; the last sample for one median gap). A series of one sample covers nothing.
pub fn activity(series: &[Samples]) -> Activity {
    let mut out = Activity::default();
    for samples in series {
        if samples.len() < 2 {
            continue;
        }
        let mut gaps: Vec<i64> = samples.windows(2).map(|w| (w[1].0 - w[0].0).max(0)).collect();
        gaps.sort_unstable();
        let median = gaps[gaps.len() / 2];
        for (i, (t, value)) in samples.iter().enumerate() {
            let gap = samples.get(i + 1).map_or(median, |next| (next.0 - t).max(0)).min(median * GAP_CAP);
            let seconds = gap as f64 / 1000.0;
            out.covered_s += seconds;
            for (slot, threshold) in THRESHOLDS.iter().enumerate() {
                if *value > f64::from(*threshold) {
                    out.above[slot] += seconds;
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

/// The run's row of the report.
pub fn usage(run: &RunBasics, job: Option<&(JobFigures, Vec<AttemptFigures>)>, gpu: &[Samples]) -> RunUsage {
    let activity = activity(gpu);
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
            u.pricing = pricing_of(attempts);
            if let Some(a) = latest {
                u.provider = a.cloud.clone().unwrap_or_default().to_ascii_lowercase();
                u.gpu_model = a.nodes.iter().find_map(|n| n.gpu_names.first().cloned()).unwrap_or_default();
            }
            // Samples cannot be active for longer than the GPUs were there.
            let limit = u.gpu_hours * 3600.0;
            for seconds in &mut u.active_s {
                *seconds = seconds.min(limit);
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
    u
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(threshold: u32) -> usize {
        THRESHOLDS.iter().position(|t| *t == threshold).unwrap()
    }

    #[test]
    fn samples_count_until_the_next_one_and_gaps_are_capped() {
        // 10 s apart: 90 % for 3 samples, 5 % for 2, then the sampler stops for 10 minutes.
        let s: Samples = vec![(0, 90.0), (10_000, 90.0), (20_000, 90.0), (30_000, 5.0), (40_000, 5.0), (640_000, 50.0)];
        let a = activity(&[s]);
        // 5 gaps of 10 s (the long one capped at 30 s) and the last sample's 10 s.
        assert_eq!(a.covered_s, 10.0 * 4.0 + 30.0 + 10.0);
        assert_eq!(a.above[slot(10)], 30.0 + 10.0, "three busy samples, and the last at 50 %");
        assert_eq!(a.above[slot(0)], a.covered_s);
        assert_eq!(a.above[slot(50)], 30.0, "50 % is not above 50");
        assert_eq!(a.above[slot(95)], 0.0);
        assert_eq!(activity(&[vec![(0, 99.0)]]), Activity::default(), "one sample covers nothing");
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
            reason: None,
            last_lines: None,
            gpus: 0,
            usd_per_hour: None,
            price_sources: vec![],
            cost_usd: 0.0,
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
            cost_series_usd: Some(2.5),
            trial_created_ms: Some(400),
            trial_started_ms: Some(1_000),
        };
        let s: Samples = (0..10).map(|i| (i * 60_000, if i < 5 { 80.0 } else { 0.0 })).collect();
        let u = usage(&run, None, &[s.clone(), s]);
        assert_eq!(u.gpus, 2);
        assert!((u.gpu_hours - 2.0 * 600.0 / 3600.0).abs() < 1e-12);
        assert_eq!(u.active_s[slot(10)], 2.0 * 300.0);
        assert!(u.priced);
        assert_eq!(u.cost_usd, 2.5);
        assert_eq!((u.queue_wait_ms, u.queue_source), (Some(600), Some("sweep")));
        assert_eq!(u.outcome, "finished");
    }
}
