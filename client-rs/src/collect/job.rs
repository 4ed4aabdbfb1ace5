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

/// The environment as detection reads it: trimmed values, numbers that say when they do not parse.
struct Reader<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
    job: JobContext,
}

impl Reader<'_> {
    fn text(&self, name: &str) -> Option<String> {
        (self.env)(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
    }

    fn has(&self, name: &str) -> bool {
        self.text(name).is_some()
    }

    fn count(&mut self, name: &str) -> Option<u32> {
        let text = self.text(name)?;
        match text.parse::<u32>() {
            Ok(n) => Some(n),
            Err(_) => {
                self.job.warnings.push(format!("{name}={text:?} is not a whole number; ignored"));
                None
            }
        }
    }

    fn note(&mut self, field: &str, from: &str) {
        self.job.detected_from.insert(field.to_owned(), from.to_owned());
    }

    /// Sets ranks from a launcher's variables: (rank, world, local rank, local world).
    fn ranks(&mut self, names: [&str; 4]) -> bool {
        let (Some(rank), Some(world)) = (self.count(names[0]), self.count(names[1])) else { return false };
        self.job.rank = rank;
        self.job.world_size = world;
        self.note("rank", names[0]);
        self.note("world_size", names[1]);
        if let Some(local) = self.count(names[2]) {
            self.job.local_rank = local;
            self.note("local_rank", names[2]);
        }
        if let Some(local_world) = self.count(names[3]) {
            self.job.local_world_size = Some(local_world);
            self.note("local_world_size", names[3]);
        }
        true
    }

    fn nodes(&mut self, rank_name: &str, count_name: &str) -> bool {
        let (Some(node), Some(count)) = (self.count(rank_name), self.count(count_name)) else { return false };
        self.job.node_rank = node;
        self.job.node_count = count;
        self.note("node_rank", rank_name);
        self.note("node_count", count_name);
        true
    }

    fn job_id(&mut self, launcher: &str, id: String, from: &str) {
        if self.job.job_id.is_none() {
            self.job.launcher = launcher.to_owned();
            self.job.job_id = Some(id);
            self.note("job_id", from);
        }
    }

    fn place(&mut self, field: &str, value: Option<String>, from: &str) {
        let Some(value) = value else { return };
        let slot = match field {
            "cloud" => &mut self.job.cloud,
            "region" => &mut self.job.region,
            "zone" => &mut self.job.zone,
            "instance_type" => &mut self.job.instance_type,
            _ => &mut self.job.cluster,
        };
        if slot.is_none() {
            *slot = Some(value);
            self.job.detected_from.insert(field.to_owned(), from.to_owned());
        }
    }
}

/// Reads the job context from an environment given as a lookup (tests pass recorded ones).
///
/// The ranks come from the innermost process launcher (torchrun or DeepSpeed, then MPI, then
/// Slurm's tasks, then one process per node of SkyPilot, SageMaker, Vertex AI or Kubernetes);
/// the job id from the outermost scheduler (SkyPilot, SageMaker, Vertex AI, Slurm, Kubernetes,
/// then torchrun's rendezvous, then MPI). `TRAINLOG_*` variables win over both.
pub fn detect(env: &dyn Fn(&str) -> Option<String>) -> JobContext {
    let mut r = Reader { env, job: JobContext::single() };
    read_ranks(&mut r);
    read_job_id(&mut r);
    read_restarts(&mut r);
    read_placement(&mut r);
    read_trainlog(&mut r);
    if r.job.launcher == "none" && r.job.world_size > 1 {
        r.job.launcher = "trainlog".into();
    }
    settle(&mut r.job);
    r.job
}

