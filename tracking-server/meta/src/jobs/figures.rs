//! What a run's attempts cost and lost, computed from their rows: pure arithmetic, no SQL.

/// One node of an attempt, as loaded, with the span its processes covered.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeFigures {
    pub node_rank: i64,
    pub host: String,
    pub gpus: i64,
    pub gpu_names: Vec<String>,
    pub driver: Option<String>,
    /// The node's price per hour (all its GPUs); None when it was not priced.
    pub usd_per_hour: Option<f64>,
    /// Its on-demand price per hour: `usd_per_hour` on demand, the catalog's on-demand price of
    /// its instance on spot; None where nothing says it.
    pub on_demand_usd_per_hour: Option<f64>,
    pub price_source: Option<String>,
    /// Where `gpus` came from (the launcher's allocation, NVML), and any disagreement.
    pub gpus_source: Option<String>,
    /// From its first process's start to its last process's end (or last sign of life).
    pub start_ms: i64,
    pub end_ms: i64,
    pub processes: i64,
    /// `usd_per_hour` × the span; None when not priced.
    pub cost_usd: Option<f64>,
    pub gpu_hours: f64,
}

/// One process of an attempt: its rank, where it ran, how it ended, and the job context it
/// detected (JSON, with where each value came from).
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessFigures {
    pub rank: i64,
    pub local_rank: i64,
    pub node_rank: i64,
    pub host: String,
    pub pid: Option<i64>,
    pub status: String,
    pub start_ms: i64,
    pub seen_ms: i64,
    pub end_ms: Option<i64>,
    pub reason: Option<String>,
    pub context: String,
}

/// One attempt with its figures.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptFigures {
    pub number: i64,
    pub status: String,
    pub start_ms: i64,
    /// None while it runs.
    pub end_ms: Option<i64>,
    pub launcher: String,
    pub job_id: Option<String>,
    pub world_size: i64,
    pub node_count: i64,
    /// Processes that joined it.
    pub ranks: i64,
    pub cloud: Option<String>,
    pub region: Option<String>,
    pub zone: Option<String>,
    pub instance_type: Option<String>,
    pub cluster: Option<String>,
    pub spot: Option<bool>,
    /// When the launcher says the job was submitted (a Slurm job's submit time).
    pub submitted_ms: Option<i64>,
    /// What decided how it ended, in words (None while it runs).
    pub ended_by: Option<String>,
    /// Its last checkpoint as it ended, kept then (None: not kept, for an attempt that runs or
    /// ended before it was; Some(None): it had none).
    pub checkpoint_at_end: Option<Option<CheckpointMark>>,
    /// Which rank failed first and why, when one did.
    pub reason: Option<String>,
    /// The last lines the failed rank printed, when it sent them.
    pub last_lines: Option<String>,
    pub gpus: i64,
    /// Sum of its nodes' prices per hour (the priced ones).
    pub usd_per_hour: Option<f64>,
    pub price_sources: Vec<String>,
    pub cost_usd: f64,
    /// What its nodes would have cost at on-demand prices; None where a node's is not known.
    pub on_demand_usd: Option<f64>,
    /// Nodes with no price: their cost is not in `cost_usd`.
    pub unpriced_nodes: i64,
    pub gpu_hours: f64,
    pub first_step: Option<i64>,
    pub last_step: Option<i64>,
    pub last_checkpoint_step: Option<i64>,
    pub last_checkpoint_ms: Option<i64>,
    /// Steps of earlier attempts this one logged again (it restored an older checkpoint).
    pub steps_replayed: i64,
    /// For a preempted or lost attempt: the work after its last checkpoint (all of it when it
    /// saved none), which the next attempt redoes.
    pub lost_usd: f64,
    pub lost_gpu_hours: f64,
    pub lost_steps: i64,
    pub nodes: Vec<NodeFigures>,
    pub processes: Vec<ProcessFigures>,
}

