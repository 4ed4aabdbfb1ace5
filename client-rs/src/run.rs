//! `Run` and its builder: creating or resuming a run, enqueueing points without blocking, and
//! finishing within a bounded time.

use crate::collect::job::JobContext;
use crate::collect::mfu::MfuMeter;
use crate::http::Http;
use crate::membership::{run_id_for_job, Membership, NodeDescription};
use crate::sender::{FinishSummary, Sender, Shared};
use crate::spool::Spool;
use crate::{Error, Result};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What to do when the run id already exists on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Resume {
    /// Refuse: the id must be new.
    #[default]
    Never,
    /// Continue the run if it exists, create it otherwise.
    Allow,
    /// Continue the run; refuse if it does not exist.
    Must,
}

impl Resume {
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "never" => Ok(Self::Never),
            "allow" => Ok(Self::Allow),
            "must" => Ok(Self::Must),
            other => Err(Error::Invalid(format!("resume must be \"allow\", \"must\" or \"never\", not {other:?}"))),
        }
    }
}

/// Online sends to the server (spooling through outages); offline only writes the spool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    Online,
    Offline,
}

impl Mode {
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "online" => Ok(Self::Online),
            "offline" => Ok(Self::Offline),
            other => Err(Error::Invalid(format!("mode must be \"online\" or \"offline\", not {other:?}"))),
        }
    }
}

/// Builds a run; `start` creates it.
#[derive(Debug, Clone)]
pub struct RunBuilder {
    project: String,
    name: Option<String>,
    id: Option<String>,
    config: Value,
    tags: Map<String, Value>,
    group: Option<String>,
    notes: Option<String>,
    parent_id: Option<String>,
    server: Option<String>,
    resume: Resume,
    mode: Mode,
    spool_dir: Option<std::path::PathBuf>,
    metadata: BTreeMap<String, Value>,
    system_interval: Option<Duration>,
    capture_environment: bool,
    capture_code: bool,
    capture_code_diff: bool,
    cost_per_hour: Option<f64>,
    cost_per_gpu_hour: Option<f64>,
    cost: bool,
    job: Option<JobContext>,
    rank_metrics: bool,
    console: crate::console::ConsoleMode,
    console_max_bytes: u64,
}

