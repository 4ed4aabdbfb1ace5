//! This process as one rank of its run's job: the run id a job derives, what the process says
//! when it joins, its heartbeats, the steps it logged, and the job's cost as the server last
//! computed it (which rank 0's cost series continues).

use crate::collect::job::JobContext;
use crate::http::Http;
use crate::sender::Shared;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often a process tells the server it is alive, unless `TRAINLOG_HEARTBEAT_SECONDS` says.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(30);

/// The run id every process of a job derives from the job, the same on every node and after
/// every restart: `job-` and 24 hex digits of a SHA-256 over the project and the job's key.
pub fn run_id_for_job(project: &str, job_key: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, format!("{project}\n{job_key}").as_bytes());
    let hex: String = digest.as_ref().iter().take(12).map(|b| format!("{b:02x}")).collect();
    format!("job-{hex}")
}

/// Sets the fields `overrides` names (`job_id`, `rank`, `local_rank`, `world_size`,
/// `node_rank`, `node_count`, `restart`, `cloud`, `region`, `zone`, `instance_type`, `cluster`,
/// `spot`, `gpus_per_node`) over what the environment said; each is recorded as given by the
/// caller. Refuses an unknown field or a value of the wrong type.
pub fn apply_overrides(job: &mut JobContext, overrides: &Value) -> crate::Result<()> {
    let Some(map) = overrides.as_object() else {
        return Err(crate::Error::Invalid("job must be a dict of the job's fields".into()));
    };
    let bad = |key: &str, what: &str| crate::Error::Invalid(format!("job[{key:?}] must be {what}"));
    for (key, value) in map {
        let count = || value.as_u64().and_then(|v| u32::try_from(v).ok()).ok_or_else(|| bad(key, "a whole number"));
        let text = || value.as_str().map(str::to_owned).or_else(|| value.as_i64().map(|v| v.to_string()));
        let text = || text().ok_or_else(|| bad(key, "a string"));
        match key.as_str() {
            "job_id" => job.job_id = Some(text()?),
            "rank" => job.rank = count()?,
            "local_rank" => job.local_rank = count()?,
            "world_size" => job.world_size = count()?,
            "node_rank" => job.node_rank = count()?,
            "node_count" => job.node_count = count()?,
            "restart" => job.restart = Some(text()?),
            "cloud" => job.cloud = Some(text()?),
            "region" => job.region = Some(text()?),
            "zone" => job.zone = Some(text()?),
            "instance_type" => job.instance_type = Some(text()?),
            "cluster" => job.cluster = Some(text()?),
            "spot" => job.spot = Some(value.as_bool().ok_or_else(|| bad(key, "true or false"))?),
            "gpus_per_node" => job.gpus_per_node = Some(count()?),
            other => return Err(crate::Error::Invalid(format!("job has no field {other:?}"))),
        }
        job.detected_from.insert(key.clone(), "argument".into());
    }
    if job.launcher == "none" && job.job_id.is_some() {
        job.launcher = "trainlog".into();
    }
    if job.world_size == 0 || job.rank >= job.world_size {
        return Err(crate::Error::Invalid(format!(
            "job: rank {} is not below world_size {}",
            job.rank, job.world_size
        )));
    }
    if job.node_count == 0 || job.node_rank >= job.node_count {
        return Err(crate::Error::Invalid(format!(
            "job: node_rank {} is not below node_count {}",
            job.node_rank, job.node_count
        )));
    }
    Ok(())
}

/// The job's cost as the server computed it at `at_ms`, and the rate it grows at since.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostBase {
    pub cost_usd: f64,
    pub usd_per_hour: f64,
    pub lost_usd: f64,
    pub at_ms: i64,
}

impl CostBase {
    pub fn from_job(job: &Value) -> Option<Self> {
        Some(CostBase {
            cost_usd: job["cost_usd"].as_f64()?,
            usd_per_hour: job["usd_per_hour"].as_f64().unwrap_or(0.0),
            lost_usd: job["lost_usd"].as_f64().unwrap_or(0.0),
            at_ms: job["at_ms"].as_i64()?,
        })
    }

    /// The cost at `now_ms`, continuing at the rate the server gave.
    pub fn cost_at(&self, now_ms: i64) -> f64 {
        self.cost_usd + self.usd_per_hour * (now_ms - self.at_ms).max(0) as f64 / 3_600_000.0
    }
}

/// A node as its first process describes it when it joins.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeDescription {
    pub gpus: u32,
    pub gpu_names: Vec<String>,
    /// Where `gpus` came from (the launcher's allocation, NVML), and any disagreement.
    pub gpus_source: String,
    pub driver: Option<String>,
    pub price: Option<(f64, String)>,
}