/// The whole job: its attempts and their totals.
#[derive(Debug, Clone, PartialEq)]
pub struct JobFigures {
    pub launcher: String,
    pub job_id: Option<String>,
    pub world_size: i64,
    pub node_count: i64,
    pub attempts: i64,
    /// GPUs of the latest attempt.
    pub gpus: i64,
    pub cost_usd: f64,
    /// Price per hour of the running attempt's nodes; 0 when none runs.
    pub usd_per_hour: f64,
    pub unpriced_nodes: i64,
    pub gpu_hours: f64,
    pub lost_usd: f64,
    pub lost_gpu_hours: f64,
    pub steps_replayed: i64,
    /// When these figures were computed (the cost of a running attempt grows with it).
    pub at_ms: i64,
}

/// A checkpoint of the run, as the lost-work figures need it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CheckpointMark {
    pub step: i64,
    pub created_ms: i64,
}

/// Hours between two instants in ms (0 when the end is not after the start).
pub fn hours(start_ms: i64, end_ms: i64) -> f64 {
    (end_ms - start_ms).max(0) as f64 / 3_600_000.0
}

/// Fills an attempt's checkpoint, replay and lost-work figures, given the highest step earlier
/// attempts reached and the run's checkpoints.
pub fn settle_attempt(a: &mut AttemptFigures, earlier_last_step: Option<i64>, checkpoints: &[CheckpointMark]) {
    let end = a.end_ms.unwrap_or(i64::MAX);
    let last = match &a.checkpoint_at_end {
        Some(kept) => kept.as_ref(),
        None => checkpoints
            .iter()
            .filter(|c| c.created_ms >= a.start_ms && c.created_ms <= end)
            .max_by_key(|c| (c.created_ms, c.step)),
    };
    a.last_checkpoint_step = last.map(|c| c.step);
    a.last_checkpoint_ms = last.map(|c| c.created_ms);
    a.steps_replayed = match (earlier_last_step, a.first_step) {
        (Some(before), Some(first)) if first <= before => {
            // Steps first..=before were logged before; this attempt logged them again as far as it went.
            a.last_step.unwrap_or(first).min(before) - first + 1
        }
        _ => 0,
    };
    if matches!(a.status.as_str(), "preempted" | "lost") {
        let from = a.last_checkpoint_ms.unwrap_or(a.start_ms);
        for node in &a.nodes {
            let lost_hours = hours(node.start_ms.max(from), node.end_ms);
            a.lost_gpu_hours += lost_hours * node.gpus as f64;
            a.lost_usd += lost_hours * node.usd_per_hour.unwrap_or(0.0);
        }
        a.lost_steps = match (a.last_step, a.last_checkpoint_step, a.first_step) {
            (Some(last), Some(saved), _) => (last - saved).max(0),
            (Some(last), None, Some(first)) => last - first + 1,
            _ => 0,
        };
    }
}