fn read_ranks(r: &mut Reader) {
    if r.ranks(["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"]) {
        if !(r.nodes("GROUP_RANK", "GROUP_WORLD_SIZE") || r.nodes("GROUP_RANK", "PET_NNODES")) {
            if let Some(node) = r.count("GROUP_RANK") {
                r.job.node_rank = node;
                r.note("node_rank", "GROUP_RANK");
            }
            if let Some(local) = r.job.local_world_size.filter(|l| *l > 0) {
                r.job.node_count = r.job.world_size.div_ceil(local);
                r.note("node_count", "WORLD_SIZE / LOCAL_WORLD_SIZE");
            }
        }
        if r.job.launcher == "none" {
            r.job.launcher = "torchrun".into();
        }
    } else if r.ranks([
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
    ]) || r.ranks(["PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"])
    {
        r.job.launcher = "mpi".into();
        // MPI names no node index: with the same number of processes on every node, it follows.
        if let Some(local) = r.job.local_world_size.filter(|l| *l > 0) {
            r.job.node_rank = r.job.rank / local;
            r.job.node_count = r.job.world_size.div_ceil(local);
            r.note("node_rank", "rank / local size (the same number of processes on every node)");
            r.note("node_count", "world size / local size");
        }
    } else if r.ranks(["SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"]) {
        r.job.launcher = "slurm".into();
    } else if r.nodes("SKYPILOT_NODE_RANK", "SKYPILOT_NUM_NODES") {
        one_process_per_node(r, "skypilot");
    } else if let Some((node, count)) = sagemaker_node(r) {
        (r.job.node_rank, r.job.node_count) = (node, count);
        r.note("node_rank", "SM_CURRENT_HOST in SM_HOSTS");
        r.note("node_count", "SM_HOSTS");
        one_process_per_node(r, "sagemaker");
    } else if let Some((node, count)) = vertex_node(r) {
        (r.job.node_rank, r.job.node_count) = (node, count);
        r.note("node_rank", "CLUSTER_SPEC");
        r.note("node_count", "CLUSTER_SPEC");
        one_process_per_node(r, "vertex");
    } else if r.nodes("PET_NODE_RANK", "PET_NNODES") {
        one_process_per_node(r, "kubernetes");
    }
    // Slurm also says where the task runs, whoever started the processes.
    if r.has("SLURM_JOB_ID")
        && !r.job.detected_from.contains_key("node_rank")
        && !r.nodes("SLURM_NODEID", "SLURM_NNODES")
    {
        r.nodes("SLURM_NODEID", "SLURM_JOB_NUM_NODES");
    }
    if r.job.local_world_size.is_none() && r.job.launcher == "slurm" {
        if let Some(per_node) = r.text("SLURM_TASKS_PER_NODE").and_then(|t| tasks_on_node(&t, r.job.node_rank)) {
            r.job.local_world_size = Some(per_node);
            r.note("local_world_size", "SLURM_TASKS_PER_NODE");
        }
    }
}

/// One process per node: its rank is its node's.
fn one_process_per_node(r: &mut Reader, launcher: &str) {
    r.job.rank = r.job.node_rank;
    r.job.world_size = r.job.node_count;
    r.job.local_world_size = Some(1);
    r.note("rank", "one process per node");
    r.note("world_size", "one process per node");
    if r.job.launcher == "none" {
        r.job.launcher = launcher.into();
    }
}

/// Slurm's `SLURM_TASKS_PER_NODE` ("4(x2),3": 4 tasks on the first two nodes, 3 on the third):
/// the count on node `node`.
fn tasks_on_node(text: &str, node: u32) -> Option<u32> {
    let mut seen = 0u32;
    for part in text.split(',') {
        let (count, repeat) = match part.split_once("(x") {
            Some((count, rest)) => (count, rest.trim_end_matches(')').parse::<u32>().ok()?),
            None => (part, 1),
        };
        let count = count.trim().parse::<u32>().ok()?;
        seen += repeat;
        if node < seen {
            return Some(count);
        }
    }
    None
}

fn sagemaker_node(r: &mut Reader) -> Option<(u32, u32)> {
    let current = r.text("SM_CURRENT_HOST")?;
    let hosts = r.text("SM_HOSTS")?;
    let Ok(mut hosts) = serde_json::from_str::<Vec<String>>(&hosts) else {
        r.job.warnings.push("SM_HOSTS is not a JSON list of host names; ignored".into());
        return None;
    };
    hosts.sort();
    let node = hosts.iter().position(|h| *h == current)?;
    Some((node as u32, hosts.len() as u32))
}

/// Vertex AI's `CLUSTER_SPEC`: this task's position over the worker pools in order.
fn vertex_node(r: &mut Reader) -> Option<(u32, u32)> {
    let spec = r.text("CLUSTER_SPEC")?;
    let Ok(spec) = serde_json::from_str::<Value>(&spec) else {
        r.job.warnings.push("CLUSTER_SPEC is not JSON; ignored".into());
        return None;
    };
    let cluster = spec["cluster"].as_object()?;
    let (kind, index) = (spec["task"]["type"].as_str()?, spec["task"]["index"].as_u64()?);
    let mut pools: Vec<(&String, usize)> =
        cluster.iter().map(|(name, hosts)| (name, hosts.as_array().map_or(0, Vec::len))).collect();
    pools.sort_by_key(|(name, _)| name.as_str());
    let before: usize = pools.iter().take_while(|(name, _)| name.as_str() != kind).map(|(_, n)| n).sum();
    let total: usize = pools.iter().map(|(_, n)| n).sum();
    let node = u32::try_from(before + index as usize).ok()?;
    Some((node, u32::try_from(total).ok()?))
}