/// This process's place in its job, shared by the run, the sampler and the heartbeat thread.
#[derive(Debug)]
pub struct Membership {
    pub job: JobContext,
    /// Whether this process's `log` records anything: rank 0, or every rank with per-rank series.
    pub logs: bool,
    /// Keys of this rank's own series start with `rank/{r}/` (with per-rank series).
    pub rank_prefix: Option<String>,
    /// The attempt the server put this process in; 0 until it answered.
    attempt: AtomicI64,
    first_step: AtomicI64,
    last_step: AtomicI64,
    cost: Mutex<Option<CostBase>>,
    /// A stop someone asked of the run (who, why), as a heartbeat's answer said.
    stop: Mutex<Option<(String, String)>>,
    /// When Slurm says the job was submitted (rank 0 of a Slurm job asks it).
    submitted_ms: Option<i64>,
}

impl Membership {
    pub fn new(job: JobContext, rank_metrics: bool) -> Self {
        let logs = job.rank == 0 || rank_metrics;
        let rank_prefix = rank_metrics.then(|| format!("rank/{}/", job.rank));
        // Slurm's own job id (not the array or cluster form the job id may take).
        let submitted_ms = match (job.rank, std::env::var("SLURM_JOB_ID")) {
            (0, Ok(id)) if !id.trim().is_empty() => crate::slurm::submit_time_ms(id.trim()),
            _ => None,
        };
        Membership {
            job,
            logs,
            rank_prefix,
            attempt: AtomicI64::new(0),
            first_step: AtomicI64::new(i64::MAX),
            last_step: AtomicI64::new(i64::MIN),
            cost: Mutex::new(None),
            stop: Mutex::new(None),
            submitted_ms,
        }
    }

    /// The system series' prefix: `sys/node/{n}/` in a job of several nodes, else `sys/`.
    pub fn system_prefix(&self) -> String {
        if self.job.node_count > 1 {
            format!("sys/node/{}/", self.job.node_rank)
        } else {
            trainlog_schema::SYSTEM_PREFIX.to_owned()
        }
    }

    /// Notes a step this process logged.
    pub fn saw_step(&self, step: i64) {
        self.first_step.fetch_min(step, Ordering::Relaxed);
        self.last_step.fetch_max(step, Ordering::Relaxed);
    }

    /// The highest step this process logged, if any.
    pub fn last_step(&self) -> Option<i64> {
        self.steps().1
    }

    pub fn attempt(&self) -> i64 {
        self.attempt.load(Ordering::Relaxed)
    }

    fn steps(&self) -> (Option<i64>, Option<i64>) {
        let first = self.first_step.load(Ordering::Relaxed);
        let last = self.last_step.load(Ordering::Relaxed);
        ((first != i64::MAX).then_some(first), (last != i64::MIN).then_some(last))
    }

    /// The server's latest cost figures, if it answered any.
    pub fn cost_base(&self) -> Option<CostBase> {
        *self.cost.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes in the run's creation answer (or a heartbeat's): the attempt and the job's cost.
    pub fn heard(&self, answer: &Value) {
        // A heartbeat's `attempt`: the server may have moved this process to a new attempt
        // (it had ended the one this process was in `lost`, and the job goes on).
        if let Some(attempt) = answer["joined"]["attempt"].as_i64().or_else(|| answer["attempt"].as_i64()) {
            self.attempt.store(attempt, Ordering::Relaxed);
        }
        if let Some(base) = CostBase::from_job(&answer["job"]) {
            *self.cost.lock().unwrap_or_else(|p| p.into_inner()) = Some(base);
        }
        if answer["stop"].is_object() {
            let text = |key: &str| answer["stop"][key].as_str().unwrap_or_default().to_owned();
            *self.stop.lock().unwrap_or_else(|p| p.into_inner()) = Some((text("by"), text("reason")));
        }
    }