/// Totals over attempts (given oldest first, each settled).
pub fn job_totals(attempts: &[AttemptFigures], at_ms: i64) -> Option<JobFigures> {
    let latest = attempts.last()?;
    let running = attempts.iter().filter(|a| a.status == "running");
    Some(JobFigures {
        launcher: latest.launcher.clone(),
        job_id: latest.job_id.clone(),
        world_size: latest.world_size,
        node_count: latest.node_count,
        attempts: attempts.len() as i64,
        gpus: latest.gpus,
        cost_usd: attempts.iter().map(|a| a.cost_usd).sum(),
        // `+ 0.0`: a sum of no f64 is -0.0, which JSON would show for a job that ended.
        usd_per_hour: running.map(|a| a.usd_per_hour.unwrap_or(0.0)).sum::<f64>() + 0.0,
        unpriced_nodes: attempts.iter().map(|a| a.unpriced_nodes).sum(),
        gpu_hours: attempts.iter().map(|a| a.gpu_hours).sum(),
        lost_usd: attempts.iter().map(|a| a.lost_usd).sum(),
        lost_gpu_hours: attempts.iter().map(|a| a.lost_gpu_hours).sum(),
        steps_replayed: attempts.iter().map(|a| a.steps_replayed).sum(),
        at_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(rank: i64, gpus: i64, price: Option<f64>, start_ms: i64, end_ms: i64) -> NodeFigures {
        let hours = hours(start_ms, end_ms);
        NodeFigures {
            node_rank: rank,
            host: format!("h{rank}"),
            gpus,
            gpu_names: vec![],
            driver: None,
            usd_per_hour: price,
            on_demand_usd_per_hour: price,
            price_source: None,
            gpus_source: None,
            start_ms,
            end_ms,
            processes: 1,
            cost_usd: price.map(|p| p * hours),
            gpu_hours: hours * gpus as f64,
        }
    }

    fn attempt(number: i64, status: &str, start_ms: i64, end_ms: i64, steps: (i64, i64)) -> AttemptFigures {
        let nodes = vec![node(0, 4, Some(8.0), start_ms, end_ms), node(1, 4, Some(8.0), start_ms, end_ms)];
        AttemptFigures {
            number,
            status: status.into(),
            start_ms,
            end_ms: Some(end_ms),
            launcher: "skypilot".into(),
            job_id: Some("j".into()),
            world_size: 8,
            node_count: 2,
            ranks: 8,
            cloud: None,
            region: None,
            zone: None,
            instance_type: None,
            cluster: None,
            spot: Some(true),
            submitted_ms: None,
            ended_by: None,
            checkpoint_at_end: None,
            reason: None,
            last_lines: None,
            gpus: 8,
            usd_per_hour: Some(16.0),
            price_sources: vec![],
            cost_usd: nodes.iter().filter_map(|n| n.cost_usd).sum(),
            on_demand_usd: None,
            unpriced_nodes: 0,
            gpu_hours: nodes.iter().map(|n| n.gpu_hours).sum(),
            first_step: Some(steps.0),
            last_step: Some(steps.1),
            last_checkpoint_step: None,
            last_checkpoint_ms: None,
            steps_replayed: 0,
            lost_usd: 0.0,
            lost_gpu_hours: 0.0,
            lost_steps: 0,
            nodes,
            processes: vec![],
        }
    }

    #[test]
    fn a_preempted_attempt_loses_the_work_after_its_last_checkpoint() {
        let hour = 3_600_000;
        let mut a = attempt(1, "preempted", 0, 2 * hour, (0, 199));
        let checkpoints = [
            CheckpointMark { step: 100, created_ms: hour / 2 },
            CheckpointMark { step: 150, created_ms: hour + hour / 2 },
            // Another attempt's.
            CheckpointMark { step: 10, created_ms: 3 * hour },
        ];
        settle_attempt(&mut a, None, &checkpoints);
        assert_eq!(a.last_checkpoint_step, Some(150));
        assert_eq!(a.lost_steps, 49);
        assert!((a.lost_gpu_hours - 8.0 * 0.5).abs() < 1e-9, "{}", a.lost_gpu_hours);
        assert!((a.lost_usd - 16.0 * 0.5).abs() < 1e-9, "{}", a.lost_usd);
        assert!((a.cost_usd - 32.0).abs() < 1e-9);
    }

    #[test]
    fn a_lost_attempt_without_a_checkpoint_loses_all_of_it_and_a_finished_one_nothing() {
        let hour = 3_600_000;
        let mut lost = attempt(2, "lost", hour, 2 * hour, (150, 180));
        settle_attempt(&mut lost, Some(199), &[]);
        assert_eq!(lost.lost_steps, 31);
        assert!((lost.lost_usd - 16.0).abs() < 1e-9);
        assert_eq!(lost.steps_replayed, 31, "it logged 150..=180 again");
        let mut done = attempt(3, "finished", 2 * hour, 3 * hour, (151, 400));
        settle_attempt(&mut done, Some(199), &[]);
        assert_eq!((done.lost_usd, done.lost_steps), (0.0, 0));
        assert_eq!(done.steps_replayed, 49, "151..=199");
        let totals = job_totals(&[lost, done], 0).expect("attempts");
        assert_eq!(totals.attempts, 2);
        assert!((totals.cost_usd - 32.0).abs() < 1e-9);
        assert_eq!(totals.steps_replayed, 31 + 49);
        assert_eq!(totals.usd_per_hour, 0.0, "nothing runs");
        assert!(totals.usd_per_hour.is_sign_positive(), "0, not -0.0, once the job ended");
    }
}