fn read_job_id(r: &mut Reader) {
    if let Some(id) = r.text("TRAINLOG_JOB_ID") {
        let launcher = if r.job.launcher == "none" { "trainlog".to_owned() } else { r.job.launcher.clone() };
        r.job_id(&launcher, id, "TRAINLOG_JOB_ID");
    }
    if let Some(id) = r.text("SKYPILOT_TASK_ID") {
        r.job_id("skypilot", id, "SKYPILOT_TASK_ID");
    }
    if let Some(id) = r.text("TRAINING_JOB_NAME") {
        r.job_id("sagemaker", id, "TRAINING_JOB_NAME");
    }
    if let Some(id) = r.text("CLOUD_ML_JOB_ID") {
        r.job_id("vertex", id, "CLOUD_ML_JOB_ID");
    }
    if let Some(job) = r.text("SLURM_JOB_ID") {
        let cluster = r.text("SLURM_CLUSTER_NAME");
        let (id, from) = match (r.text("SLURM_ARRAY_JOB_ID"), r.text("SLURM_ARRAY_TASK_ID")) {
            // An array's task is a job of its own.
            (Some(array), Some(task)) => (format!("{array}_{task}"), "SLURM_ARRAY_JOB_ID, SLURM_ARRAY_TASK_ID"),
            _ => (job, "SLURM_JOB_ID"),
        };
        let id = cluster.map_or(id.clone(), |c| format!("{c}:{id}"));
        r.job_id("slurm", id, from);
    }
    if let Some(id) = kubernetes_job(r) {
        r.job_id("kubernetes", id, "the pod's name (HOSTNAME)");
    }
    match r.text("TORCHELASTIC_RUN_ID") {
        Some(id) if id != "none" => r.job_id("torchrun", id, "TORCHELASTIC_RUN_ID"),
        Some(_) if r.job.job_id.is_none() => {
            if let (Some(addr), Some(port)) = (r.text("MASTER_ADDR"), r.text("MASTER_PORT")) {
                r.job_id("torchrun", format!("{addr}:{port}"), "MASTER_ADDR, MASTER_PORT");
                r.job.warnings.push(
                    "torchrun was started without --rdzv-id: the job is told by MASTER_ADDR:MASTER_PORT, so later \
                     jobs on the same address and port join the same run; set --rdzv-id or TRAINLOG_JOB_ID"
                        .into(),
                );
            }
        }
        _ => {}
    }
    for name in ["PMIX_NAMESPACE", "OMPI_MCA_orte_ess_jobid", "PMI_JOBID"] {
        if let Some(id) = r.text(name).filter(|_| r.job.launcher == "mpi") {
            r.job_id("mpi", id, name);
        }
    }
}

/// A Kubernetes job's name from its pod's: PyTorchJob pods are `{job}-master-0` and
/// `{job}-worker-{i}`, an Indexed Job's `{job}-{index}-{suffix}`.
fn kubernetes_job(r: &mut Reader) -> Option<String> {
    if !r.has("KUBERNETES_SERVICE_HOST") {
        return None;
    }
    let pod = r.text("HOSTNAME")?;
    let job = if let Some((job, _)) = pod.rsplit_once("-master-").or_else(|| pod.rsplit_once("-worker-")) {
        job.to_owned()
    } else {
        let index = r.text("JOB_COMPLETION_INDEX")?;
        let (rest, _suffix) = pod.rsplit_once('-')?;
        rest.strip_suffix(&format!("-{index}"))?.to_owned()
    };
    r.job.warnings.push(format!("the job's name {job:?} is guessed from the pod's name; TRAINLOG_JOB_ID sets it"));
    if r.job.launcher == "none" {
        if let Some(index) = r.count("JOB_COMPLETION_INDEX") {
            r.job.node_rank = index;
            r.note("node_rank", "JOB_COMPLETION_INDEX");
        }
    }
    Some(job)
}

/// Every launcher's own count of restarts, as one marker: another value is another start.
fn read_restarts(r: &mut Reader) {
    let mut parts = Vec::new();
    let mut from = Vec::new();
    if r.has("SLURM_JOB_ID") {
        parts.push(format!("slurm={}", r.text("SLURM_RESTART_COUNT").unwrap_or_else(|| "0".into())));
        from.push("SLURM_RESTART_COUNT");
    }
    if let Some(count) = r.text("TORCHELASTIC_RESTART_COUNT") {
        parts.push(format!("torchelastic={count}"));
        from.push("TORCHELASTIC_RESTART_COUNT");
    }
    if !parts.is_empty() {
        r.job.restart = Some(parts.join(","));
        r.note("restart", &from.join(", "));
    }
}