    /// Who asked the run to stop and why, once a heartbeat's answer said so.
    pub fn stop_requested(&self) -> Option<(String, String)> {
        self.stop.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Takes the server's answer to this process's join when the join went through the spool.
    pub fn hear_spooled_join(&self, shared: &Shared) {
        if self.attempt() == 0 {
            let answer = shared.joined.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(answer) = answer {
                self.heard(&answer);
            }
        }
    }

    /// The `process` object of the run's creation.
    pub fn join_body(&self, node: Option<&NodeDescription>, started_ms: i64) -> Value {
        let j = &self.job;
        let mut body = json!({
            "rank": j.rank,
            "local_rank": j.local_rank,
            "world_size": j.world_size,
            "node_rank": j.node_rank,
            "node_count": j.node_count,
            "host": crate::run::hostname(),
            "pid": std::process::id(),
            "launcher": j.launcher,
            "job_id": j.job_id,
            "restart": j.restart,
            "cloud": j.cloud,
            "region": j.region,
            "zone": j.zone,
            "instance_type": j.instance_type,
            "cluster": j.cluster,
            "spot": j.spot,
            "started_ms": started_ms,
            "context": j.to_json(),
        });
        if let Some(submitted) = self.submitted_ms {
            body["submitted_ms"] = json!(submitted);
        }
        if let Some(node) = node {
            body["node"] = json!({
                "gpus": node.gpus,
                "gpu_names": node.gpu_names,
                "gpus_source": node.gpus_source,
                "driver": node.driver,
                "usd_per_hour": node.price.as_ref().map(|p| p.0),
                "price_source": node.price.as_ref().map(|p| p.1.clone()),
            });
        }
        body
    }

    /// The `process` object of a heartbeat or of the finish (with why it ended).
    pub fn report_body(&self, reason: Option<&str>, last_lines: Option<&str>) -> Value {
        let (first_step, last_step) = self.steps();
        let mut body = json!({"rank": self.job.rank, "first_step": first_step, "last_step": last_step});
        let attempt = self.attempt();
        if attempt > 0 {
            body["attempt"] = json!(attempt);
        }
        if let Some(reason) = reason {
            body["reason"] = json!(reason);
        }
        if let Some(lines) = last_lines {
            body["last_lines"] = json!(lines);
        }
        body
    }
}

/// Sends heartbeats until the run closes. A heartbeat that fails is not retried: the next one
/// comes an interval later, and a server that hears none for long counts the process gone.
pub fn start_heartbeats(membership: Arc<Membership>, shared: Arc<Shared>, http: Http, run_id: &str) {
    let every = std::env::var("TRAINLOG_HEARTBEAT_SECONDS")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(HEARTBEAT_EVERY, Duration::from_secs_f64);
    let path = format!("/runs/{}/heartbeat", crate::api::encode(run_id));
    let spawned = std::thread::Builder::new().name("trainlog-heartbeat".into()).spawn(move || {
        let tick = Duration::from_millis(100).min(every);
        let mut waited = Duration::ZERO;
        while !shared.is_closed() {
            std::thread::sleep(tick);
            waited += tick;
            if waited < every {
                continue;
            }
            waited = Duration::ZERO;
            membership.hear_spooled_join(&shared);
            if membership.attempt() == 0 {
                continue;
            }
            if let Ok(answer) = http.post(&path, &membership.report_body(None, None)) {
                membership.heard(&answer);
            }
        }
    });
    if let Err(e) = spawned {
        eprintln!("trainlog: no heartbeats for run {run_id}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_process_of_a_job_derives_the_same_run_id_and_other_jobs_another() {
        let a = run_id_for_job("resnet", "slurm:c1:1234");
        assert_eq!(a, run_id_for_job("resnet", "slurm:c1:1234"));
        assert_ne!(a, run_id_for_job("resnet", "slurm:c1:1235"));
        assert_ne!(a, run_id_for_job("other", "slurm:c1:1234"));
        assert!(a.starts_with("job-") && a.len() == 28, "{a}");
        trainlog_schema::RunId::parse("id", &a).expect("a valid run id");
    }

    #[test]
    fn the_cost_continues_from_the_servers_figure_at_its_rate() {
        let base = CostBase { cost_usd: 10.0, usd_per_hour: 36.0, lost_usd: 1.0, at_ms: 1_000 };
        assert_eq!(base.cost_at(1_000), 10.0);
        assert!((base.cost_at(1_000 + 100_000) - 11.0).abs() < 1e-9);
        assert_eq!(base.cost_at(0), 10.0, "never less than the server's figure");
    }

    #[test]
    fn only_rank_zero_logs_unless_every_rank_keeps_its_own_series() {
        let job = |rank| JobContext { rank, world_size: 4, node_count: 2, node_rank: rank / 2, ..JobContext::single() };
        assert!(Membership::new(job(0), false).logs);
        assert!(!Membership::new(job(3), false).logs);
        let per_rank = Membership::new(job(3), true);
        assert!(per_rank.logs);
        assert_eq!(per_rank.rank_prefix.as_deref(), Some("rank/3/"));
        assert_eq!(per_rank.system_prefix(), "sys/node/1/");
        assert_eq!(Membership::new(JobContext::single(), false).system_prefix(), "sys/");
    }
}