impl RunBuilder {
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
    /// The run id; else `TRAINLOG_RUN_ID`; else a new random id.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }
    /// Hyperparameters; nested objects become dotted keys.
    pub fn config(mut self, config: Value) -> Self {
        self.config = config;
        self
    }
    pub fn tag(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.tags.insert(key.into(), Value::String(value.into()));
        self
    }
    /// A label without a value, as W&B's tags are.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.tags.insert(label.into(), Value::String(String::new()));
        self
    }
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }
    pub fn notes(mut self, notes: impl Into<String>) -> Self {
        self.notes = Some(notes.into());
        self
    }
    pub fn parent(mut self, parent_id: impl Into<String>) -> Self {
        self.parent_id = Some(parent_id.into());
        self
    }
    /// The server URL; else `TRAINLOG_SERVER`; else `http://127.0.0.1:7310`.
    pub fn server(mut self, url: impl Into<String>) -> Self {
        self.server = Some(url.into());
        self
    }
    pub fn resume(mut self, resume: Resume) -> Self {
        self.resume = resume;
        self
    }
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }
    /// Where spools go; default `~/.trainlog/spool` (or `$TRAINLOG_DIR/spool`).
    pub fn spool_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.spool_dir = Some(dir.into());
        self
    }
    /// A metadata section sent with the run (the Python package adds its interpreter and packages).
    pub fn metadata(mut self, section: impl Into<String>, value: Value) -> Self {
        self.metadata.insert(section.into(), value);
        self
    }
    /// How often to sample system and GPU metrics; `None` turns sampling off. Default 10 s.
    pub fn system_metrics(mut self, every: Option<Duration>) -> Self {
        self.system_interval = every;
        self
    }
    /// Record the environment (OS, CPU, RAM, GPUs, command line). Default on.
    pub fn capture_environment(mut self, on: bool) -> Self {
        self.capture_environment = on;
        self
    }
    /// Record the git commit, branch, remote and uncommitted diff. Default on.
    pub fn capture_code(mut self, on: bool) -> Self {
        self.capture_code = on;
        self
    }
    /// Record the uncommitted diff (and the names of untracked files) with the code, which may
    /// hold secrets written into tracked files. Default on; `TRAINLOG_CAPTURE_CODE_DIFF=0` (or
    /// `false`, `no`, `off`) in the environment turns it off too. Off, `metadata.code` keeps the
    /// commit, branch, remote and dirty flag, and its `diff` is null.
    pub fn capture_code_diff(mut self, on: bool) -> Self {
        self.capture_code_diff = on;
        self
    }
    /// Price per hour of the machine; else `TRAINLOG_COST_PER_HOUR`, else the shipped price table.
    pub fn cost_per_hour(mut self, usd: f64) -> Self {
        self.cost_per_hour = Some(usd);
        self
    }
    /// Price per hour of one GPU: the node costs this times its GPUs.
    pub fn cost_per_gpu_hour(mut self, usd: f64) -> Self {
        self.cost_per_gpu_hour = Some(usd);
        self
    }
    /// Account cost at all. Default on.
    pub fn cost(mut self, on: bool) -> Self {
        self.cost = on;
        self
    }
    /// The job this process is a rank of; by default read from the launcher's environment
    /// ([`crate::collect::job::detect_from_process`]). Every process of one job joins one run.
    pub fn job(mut self, job: JobContext) -> Self {
        self.job = Some(job);
        self
    }
    /// Which processes capture their stdout and stderr into the run's console logs: every rank
    /// (the default), rank 0 only, or none. `TRAINLOG_CONSOLE` (`all`, `rank0`, `off`) overrides it.
    pub fn console(mut self, mode: crate::console::ConsoleMode) -> Self {
        self.console = mode;
        self
    }

    /// Bytes of console output a process ships at most (128 MiB by default): past it, the first
    /// half and the last half are kept, with a line saying how much was left out between.
    pub fn console_max_bytes(mut self, bytes: u64) -> Self {
        self.console_max_bytes = bytes;
        self
    }

    /// Every rank logs its own series under `rank/{r}/…` (rank 0 also logs the plain keys).
    /// Default off: only rank 0's `log` records anything.
    pub fn rank_metrics(mut self, on: bool) -> Self {
        self.rank_metrics = on;
        self
    }

    /// Inside a sweep trial (the agent sets `TRAINLOG_SWEEP_ID`), the run is the trial's: its
    /// project and run id, resumed, with the trial's params over the given config.
    fn join_sweep_trial(&mut self) {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let (Some(_), Some(run_id)) = (env("TRAINLOG_SWEEP_ID"), env("TRAINLOG_RUN_ID")) else { return };
        if let Some(project) = env("TRAINLOG_PROJECT") {
            self.project = project;
        }
        self.id = Some(run_id);
        if self.resume != Resume::Must {
            self.resume = Resume::Allow;
        }
        let params = env("TRAINLOG_SWEEP_PARAMS").and_then(|p| serde_json::from_str::<Value>(&p).ok());
        match (params, &mut self.config) {
            (Some(Value::Object(params)), Value::Object(config)) => config.extend(params),
            (Some(params), config) => *config = params,
            (None, _) => {}
        }
    }

    fn create_body(&self, id: &str, resume: bool, process: &Value) -> Value {
        // Rank 0 speaks for the run: the other ranks only join it.
        let speaks = process["rank"].as_u64().unwrap_or(0) == 0;
        let mut body = json!({
            "project": self.project,
            "id": id,
            "params": if speaks { self.config.clone() } else { json!({}) },
            "tags": if speaks { Value::Object(self.tags.clone()) } else { json!({}) },
            "user": std::env::var("USER").unwrap_or_default(),
            "host": hostname(),
            "resume": resume,
            "process": process,
        });
        for (field, value) in
            [("name", &self.name), ("group", &self.group), ("notes", &self.notes), ("parent_id", &self.parent_id)]
        {
            if let Some(v) = value {
                body[field] = json!(v);
            }
        }
        body
    }

    /// Creates (or resumes) the run and starts its background sender. Refuses only what can
    /// never work (a param conflict, `Resume::Must` for an unknown run, bad input); an
    /// unreachable server is not an error: the run spools and sends later.
    pub fn start(mut self) -> Result<Run> {
        self.join_sweep_trial();
        let job = self.job.clone().unwrap_or_else(crate::collect::job::detect_from_process);
        let given = self.id.clone().or_else(|| std::env::var("TRAINLOG_RUN_ID").ok().filter(|s| !s.is_empty()));
        let derived = given.is_none().then(|| job.job_key()).flatten().map(|key| run_id_for_job(&self.project, &key));
        if (derived.is_some() || job.world_size > 1) && self.resume == Resume::Never {
            // Every rank, and every restart of the job, joins the one run.
            self.resume = Resume::Allow;
        }
        let id = given.or(derived).unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
        trainlog_schema::RunId::parse("id", &id).map_err(|e| Error::Invalid(e.to_string()))?;
        let membership = Arc::new(Membership::new(job, self.rank_metrics));
        let started_ms = crate::now_ms();
        let (gpus, node) = self.describe_node(&membership.job);
        let process = membership.join_body(node.as_ref(), started_ms);
        let url = crate::server_url(self.server.as_deref());
        let http = Http::new(&url, Duration::from_secs(10))?;
        let offline = self.mode == Mode::Offline;
        let spool_dir = self.spool_dir.clone().unwrap_or_else(crate::spool::default_dir);
        let mut spool = Spool::open_for_rank(&spool_dir, &id, membership.job.rank, &url)?;
        // A spool left by an earlier process of this run (it died during an outage) is sent
        // before anything new, so its older points never land after newer ones.
        let inherited = !spool.is_empty();
        let shared = Arc::new(Shared::new(id.clone(), offline));
        if inherited {
            shared.spooling.store(true, Ordering::Relaxed);
        }
        let resume = self.resume != Resume::Never;
        let spooled_create =
            json!({"op": "create", "body": self.create_body(&id, true, &process), "token": shared.join_token});
        let mut run_json = Value::Null;
        if offline {
            spool.append(&spooled_create)?;
        } else {
            let reached = (|| {
                if self.resume == Resume::Must {
                    http.get(&format!("/runs/{id}"))?;
                }
                let mut body = self.create_body(&id, resume, &process);
                if inherited {
                    // This process joins after the inherited records (the earlier process's
                    // join and end), through the spool; joining first would make the earlier
                    // process's late join look like a new start of the job.
                    body.as_object_mut().map(|b| b.remove("process"));
                }
                http.post("/runs", &body)
            })();
            match reached {
                Ok(run) if inherited => {
                    run_json = run;
                    // Order: the create answered, but the inherited records go before new ones.
                    spool.append(&spooled_create)?;
                }
                Ok(run) => run_json = run,
                Err(Error::Unreachable { reason, .. }) => {
                    spool.append(&spooled_create)?;
                    shared.spooling.store(true, Ordering::Relaxed);
                    shared.warn_once(&format!("the server at {url} cannot be reached ({reason})"));
                }
                Err(e) => {
                    if inherited {
                        let _ = spool.release(&url);
                    } else {
                        spool.remove();
                    }
                    return Err(e);
                }
            }
        }
        membership.heard(&run_json);
        let sender = Sender::new(shared.clone(), http, spool);
        let sender_thread = std::thread::Builder::new()
            .name("trainlog-sender".into())
            .spawn(move || sender.run())
            .map_err(crate::io_err("starting the sender thread"))?;
        if !offline {
            let beat = Http::new(&url, Duration::from_secs(5))?;
            crate::membership::start_heartbeats(membership.clone(), shared.clone(), beat, &id);
        }
        let media_waiting = crate::media::has_spool(&spool_dir, &id);
        let mut run = Run {
            shared,
            id,
            project: self.project.clone(),
            server: url,
            json: run_json,
            membership: membership.clone(),
            sender: Mutex::new(Some(sender_thread)),
            finished: AtomicBool::new(false),
            summary: Mutex::new(None),
            sampler: Mutex::new(None),
            stop_flag: Arc::new(AtomicBool::new(false)),
            stop_poller: std::sync::Once::new(),
            media: Mutex::new(None),
            media_spool_dir: spool_dir.clone(),
            offline,
            mfu: None,
            alerts_sent: Mutex::new(std::collections::HashMap::new()),
            console: Mutex::new(None),
            console_step: Arc::new(std::sync::atomic::AtomicI64::new(i64::MIN)),
        };
        let console = self.console.from_env_or();
        let rank = membership.job.rank;
        if console == crate::console::ConsoleMode::All || (console == crate::console::ConsoleMode::Rank0 && rank == 0) {
            let labels = crate::console::Labels {
                process: run.shared.join_token.clone(),
                rank,
                node: hostname(),
                attempt: {
                    let membership = membership.clone();
                    Arc::new(move || membership.attempt())
                },
                step: run.console_step.clone(),
            };
            *lock(&run.console) = crate::console::Capture::start(run.shared.clone(), labels, self.console_max_bytes);
        }
        let rank_zero = membership.job.rank == 0;
        if rank_zero && std::env::var_os("TRAINLOG_QUIET").is_none_or(|q| q.is_empty() || q == "0") {
            if offline {
                eprintln!(
                    "trainlog: run {} is offline, kept in {}; `trainlog sync` sends it",
                    run.id,
                    spool_dir.display()
                );
            } else {
                eprintln!("trainlog: run {} at {}", run.id, run.url());
            }
        }
        if media_waiting && rank_zero {
            run.media_queue(|_| ());
        }
        let mut metadata = if rank_zero { self.metadata.clone() } else { BTreeMap::new() };
        if rank_zero && self.capture_environment {
            metadata.insert("environment".into(), crate::collect::environment::capture());
        }
        if rank_zero && self.capture_code {
            let cwd = std::env::current_dir().unwrap_or_default();
            let diff_cap_bytes = (self.capture_code_diff && !code_diff_switched_off_by_env()).then_some(1 << 20);
            if let Some(code) = crate::collect::git::capture(&cwd, diff_cap_bytes) {
                metadata.insert("code".into(), code);
            }
        }
        if rank_zero {
            if let Some(n) = &node {
                let resumed = next_user_step(&run.json["summary"]) > 0;
                run.mfu = MfuMeter::new(&n.gpu_names, n.gpus, membership.job.node_count, resumed, started_ms);
                if let Some(meter) = &run.mfu {
                    metadata.insert("mfu".into(), meter.describe());
                }
            }
        }
        let price = node.as_ref().and_then(|n| n.price.clone());
        if let (true, Some((usd_per_hour, source))) = (rank_zero, &price) {
            let names = node.as_ref().map(|n| n.gpu_names.clone()).unwrap_or_default();
            metadata.insert("cost".into(), json!({"usd_per_hour": usd_per_hour, "source": source, "gpus": names}));
        }
        for (section, value) in metadata {
            run.set_metadata(&section, value);
        }
        let leader = membership.job.is_node_leader();
        let system_every = if leader { self.system_interval } else { None };
        let cost = (rank_zero && self.cost).then(|| (price.map(|p| p.0), membership.clone()));
        if system_every.is_some() || cost.is_some() {
            let plan = crate::sampler::SamplerPlan {
                system_every,
                gpus: if system_every.is_some() { gpus } else { None },
                system_prefix: membership.system_prefix(),
                cost,
                resumed: Resumed::from_summary(&run.json["summary"]),
            };
            match crate::sampler::Sampler::start(run.shared.clone(), plan) {
                Ok(sampler) => *lock(&run.sampler) = Some(sampler),
                Err(e) => run.shared.report_problem(format!(
                    "run {} records no system metrics or cost: the sampler thread did not start ({e})",
                    run.id
                )),
            }
        }
        Ok(run)
    }

    /// A node leader (local rank 0) opens the node's GPUs and prices the node; other processes
    /// describe nothing.
    fn describe_node(&self, job: &JobContext) -> (Option<crate::collect::gpu::GpuSampler>, Option<NodeDescription>) {
        if !job.is_node_leader() || (self.system_interval.is_none() && !self.cost) {
            return (None, None);
        }
        use crate::collect::node_gpus;
        let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
        let watched = node_gpus::watched(|name| std::env::var(name).ok(), visible);
        let gpus = match crate::collect::gpu::GpuSampler::open(watched.as_deref()) {
            Ok(g) => Some(g),
            Err(reason) => {
                if self.system_interval.is_some() {
                    eprintln!("trainlog: no GPU readings ({reason}); recording CPU and memory only");
                }
                None
            }
        };
        let seen = gpus.as_ref().map(|g| g.gpu_names()).unwrap_or_default();
        let allocated = job
            .gpus_per_node
            .map(|n| (n, job.detected_from.get("gpus_per_node").map_or("the launcher", String::as_str)))
            .or_else(|| {
                let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
                node_gpus::one_gpu_per_process(job.local_world_size, visible.as_deref())
                    .map(|n| (n, "LOCAL_WORLD_SIZE"))
            });
        let node = node_gpus::node_gpus(allocated, &seen, watched.as_deref());
        let (count, gpu_names) = (node.count, node.names);
        let price = if self.cost {
            let explicit = self.cost_per_hour.or(self.cost_per_gpu_hour.map(|p| p * f64::from(count)));
            let spot = job.spot.unwrap_or(false);
            let explicit_source = self
                .cost_per_gpu_hour
                .filter(|_| self.cost_per_hour.is_none())
                .map(|p| format!("{p} USD per GPU-hour given to the SDK, {count} GPUs"));
            crate::collect::cost::resolve_price(explicit, job.cloud.as_deref(), spot, &gpu_names)
                .map(|(usd, source)| (usd, explicit_source.unwrap_or(source)))
        } else {
            None
        };
        let driver = gpus.as_ref().and_then(|g| g.driver_version());
        (gpus, Some(NodeDescription { gpus: count, gpu_names, gpus_source: node.source, driver, price }))
    }
}