fn read_placement(r: &mut Reader) {
    if let Some(info) = r.text("SKYPILOT_CLUSTER_INFO") {
        match serde_json::from_str::<Value>(&info) {
            Ok(info) => {
                let field = |k: &str| info[k].as_str().filter(|v| !v.is_empty()).map(str::to_owned);
                r.place("cloud", field("cloud").map(|c| c.to_ascii_lowercase()), "SKYPILOT_CLUSTER_INFO");
                r.place("region", field("region"), "SKYPILOT_CLUSTER_INFO");
                r.place("zone", field("zone"), "SKYPILOT_CLUSTER_INFO");
                r.place("cluster", field("cluster_name"), "SKYPILOT_CLUSTER_INFO");
            }
            Err(_) => r.job.warnings.push("SKYPILOT_CLUSTER_INFO is not JSON; ignored".into()),
        }
    }
    if r.job.launcher == "sagemaker" {
        r.place("cloud", Some("aws".into()), "SageMaker");
        let region = r.text("AWS_REGION").or_else(|| r.text("AWS_DEFAULT_REGION"));
        r.place("region", region, "AWS_REGION");
        let instance = r.text("SM_CURRENT_INSTANCE_TYPE");
        r.place("instance_type", instance, "SM_CURRENT_INSTANCE_TYPE");
    }
    if r.job.launcher == "vertex" {
        r.place("cloud", Some("gcp".into()), "Vertex AI");
        let region = r.text("CLOUD_ML_REGION");
        r.place("region", region, "CLOUD_ML_REGION");
    }
    let cluster = r.text("SLURM_CLUSTER_NAME");
    r.place("cluster", cluster, "SLURM_CLUSTER_NAME");
    for name in ["SKYPILOT_NUM_GPUS_PER_NODE", "SM_NUM_GPUS", "SLURM_GPUS_ON_NODE"] {
        if r.job.gpus_per_node.is_none() {
            if let Some(gpus) = r.count(name) {
                r.job.gpus_per_node = Some(gpus);
                r.note("gpus_per_node", name);
            }
        }
    }
}

/// `TRAINLOG_*` variables: they win over what the launcher said.
fn read_trainlog(r: &mut Reader) {
    type Setter = fn(&mut JobContext, u32);
    let counts: [(&str, Setter); 6] = [
        ("TRAINLOG_RANK", |j, v| j.rank = v),
        ("TRAINLOG_LOCAL_RANK", |j, v| j.local_rank = v),
        ("TRAINLOG_WORLD_SIZE", |j, v| j.world_size = v),
        ("TRAINLOG_NODE_RANK", |j, v| j.node_rank = v),
        ("TRAINLOG_NUM_NODES", |j, v| j.node_count = v),
        ("TRAINLOG_GPUS_PER_NODE", |j, v| j.gpus_per_node = Some(v)),
    ];
    for (name, set) in counts {
        if let Some(value) = r.count(name) {
            set(&mut r.job, value);
            let field = match name {
                "TRAINLOG_NUM_NODES" => "node_count".to_owned(),
                _ => name.trim_start_matches("TRAINLOG_").to_ascii_lowercase(),
            };
            r.note(&field, name);
        }
    }
    let texts: [(&str, &str); 5] = [
        ("TRAINLOG_RESTART", "restart"),
        ("TRAINLOG_CLOUD_PROVIDER", "cloud"),
        ("TRAINLOG_REGION", "region"),
        ("TRAINLOG_ZONE", "zone"),
        ("TRAINLOG_INSTANCE_TYPE", "instance_type"),
    ];
    for (name, field) in texts {
        if let Some(value) = r.text(name) {
            match field {
                "restart" => r.job.restart = Some(value),
                "cloud" => r.job.cloud = Some(value.to_ascii_lowercase()),
                "region" => r.job.region = Some(value),
                "zone" => r.job.zone = Some(value),
                _ => r.job.instance_type = Some(value),
            }
            r.note(field, name);
        }
    }
    if let Some(spot) = r.text("TRAINLOG_SPOT") {
        r.job.spot = Some(matches!(spot.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"));
        r.note("spot", "TRAINLOG_SPOT");
    }
}

/// Makes the context consistent whatever the variables said, with a warning for each fix.
fn settle(job: &mut JobContext) {
    if job.world_size == 0 {
        job.warnings.push("a world size of 0 was read; taken as 1".into());
        job.world_size = 1;
    }
    if job.rank >= job.world_size {
        job.warnings.push(format!(
            "rank {} is not below the world size {}; the world size is taken as {}",
            job.rank,
            job.world_size,
            job.rank + 1
        ));
        job.world_size = job.rank + 1;
    }
    if job.node_count == 0 {
        job.node_count = 1;
    }
    if job.node_rank >= job.node_count {
        job.warnings.push(format!(
            "node {} is not below the node count {}; the node count is taken as {}",
            job.node_rank,
            job.node_count,
            job.node_rank + 1
        ));
        job.node_count = job.node_rank + 1;
    }
    if job.local_world_size.is_some_and(|l| job.local_rank >= l) {
        job.warnings
            .push(format!("local rank {} is not below the local world size; the latter is dropped", job.local_rank));
        job.local_world_size = None;
    }
}

#[cfg(test)]
#[path = "job_tests.rs"]
mod tests;
