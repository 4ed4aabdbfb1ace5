//! The job this process belongs to, read from the launcher's environment: which job, which
//! rank of how many, on which node of how many, which restart, and where it runs.

use serde_json::{json, Value};
use std::collections::BTreeMap;

/// What the launcher's environment says about this process's job. A process started by no
/// launcher is a job of one: rank 0 of 1 on node 0 of 1, with no job id.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JobContext {
    /// Which launcher or scheduler was recognized: `torchrun`, `slurm`, `mpi`, `skypilot`,
    /// `kubernetes`, `sagemaker`, `vertex`, `trainlog` (only TRAINLOG_* variables), or `none`.
    /// When several are present (torchrun inside Slurm, inside SkyPilot), the one that gave
    /// the job id.
    pub launcher: String,
    /// The job's id as the launcher names it, the same for every process of the job and stable
    /// across its restarts and recoveries; None outside a job.
    pub job_id: Option<String>,
    /// This process's global rank, 0 ≤ rank < world_size.
    pub rank: u32,
    pub local_rank: u32,
    pub world_size: u32,
    /// Processes on this node, when the launcher says.
    pub local_world_size: Option<u32>,
    pub node_rank: u32,
    pub node_count: u32,
    /// The launcher's own count of restarts of the job (TORCHELASTIC_RESTART_COUNT,
    /// SLURM_RESTART_COUNT, ...), as text; None when it gives none.
    pub restart: Option<String>,
    /// Cloud provider, region, zone, instance type and cluster name when the launcher says
    /// (SkyPilot's cluster info, SageMaker, Vertex).
    pub cloud: Option<String>,
    pub region: Option<String>,
    pub zone: Option<String>,
    pub instance_type: Option<String>,
    pub cluster: Option<String>,
    /// Spot (preemptible) capacity, when known.
    pub spot: Option<bool>,
    /// GPUs on this node, when the launcher says (SKYPILOT_NUM_GPUS_PER_NODE, SLURM_GPUS_ON_NODE, ...).
    pub gpus_per_node: Option<u32>,
    /// For each field set above, the variable it was read from (`"rank": "RANK"`).
    pub detected_from: BTreeMap<String, String>,
    /// What looked wrong or ambiguous (a variable that did not parse, a torchrun job without a
    /// rendezvous id, ...).
    pub warnings: Vec<String>,
}

impl JobContext {
    /// A process on its own: rank 0 of 1.
    pub fn single() -> Self {
        JobContext { launcher: "none".into(), world_size: 1, node_count: 1, ..JobContext::default() }
    }

    /// Whether this process is the first of its node (it samples the node's system metrics).
    pub fn is_node_leader(&self) -> bool {
        self.local_rank == 0
    }

    /// A key naming the job for deriving a run id, e.g. `slurm:trainlog-test:1234`; None
    /// outside a job.
    pub fn job_key(&self) -> Option<String> {
        self.job_id.as_ref().map(|id| format!("{}:{id}", self.launcher))
    }

    /// As recorded with the process on the server.
    pub fn to_json(&self) -> Value {
        json!({
            "launcher": self.launcher,
            "job_id": self.job_id,
            "rank": self.rank,
            "local_rank": self.local_rank,
            "world_size": self.world_size,
            "local_world_size": self.local_world_size,
            "node_rank": self.node_rank,
            "node_count": self.node_count,
            "restart": self.restart,
            "cloud": self.cloud,
            "region": self.region,
            "zone": self.zone,
            "instance_type": self.instance_type,
            "cluster": self.cluster,
            "spot": self.spot,
            "gpus_per_node": self.gpus_per_node,
            "detected_from": self.detected_from,
            "warnings": self.warnings,
        })
    }
}

/// Reads the job context from the process environment.
pub fn detect_from_process() -> JobContext {
    detect(&|name| std::env::var(name).ok())
}

/// Reads the job context from an environment given as a lookup (tests pass recorded ones).
pub fn detect(env: &dyn Fn(&str) -> Option<String>) -> JobContext {
    let get = |name: &str| env(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
    let number = |name: &str| get(name).and_then(|v| v.parse::<u32>().ok());
    let mut job = JobContext::single();
    if let Some(rank) = number("RANK") {
        job.launcher = "torchrun".into();
        job.rank = rank;
        job.local_rank = number("LOCAL_RANK").unwrap_or(0);
        job.world_size = number("WORLD_SIZE").unwrap_or(1);
        job.local_world_size = number("LOCAL_WORLD_SIZE");
        job.node_rank = number("GROUP_RANK").unwrap_or(0);
        job.node_count = match job.local_world_size {
            Some(local) if local > 0 => job.world_size.div_ceil(local),
            _ => 1,
        };
        job.job_id = get("TORCHELASTIC_RUN_ID");
        job.restart = get("TORCHELASTIC_RESTART_COUNT");
    }
    if let Some(id) = get("TRAINLOG_JOB_ID") {
        job.job_id = Some(id);
    }
    job
}