/// Where a resumed run's own series left off: the sampler continues after them.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Resumed {
    /// One past the highest step of the `sys/` and `cost/` series.
    pub sampler_step: i64,
    /// The cost already accounted.
    pub cost_usd: f64,
    /// The last value of each GPU's `…energy_j` series: the energy goes on from there.
    pub energy_j: BTreeMap<String, f64>,
}

impl Resumed {
    pub fn from_summary(summary: &Value) -> Self {
        let Some(map) = summary.as_object() else { return Self::default() };
        let sampler_step = map
            .iter()
            .filter(|(k, _)| {
                k.starts_with(trainlog_schema::SYSTEM_PREFIX) || k.starts_with(trainlog_schema::COST_PREFIX)
            })
            .filter_map(|(_, s)| s["last_step"].as_i64())
            .max()
            .map_or(0, |m| m + 1);
        let cost_usd = map.get("cost/usd").and_then(|s| s["last"].as_f64()).unwrap_or(0.0);
        let energy_j = map
            .iter()
            .filter(|(k, _)| k.starts_with(trainlog_schema::SYSTEM_PREFIX) && k.ends_with(".energy_j"))
            .filter_map(|(k, s)| s["last"].as_f64().map(|last| (k.clone(), last)))
            .collect();
        Self { sampler_step, cost_usd, energy_j }
    }
}

/// One past the highest step the run logged outside the `sys/` and `cost/` series (0 for a new run).
fn next_user_step(summary: &Value) -> i64 {
    summary
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| {
                    !k.starts_with(trainlog_schema::SYSTEM_PREFIX) && !k.starts_with(trainlog_schema::COST_PREFIX)
                })
                .filter_map(|(_, s)| s["last_step"].as_i64())
                .max()
                .map_or(0, |m| m + 1)
        })
        .unwrap_or(0)
}

/// Whether `TRAINLOG_CAPTURE_CODE_DIFF` says not to record the diff.
fn code_diff_switched_off_by_env() -> bool {
    std::env::var("TRAINLOG_CAPTURE_CODE_DIFF")
        .is_ok_and(|value| matches!(value.trim().to_ascii_lowercase().as_str(), "0" | "false" | "no" | "off"))
}

pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_default()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A run being logged. Logging never blocks on the network and never fails.
pub struct Run {
    pub(crate) shared: Arc<Shared>,
    id: String,
    project: String,
    server: String,
    json: Value,
    membership: Arc<Membership>,
    sender: Mutex<Option<JoinHandle<FinishSummary>>>,
    finished: AtomicBool,
    summary: Mutex<Option<FinishSummary>>,
    sampler: Mutex<Option<crate::sampler::Sampler>>,
    /// Set once the sweep wants this trial to stop; a background thread asks the server.
    stop_flag: Arc<AtomicBool>,
    stop_poller: std::sync::Once,
    /// The media thread, started by the first media logged (or at once, to send a media spool
    /// an earlier process of the run left).
    media: Mutex<Option<crate::media::MediaQueue>>,
    media_spool_dir: std::path::PathBuf,
    offline: bool,
    /// Rank 0's `mfu` series, where the job's GPUs have a known peak.
    mfu: Option<MfuMeter>,
    /// When each alert title was last sent, for folding repeats.
    alerts_sent: Mutex<std::collections::HashMap<String, Instant>>,
    /// The capture of this process's stdout and stderr, and the last step logged by it (which
    /// the captured lines carry), `i64::MIN` before the first.
    console: Mutex<Option<crate::console::Capture>>,
    console_step: Arc<std::sync::atomic::AtomicI64>,
}

impl Run {
    pub fn builder(project: impl Into<String>) -> RunBuilder {
        RunBuilder {
            project: project.into(),
            name: None,
            id: None,
            config: Value::Object(Map::new()),
            tags: Map::new(),
            group: None,
            notes: None,
            parent_id: None,
            server: None,
            resume: Resume::Never,
            mode: Mode::Online,
            spool_dir: None,
            metadata: BTreeMap::new(),
            system_interval: Some(Duration::from_secs(10)),
            capture_environment: true,
            capture_code: true,
            capture_code_diff: true,
            cost_per_hour: None,
            cost_per_gpu_hour: None,
            cost: true,
            job: None,
            rank_metrics: false,
            console: crate::console::ConsoleMode::All,
            console_max_bytes: crate::console::DEFAULT_MAX_BYTES,
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Who asked this run to stop and why (`POST /api/v1/runs/{id}/stop`, `trainlog stop`, the
    /// UI's Stop button), once a heartbeat's answer said so; the training should end the run
    /// `killed` with [`stop_reason`](Self::stop_reason).
    pub fn stop_requested(&self) -> Option<(String, String)> {
        self.membership.stop_requested()
    }

    /// The end's reason for a run stopped from outside: `stopped by WHO[: WHY]`.
    pub fn stop_reason(&self) -> Option<String> {
        self.stop_requested().map(|(by, why)| {
            let by = if by.is_empty() { "someone".to_owned() } else { by };
            if why.is_empty() {
                format!("stopped by {by}")
            } else {
                format!("stopped by {by}: {why}")
            }
        })
    }

    /// Whether the sweep this run is a trial of wants it to stop (it was pruned, the sweep was
    /// stopped, or this attempt was superseded). Never waits: the first call starts a thread that
    /// asks the server once a second. False outside a sweep, offline, or while the server cannot
    /// be reached: tracking never stops training by itself.
    pub fn should_stop(&self) -> bool {
        if self.membership.stop_requested().is_some() {
            return true;
        }
        let Some(attempt) = std::env::var_os("TRAINLOG_SWEEP_ID")
            .map(|_| std::env::var("TRAINLOG_SWEEP_ATTEMPT").ok().and_then(|a| a.parse::<i64>().ok()))
        else {
            return false;
        };
        self.stop_poller.call_once(|| {
            let flag = self.stop_flag.clone();
            let shared = self.shared.clone();
            let mut path = format!("/runs/{}/sweep", crate::api::encode(&self.id));
            if let Some(a) = attempt {
                path.push_str(&format!("?attempt={a}"));
            }
            let Ok(http) = Http::new(&self.server, Duration::from_secs(5)) else { return };
            let spawned = std::thread::Builder::new().name("trainlog-should-stop".into()).spawn(move || {
                while !shared.is_closed() && !flag.load(Ordering::Relaxed) {
                    if http.get(&path).is_ok_and(|a| a["stop"] == true) {
                        flag.store(true, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
            });
            if let Err(e) = spawned {
                self.shared.warn_once(&format!("cannot ask the sweep whether to stop: {e}"));
            }
        });
        self.stop_flag.load(Ordering::Relaxed)
    }

    pub fn project(&self) -> &str {
        &self.project
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    /// The run's page in the server's UI.
    pub fn url(&self) -> String {
        format!("{}/#/run/{}", self.server, crate::api::encode(&self.id))
    }

    /// One past the highest step already logged (by an earlier process, for a resumed run):
    /// where a caller that counts steps itself should continue.
    pub fn next_step(&self) -> i64 {
        next_user_step(&self.json["summary"])
    }

    /// The run as the server answered its creation (`Null` when it was spooled).
    pub fn server_view(&self) -> &Value {
        &self.json
    }

    /// Logs values at `step`, timestamped now.
    pub fn log(&self, step: i64, values: &[(&str, f64)]) {
        self.log_at(step, crate::now_ms(), values);
    }

    /// Logs values at `step` with an explicit timestamp (ms since the epoch). Only enqueues.
    pub fn log_at(&self, step: i64, timestamp_ms: i64, values: &[(&str, f64)]) {
        let m = &self.membership;
        if self.is_finished() {
            return;
        }
        self.console_step.fetch_max(step, Ordering::Relaxed);
        if !m.logs {
            return;
        }
        m.saw_step(step);
        if m.job.rank == 0 {
            self.shared.enqueue(step, timestamp_ms, values);
            if let Some(mfu) = self.mfu.as_ref().and_then(|meter| meter.observe(timestamp_ms, values)) {
                self.shared.enqueue(step, timestamp_ms, &[(crate::collect::mfu::MFU_KEY, mfu)]);
            }
        }
        if let Some(prefix) = &m.rank_prefix {
            let keys: Vec<String> = values.iter().map(|(k, _)| format!("{prefix}{k}")).collect();
            let mine: Vec<(&str, f64)> = keys.iter().zip(values).map(|(k, (_, v))| (k.as_str(), *v)).collect();
            self.shared.enqueue(step, timestamp_ms, &mine);
        }
    }

    /// Notes that this process reached `step` without logging anything: its console lines carry
    /// it. `log` does this itself.
    pub fn note_step(&self, step: i64) {
        self.console_step.fetch_max(step, Ordering::Relaxed);
    }

    /// Logs media items under `key` at `step` (a list: their indexes at that step), timestamped
    /// now. Only queues: encoding and upload happen on the media thread.
    pub fn log_media(&self, key: &str, step: i64, items: Vec<crate::media::Media>) {
        if !self.membership.logs || self.membership.job.rank != 0 || self.is_finished() {
            return;
        }
        self.media_queue(|q| q.push(key, step, crate::now_ms(), items));
    }

    fn media_queue<T>(&self, f: impl FnOnce(&crate::media::MediaQueue) -> T) -> T {
        let mut media = lock(&self.media);
        let queue = media.get_or_insert_with(|| {
            let http = if self.offline { None } else { Http::new(&self.server, Duration::from_secs(30)).ok() };
            crate::media::MediaQueue::start(http, &self.id, &self.media_spool_dir)
        });
        f(queue)
    }

    /// Media items queued and not yet encoded.
    pub fn pending_media(&self) -> usize {
        lock(&self.media).as_ref().map_or(0, crate::media::MediaQueue::pending)
    }

    /// This process's place in its job (rank, world, node, launcher).
    pub fn job(&self) -> &JobContext {
        &self.membership.job
    }

    /// The attempt of the job this process joined (1 for the first start); 0 while the server
    /// has not answered.
    pub fn attempt(&self) -> i64 {
        self.membership.hear_spooled_join(&self.shared);
        self.membership.attempt()
    }

    /// Whether this process's `log` records anything (rank 0, or every rank with per-rank series).
    pub fn logs_metrics(&self) -> bool {
        self.membership.logs
    }

    /// Stores a metadata section with the run (sent in order with the points).
    pub fn set_metadata(&self, section: &str, value: Value) {
        lock(&self.shared.pending).ops.push(json!({"op": "metadata", "section": section, "body": value}));
        self.shared.wake.notify_one();
    }

    /// Adds params to the run (a nested object becomes dotted keys), sent in order with the
    /// points. With `overwrite`, a new value replaces a stored one of the same key; without, the
    /// server refuses a different value (kept with its answer in the spool's `rejected` file).
    pub fn log_params(&self, params: Value, overwrite: bool) {
        let op = json!({"op": "params", "body": {"params": params, "overwrite": overwrite}});
        lock(&self.shared.pending).ops.push(op);
        self.shared.wake.notify_one();
    }

    /// Raises an alert on the run (`level`: `info`, `warn` or `error`) at the last step this
    /// process logged, sent in order with the points to the project's channels. A repeat of
    /// `title` within `wait` of the last one sent is folded here and not sent (W&B's
    /// `wait_duration`); the server folds repeats from other processes within `wait` too.
    /// Answers whether it was sent.
    pub fn alert(&self, title: &str, text: &str, level: &str, wait: Duration) -> bool {
        if self.is_finished() {
            return false;
        }
        {
            let mut sent = lock(&self.alerts_sent);
            let now = Instant::now();
            if sent.get(title).is_some_and(|last| now.duration_since(*last) < wait) {
                return false;
            }
            if sent.len() >= 10_000 {
                sent.clear();
            }
            sent.insert(title.to_owned(), now);
        }
        let step = self.membership.last_step();
        let body =
            json!({"title": title, "text": text, "level": level, "step": step, "wait_duration": wait.as_secs_f64()});
        lock(&self.shared.pending).ops.push(json!({"op": "alert", "body": body}));
        self.shared.wake.notify_one();
        true
    }

    /// Points logged but not yet acknowledged by the server or written to the spool.
    pub fn pending_points(&self) -> u64 {
        self.shared.waiting.load(Ordering::Relaxed)
    }

    /// Whether the run is writing to its spool (server unreachable, or offline mode).
    pub fn is_spooling(&self) -> bool {
        self.shared.spooling.load(Ordering::Relaxed)
    }

    /// Waits until everything logged so far, media too, is sent (or spooled), at most `timeout`.
    pub fn flush(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        lock(&self.shared.pending).flushes.push(tx);
        self.shared.wake.notify_one();
        let points = rx.recv_timeout(timeout).is_ok();
        let media = match lock(&self.media).as_ref() {
            Some(q) => q.flush(deadline.saturating_duration_since(Instant::now())),
            None => true,
        };
        points && media
    }

    /// Ends the run as `finished`, waiting up to 60 s for what is queued.
    pub fn finish(&self) -> Result<FinishSummary> {
        self.finish_with("finished", Duration::from_secs(60))
    }

    /// Ends the run with `status` (finished, failed, killed, preempted). Sends what is queued
    /// until `timeout`, then spools the rest, so it returns in about `timeout` at most. Answers
    /// how many points were acknowledged, spooled, rejected and unsaved; anything rejected or
    /// unsaved is also reported on stderr.
    pub fn finish_with(&self, status: &str, timeout: Duration) -> Result<FinishSummary> {
        self.finish_because(status, timeout, None, None)
    }

    /// [`finish_with`](Self::finish_with), saying why this process ended (an exception, a
    /// signal) and the last lines it printed: the run's attempt shows them for a failed rank.
    pub fn finish_because(
        &self,
        status: &str,
        timeout: Duration,
        reason: Option<&str>,
        last_lines: Option<&str>,
    ) -> Result<FinishSummary> {
        trainlog_schema::RunStatus::parse("status", status).map_err(|e| Error::Invalid(e.to_string()))?;
        if self.finished.swap(true, Ordering::SeqCst) {
            return Err(Error::Finished);
        }
        // The console first: its last lines go before the run's end.
        let console = lock(&self.console).take().map(|c| c.stop(CONSOLE_DRAIN.min(timeout)));
        if let Some(sampler) = lock(&self.sampler).take() {
            sampler.stop();
        }
        let deadline = Instant::now() + timeout;
        let process = self.membership.report_body(reason, last_lines);
        let op = json!({"op": "finish", "body": {"status": status, "end_time": crate::now_ms(), "process": process}});
        lock(&self.shared.pending).finish = Some((op, deadline));
        self.shared.wake.notify_one();
        let handle = lock(&self.sender).take();
        // The sender spools whatever is left at the deadline, so this join is bounded.
        let summary = match handle.map(JoinHandle::join) {
            Some(Ok(summary)) => summary,
            Some(Err(_)) | None => {
                let unsaved = self.shared.waiting.load(Ordering::Relaxed);
                let warning =
                    format!("the sender thread of run {} stopped early; {unsaved} points were not saved", self.id);
                eprintln!("trainlog: {warning}");
                FinishSummary { unsaved, warnings: vec![warning], ..FinishSummary::default() }
            }
        };
        let mut summary = summary;
        if let Some(counts) = console {
            summary.console_lines = counts.lines;
            summary.console_lines_dropped = counts.dropped;
        }
        if let Some(media) = lock(&self.media).take() {
            let counts = media.finish(deadline);
            summary.media_sent = counts.sent;
            summary.media_spooled = counts.spooled;
            summary.media_rejected = counts.rejected;
            summary.media_dropped = counts.dropped;
            summary.warnings.extend(counts.warnings);
        }
        *lock(&self.summary) = Some(summary.clone());
        Ok(summary)
    }

    /// What `finish` answered, once the run is finished.
    pub fn finish_summary(&self) -> Option<FinishSummary> {
        lock(&self.summary).clone()
    }

    pub fn is_finished(&self) -> bool {
        self.finished.load(Ordering::SeqCst)
    }
}

/// How long `finish` waits for the lines still in the console's pipes.
const CONSOLE_DRAIN: Duration = Duration::from_secs(1);

impl Drop for Run {
    fn drop(&mut self) {
        if !self.is_finished() {
            let status = if std::thread::panicking() { "failed" } else { "finished" };
            let _ = self.finish_with(status, Duration::from_secs(30));
        }
    }
}
