//! The `trainlog` command line: `trainlog server`, `sync`, `import`, `models`, `sweep` and `agent`. Shared by
//! the binary and the Python package's console script; the only crate that links both the server
//! and the SDK.

mod admin;
mod alerts;
mod alerts_file;
mod logs;
mod mlflow_import;
mod prices;
mod report;

pub use report::OVER_BUDGET;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use trainlog_server::{serve, ServerConfig, DEFAULT_PORT};

#[derive(Parser)]
#[command(name = "trainlog", version, about = "trainlog: experiment tracking for machine-learning training")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the tracking server.
    Server {
        /// Address to bind.
        #[arg(long, env = "TRAINLOG_HOST", default_value = "127.0.0.1")]
        host: String,
        /// Port to bind; 0 picks a free one.
        #[arg(long, env = "TRAINLOG_PORT", default_value_t = DEFAULT_PORT)]
        port: u16,
        /// Folder for the SQLite database, the write-ahead log and the default local object store.
        #[arg(long, env = "TRAINLOG_DATA", default_value = "./trainlog-data")]
        data: PathBuf,
        /// Object store URL for Parquet files (file:///abs/dir, s3://bucket/prefix); default DATA/store.
        #[arg(long, env = "TRAINLOG_STORE")]
        store: Option<String>,
        /// The metadata database: postgres://user@host:port/database (several servers may share
        /// it, with the same --store), or sqlite:///path; default the SQLite file DATA/trainlog.db.
        #[arg(long, env = "TRAINLOG_META")]
        meta: Option<String>,
        /// Seconds without a heartbeat after which a sweep trial's node is taken as lost.
        #[arg(long, env = "TRAINLOG_TRIAL_TIMEOUT", default_value_t = 60)]
        trial_timeout: u64,
        /// Host names this server answers to besides the bound address (comma-separated; `*`
        /// for any). Requests naming another host get 421, which stops DNS rebinding.
        #[arg(long, env = "TRAINLOG_ALLOWED_HOSTS", value_delimiter = ',')]
        allowed_hosts: Vec<String>,
        /// Seconds after which acknowledged points still only in the write-ahead log and memory
        /// are written to the object store (sooner after 500,000 points). It bounds what is lost
        /// with the data folder of a server that never comes back; the log covers every crash
        /// the folder survives.
        #[arg(long, env = "TRAINLOG_PERSIST_INTERVAL", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=86_400))]
        persist_interval: u64,
        /// Bytes of buffered points (24 a point) above which ingest answers 503 with Retry-After
        /// while the object store is slow or away; the SDKs spool and send again.
        #[arg(long, env = "TRAINLOG_MAX_BUFFER_BYTES", default_value_t = trainlog_store::DEFAULT_MAX_BUFFER_BYTES)]
        max_buffer_bytes: usize,
        /// Every API route but the health check needs an API key (`trainlog users add`). The
        /// first start without users creates `admin` and writes its key to DATA/admin.key.
        #[arg(long, env = "TRAINLOG_AUTH", value_parser = clap::builder::BoolishValueParser::new(), num_args = 0..=1, default_missing_value = "true", default_value = "false")]
        auth: bool,
        /// Serve an address other machines can reach without --auth (behind a proxy that checks
        /// who calls). Without either, such an address is refused.
        #[arg(long, conflicts_with = "auth")]
        insecure_no_auth: bool,
        /// With --auth: the role every user gets on a project or model they hold no role of
        /// their own on (`trainlog grant`): none, read or write.
        #[arg(long, env = "TRAINLOG_DEFAULT_PERMISSION", default_value = "read", value_parser = ["none", "read", "write"])]
        default_permission: String,
        /// Serve HTTPS with this certificate chain (PEM); needs --tls-key.
        #[arg(long, env = "TRAINLOG_TLS_CERT", requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// The private key (PEM) of --tls-cert.
        #[arg(long, env = "TRAINLOG_TLS_KEY", requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// With --auth: a file whose first line is the key (32 characters or more) a metrics
        /// scraper sends as `Authorization: Bearer` to read all of /metrics, projects' budgets
        /// and spend included, which other keys but server admins' do not see.
        #[arg(long, env = "TRAINLOG_METRICS_KEY_FILE", requires = "auth")]
        metrics_key_file: Option<PathBuf>,
        /// With --auth: failed key checks one address may make in a minute before its requests
        /// answer 429 until the minute ends; 0 for no limit (behind a proxy that limits itself).
        #[arg(long, env = "TRAINLOG_MAX_KEY_FAILURES", default_value_t = trainlog_server::DEFAULT_MAX_KEY_FAILURES)]
        max_key_failures: u32,
        /// Seconds a request body may pause; past them a body must also keep up 16 KiB/s on
        /// average. A body that does not answers 408.
        #[arg(long, env = "TRAINLOG_BODY_TIMEOUT_S", default_value_t = trainlog_server::BODY_TIMEOUT.as_secs_f64(), value_parser = positive_seconds)]
        body_timeout_s: f64,
        /// Points one read of metric series may cost (their summaries' counts, checked before
        /// reading); a read past it answers 400 over_budget. At most the default.
        #[arg(long, env = "TRAINLOG_MAX_QUERY_POINTS", default_value_t = trainlog_server::MAX_QUERY_POINTS, value_parser = clap::value_parser!(u64).range(1..=trainlog_server::MAX_QUERY_POINTS))]
        max_query_points: u64,
        /// Seconds without a heartbeat from any process of a running job after which the
        /// server ends its attempt, and its run, `lost` (a process that speaks again opens a
        /// new attempt). The SDK sends one every 30 s.
        #[arg(long, env = "TRAINLOG_LOST_AFTER_S", default_value_t = trainlog_server::DEFAULT_LOST_AFTER.as_secs_f64(), value_parser = positive_seconds)]
        lost_after_s: f64,
        /// Seconds between checks of the alert rules on projects' budgets and report figures
        /// (`budget 80%`, `utilization < 50% for 6h`, `cost spike`…).
        #[arg(long, env = "TRAINLOG_PROJECT_RULES_EVERY_S", default_value_t = 60.0, value_parser = positive_seconds)]
        project_rules_every_s: f64,
        /// The SMTP relay e-mail alerts go through: smtp://[USER@]HOST[:PORT] (STARTTLS, 587 by
        /// default) or smtps://… (TLS, 465); mail is never sent in clear text.
        #[arg(long, env = "TRAINLOG_SMTP_URL", requires = "smtp_from")]
        smtp_url: Option<String>,
        /// The address alert mails come from (`trainlog <alerts@example.com>`).
        #[arg(long, env = "TRAINLOG_SMTP_FROM")]
        smtp_from: Option<String>,
        /// A file holding the SMTP user's password.
        #[arg(long, env = "TRAINLOG_SMTP_PASSWORD_FILE")]
        smtp_password_file: Option<PathBuf>,
        /// PEM certificates to trust for the relay besides the system's (a private relay's CA).
        #[arg(long, env = "TRAINLOG_SMTP_CA_FILE")]
        smtp_ca_file: Option<PathBuf>,
    },
    /// Give a user a role on a project (or with --model, a registered model), in the server's
    /// data folder (the server may be running): none, read, write or admin.
    Grant {
        user: String,
        /// The project's name (the model's with --model).
        project: String,
        /// none, read, write or admin.
        #[arg(value_parser = ["none", "read", "write", "admin"])]
        role: String,
        /// PROJECT names a registered model.
        #[arg(long)]
        model: bool,
        /// The server's data folder.
        #[arg(long, env = "TRAINLOG_DATA", default_value = "./trainlog-data")]
        data: PathBuf,
        /// The metadata database: postgres://user@host:port/database, or sqlite:///path; default
        /// the SQLite file in the data folder.
        #[arg(long, env = "TRAINLOG_META")]
        meta: Option<String>,
    },
    /// Check an API key against a server and save it in ~/.trainlog/credentials (0600), where
    /// the SDKs and every command find it when TRAINLOG_API_KEY is not set.
    Login {
        /// Server URL; default TRAINLOG_SERVER, else the local default.
        #[arg(env = "TRAINLOG_SERVER")]
        server: Option<String>,
        /// The key; else TRAINLOG_API_KEY, else a line read from standard input.
        #[arg(long)]
        key: Option<String>,
    },
    /// Users of a server run with --auth, in its data folder (the server may be running).
    Users {
        /// The server's data folder.
        #[arg(long, env = "TRAINLOG_DATA", default_value = "./trainlog-data", global = true)]
        data: PathBuf,
        /// The metadata database: postgres://user@host:port/database, or sqlite:///path; default
        /// the SQLite file in the data folder.
        #[arg(long, env = "TRAINLOG_META", global = true)]
        meta: Option<String>,
        #[command(subcommand)]
        action: UsersCommand,
    },
    /// API keys of a server run with --auth, in its data folder (the server may be running).
    Keys {
        /// The server's data folder.
        #[arg(long, env = "TRAINLOG_DATA", default_value = "./trainlog-data", global = true)]
        data: PathBuf,
        /// The metadata database: postgres://user@host:port/database, or sqlite:///path; default
        /// the SQLite file in the data folder.
        #[arg(long, env = "TRAINLOG_META", global = true)]
        meta: Option<String>,
        #[command(subcommand)]
        action: KeysCommand,
    },
    /// The spend ledger: runs deleted for good whose spend the report still adds up (the server
    /// may be running).
    Ledger {
        /// The server's data folder.
        #[arg(long, env = "TRAINLOG_DATA", default_value = "./trainlog-data", global = true)]
        data: PathBuf,
        /// The metadata database: postgres://user@host:port/database, or sqlite:///path; default
        /// the SQLite file in the data folder.
        #[arg(long, env = "TRAINLOG_META", global = true)]
        meta: Option<String>,
        #[command(subcommand)]
        action: LedgerCommand,
    },
    /// A run's console lines: every rank's stdout and stderr, filtered (`--rank`, `--stream`,
    /// `--attempt`), searched (`--grep`, `--search`), the last ones (`--tail`), followed (`-f`).
    Logs(logs::LogsArgs),
    /// Ask a running run to stop: its processes see it with their next heartbeat, and the run
    /// ends `killed`, saying who stopped it.
    Stop {
        run_id: String,
        /// Why, as the run's end will say.
        #[arg(long, default_value = "")]
        reason: String,
        /// Server URL; default TRAINLOG_SERVER, else the local default.
        #[arg(long, env = "TRAINLOG_SERVER")]
        server: Option<String>,
    },
    /// A project's alerts, and where they go: `alerts list`, `alerts channel add|list|remove`,
    /// `alerts deliveries`.
    Alerts {
        /// Server URL; default TRAINLOG_SERVER, else the local default.
        #[arg(long, env = "TRAINLOG_SERVER", global = true)]
        server: Option<String>,
        #[command(subcommand)]
        action: alerts::AlertsCommand,
    },
    /// The model registry: list, show, alias, download.
    Models {
        /// Server URL; default TRAINLOG_SERVER, else the local default.
        #[arg(long, env = "TRAINLOG_SERVER", global = true)]
        server: Option<String>,
        #[command(subcommand)]
        action: ModelsCommand,
    },
    /// Hyperparameter sweeps: create one from a sweep file, run it here, see or change its state.
    Sweep {
        /// Server URL; default TRAINLOG_SERVER, else the local default.
        #[arg(long, env = "TRAINLOG_SERVER", global = true)]
        server: Option<String>,
        #[command(subcommand)]
        action: SweepCommand,
    },
    /// Run trials of a sweep on this machine, one per slot, until the sweep is finished.
    Agent {
        sweep_id: String,
        /// Server URL; default TRAINLOG_SERVER, else the local default.
        #[arg(long, env = "TRAINLOG_SERVER")]
        server: Option<String>,
        /// The agent's name in the sweep's trials, HOST:ID (default: this host's name and the
        /// agent's pid); the part before the first `:` is recorded as the trials' host.
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        slots: SlotArgs,
    },
    /// Bring a metadata database's schema to this version (the server does it too when it starts).
    Migrate {
        /// The metadata database: postgres://user@host:port/database, or sqlite:///path.
        #[arg(long, env = "TRAINLOG_META")]
        meta: String,
    },
    /// Metadata database tools.
    Meta {
        #[command(subcommand)]
        action: MetaCommand,
    },
    /// Copy another tracker's history into a trainlog server.
    Import {
        #[command(subcommand)]
        what: ImportCommand,
    },
    /// The training report: cost, GPU utilization, queue wait and failures of the runs, grouped.
    Report(report::ReportArgs),
    /// The installation's prices: import a catalog, set your own rates, list them.
    Prices {
        /// Server URL; default TRAINLOG_SERVER, else the local default.
        #[arg(long, env = "TRAINLOG_SERVER", global = true)]
        server: Option<String>,
        #[command(subcommand)]
        action: prices::PricesCommand,
    },
    /// Send the spools that runs left on this machine (offline runs, or runs whose process died
    /// while the server was unreachable).
    Sync {
        /// Server to send to; default: the one each run was logging to.
        #[arg(long, env = "TRAINLOG_SERVER")]
        server: Option<String>,
        /// Spool folder; default ~/.trainlog/spool (or $TRAINLOG_DIR/spool).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Also send spools of processes still running.
        #[arg(long)]
        include_live: bool,
    },
}

#[derive(Subcommand)]
enum ImportCommand {
    /// Copy an MLflow installation: experiments, runs (with their ids, times, params, tags,
    /// every metric point and artifacts), logged models and the model registry. Run it again to
    /// finish an import that stopped: what is already copied is skipped.
    Mlflow {
        /// The MLflow server (http://host:5000; MLFLOW_TRACKING_TOKEN or
        /// MLFLOW_TRACKING_USERNAME/PASSWORD are sent) or its database (sqlite:///path/mlflow.db).
        #[arg(long = "from")]
        from: String,
        /// With sqlite:///: the MLflow server's --artifacts-destination folder, where its
        /// mlflow-artifacts: URIs point.
        #[arg(long)]
        artifacts: Option<PathBuf>,
        /// The trainlog server to copy into; default TRAINLOG_SERVER, else the local default.
        #[arg(long, env = "TRAINLOG_SERVER")]
        server: Option<String>,
    },
}

#[derive(Subcommand)]
enum MetaCommand {
    /// Copy every row of one metadata database into another, empty one (made and migrated if
    /// needed), e.g. from SQLite to PostgreSQL; stop the servers using the source first. Metric
    /// files and artifacts stay where they are: start the servers with the same --store.
    Copy {
        /// sqlite:///path/to/trainlog.db or postgres://…
        #[arg(long = "from")]
        from: String,
        /// postgres://… or sqlite:///path
        #[arg(long)]
        to: String,
    },
}

#[derive(Subcommand)]
enum UsersCommand {
    /// Create a user; its first API key is the last line printed.
    Add {
        name: String,
        /// The user may do anything on every project.
        #[arg(long)]
        admin: bool,
    },
    /// List users.
    List,
    /// Remove a user and their keys (what they logged stays).
    Remove { name: String },
}

#[derive(Subcommand)]
enum LedgerCommand {
    /// List the runs in the ledger: id, project, user, started, deleted, cost, GPU-hours.
    List,
    /// Remove runs from the ledger for good: the report, budgets and /metrics stop counting what
    /// they spent.
    Forget {
        #[arg(required = true)]
        run_ids: Vec<String>,
    },
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Make another API key for a user; the key is the last line printed.
    Create { user: String },
    /// Revoke a key by its id (the part after `tl_`, before the second `_`).
    Revoke { key_id: String },
    /// List keys: id, user, created, last used, revoked.
    List { user: Option<String> },
}

fn login(server: Option<&str>, key: Option<String>) -> Result<String, String> {
    let server = trainlog::server_url(server);
    let key = match key.or_else(|| std::env::var("TRAINLOG_API_KEY").ok().filter(|k| !k.trim().is_empty())) {
        Some(k) => k,
        None => {
            eprint!("API key for {server}: ");
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).map_err(|e| format!("reading the key: {e}"))?;
            line
        }
    };
    let key = key.trim();
    if key.is_empty() {
        return Err("no key given".into());
    }
    let path = trainlog::credentials::login(&server, key).map_err(|e| e.to_string())?;
    Ok(format!("the key works; saved it for {server} in {}", path.display()))
}

fn migrate(meta: &str) -> Result<String, String> {
    let url = trainlog_meta::MetaUrl::parse(meta).map_err(|e| e.to_string())?;
    let (before, now) = trainlog_meta::MetaStore::migrate(&url).map_err(|e| format!("{}: {e}", url.redacted()))?;
    Ok(if before == now {
        format!("{} is at schema version {now}, this build's newest", url.redacted())
    } else {
        format!("{}: schema version {before} → {now}", url.redacted())
    })
}

fn meta_command(action: MetaCommand) -> Result<String, String> {
    match action {
        MetaCommand::Copy { from, to } => {
            let from = trainlog_meta::MetaUrl::parse(&from).map_err(|e| format!("--from: {e}"))?;
            let to = trainlog_meta::MetaUrl::parse(&to).map_err(|e| format!("--to: {e}"))?;
            let copied = trainlog_meta::copy(&from, &to).map_err(|e| e.to_string())?;
            let total: u64 = copied.iter().map(|(_, n)| n).sum();
            let mut out = format!("copied {total} rows from {} to {}\n", from.redacted(), to.redacted());
            for (table, rows) in copied.iter().filter(|(_, n)| *n > 0) {
                out += &format!("{table}\t{rows}\n");
            }
            Ok(out)
        }
    }
}

#[derive(clap::Args, Clone)]
struct SlotArgs {
    /// GPUs to run trials on: indices, GPU or MIG UUIDs (comma-separated), or `all`.
    #[arg(long)]
    gpus: Option<String>,
    /// Trials sharing each GPU.
    #[arg(long, default_value_t = 1)]
    slots_per_gpu: u32,
    /// On a machine without GPUs: how many trials run at once.
    #[arg(long)]
    cpu_slots: Option<u32>,
    /// Seconds between SIGTERM and SIGKILL when a pruned trial does not exit.
    #[arg(long, default_value_t = 10)]
    grace: u64,
    /// Claim at most this many trials, then finish those and exit.
    #[arg(long)]
    max_trials: Option<u64>,
    /// Stop claiming trials, and exit non-zero with the first failure's reason and last lines,
    /// when this many of this agent's first trials all fail; 0: never.
    #[arg(long, env = "TRAINLOG_MAX_INITIAL_FAILURES", default_value_t = 3)]
    max_initial_failures: u64,
    /// Submit trials to Slurm with sbatch instead of running them here.
    #[arg(long)]
    slurm: bool,
    /// Slurm partition for the trials.
    #[arg(long, requires = "slurm")]
    partition: Option<String>,
    /// GPUs each trial gets: here, slots of N GPUs from --gpus; on Slurm, --gres=gpu:N.
    #[arg(long, default_value_t = 1)]
    gpus_per_trial: u32,
    /// Slurm trials queued or running at once.
    #[arg(long, default_value_t = 4, requires = "slurm")]
    max_concurrent: u32,
    /// Folder for the trials' job scripts and output, reachable from the compute nodes.
    #[arg(long, default_value = "trainlog-slurm", requires = "slurm")]
    slurm_dir: PathBuf,
    /// More sbatch options (repeat the flag), e.g. --sbatch-arg=--time=2:00:00.
    #[arg(long, allow_hyphen_values = true, requires = "slurm")]
    sbatch_arg: Vec<String>,
}

#[derive(Subcommand)]
enum SweepCommand {
    /// Store a sweep on the server and print its id.
    Create {
        #[command(flatten)]
        sweep: SweepFileArgs,
    },
    /// Create a sweep and run an agent for it on this machine.
    Run {
        #[command(flatten)]
        sweep: SweepFileArgs,
        #[command(flatten)]
        slots: SlotArgs,
    },
    /// Create a sweep and submit its trials to Slurm (an agent with --slurm, on this machine).
    Submit {
        #[command(flatten)]
        sweep: SweepFileArgs,
        #[command(flatten)]
        slots: SlotArgs,
    },
    /// Trials, their state, the best so far, money and GPU-hours spent.
    Status { id: String },
    /// Start no more trials and ask running ones to stop.
    Stop { id: String },
    /// Start trials again after a stop.
    Resume { id: String },
    /// Print Kubernetes manifests that run the sweep's trials as pods (one agent per pod).
    K8sManifest {
        id: String,
        #[command(flatten)]
        options: K8sArgs,
    },
    /// Print a SkyPilot task that runs a sweep agent as a managed job; launch it with
    /// `sky jobs launch --num-jobs N` (one agent and cluster per job; recovered after preemption).
    Skypilot {
        id: String,
        #[command(flatten)]
        options: SkypilotArgs,
    },
}

/// A sweep file and where its trials go.
#[derive(clap::Args)]
struct SweepFileArgs {
    file: PathBuf,
    /// Project of the trials; else the file's `project:`.
    #[arg(long)]
    project: Option<String>,
    #[arg(long)]
    name: Option<String>,
}

#[derive(clap::Args)]
struct K8sArgs {
    /// Image with the trial's code, Python and the trainlog package.
    #[arg(long)]
    image: String,
    /// The server's URL as pods reach it; default: the one this command talks to.
    #[arg(long)]
    pod_server: Option<String>,
    #[arg(long)]
    namespace: Option<String>,
    #[arg(long, default_value_t = 1)]
    gpus_per_trial: u32,
    /// Trials running at once.
    #[arg(long, default_value_t = 4)]
    max_concurrent: u32,
    /// Trials in all; default the sweep's run_cap or grid size.
    #[arg(long)]
    trials: Option<u32>,
    /// One Job per trial (the default for TPE) or one Indexed Job (the default otherwise).
    #[arg(long)]
    job_per_trial: Option<bool>,
    /// Failed pods per trial before it is given up; preemptions do not count.
    #[arg(long, default_value_t = 3)]
    retries: u32,
}

#[derive(clap::Args)]
struct SkypilotArgs {
    /// Accelerators of each job's node, as SkyPilot names them: NAME:COUNT (A100:1, H100:8);
    /// none runs trials on CPU.
    #[arg(long, value_parser = clap::value_parser!(trainlog::skypilot::Accelerators))]
    gpus: Option<trainlog::skypilot::Accelerators>,
    /// Devices each trial gets (a node runs COUNT / N trials at once); default all of the node's.
    #[arg(long, requires = "gpus", value_parser = clap::value_parser!(u32).range(1..=1024))]
    gpus_per_trial: Option<u32>,
    /// Spot instances (`use_spot`): SkyPilot recovers a preempted job on a new one.
    #[arg(long)]
    spot: bool,
    /// Cloud to run on (aws, gcp, azure, k8s, ...); default: SkyPilot picks among those enabled.
    #[arg(long, value_parser = trainlog::skypilot::parse_infra_part)]
    cloud: Option<String>,
    /// Region (or Kubernetes context) to run in; default: any.
    #[arg(long, value_parser = trainlog::skypilot::parse_infra_part)]
    region: Option<String>,
    /// Container image with the trial's code and trainlog (`image_id: docker:IMAGE`).
    #[arg(long)]
    image: Option<String>,
    /// A trainlog wheel here (`maturin build --release` in client-py/), uploaded to each node and
    /// installed there. Without --wheel, --image or --setup the nodes install this release of
    /// `trainlog-ml` from PyPI.
    #[arg(long)]
    wheel: Option<String>,
    /// Setup commands for the trial's dependencies, run after the wheel is installed (and
    /// installing trainlog themselves without --wheel or --image).
    #[arg(long)]
    setup: Option<String>,
    /// Folder with the trial's code, uploaded by SkyPilot; the agent runs in it.
    #[arg(long)]
    workdir: Option<String>,
    /// Agents to launch, one managed job and cluster each (`sky jobs launch --num-jobs N`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    workers: u32,
    /// The server's URL as the jobs' machines reach it; default: the one this command talks to.
    #[arg(long)]
    job_server: Option<String>,
    /// The server runs without --auth: the task asks for no TRAINLOG_API_KEY at launch.
    #[arg(long)]
    no_api_key: bool,
    /// Write the task to this file instead of printing it.
    #[arg(long)]
    output: Option<PathBuf>,
}

#[derive(Subcommand)]
enum ModelsCommand {
    /// Registered models, optionally those whose name or tags contain SEARCH.
    List { search: Option<String> },
    /// A model with its versions, or one version (by number or alias) with its lineage.
    Show { name: String, version: Option<String> },
    /// Point ALIAS (champion, staging, …) at VERSION.
    Alias { name: String, alias: String, version: String },
    /// Download a version's files into DEST, verified against their checksums.
    Download { name: String, version: String, dest: PathBuf },
}

fn models(server: Option<&str>, action: ModelsCommand) -> Result<String, trainlog::Error> {
    let api = trainlog::Api::new(server)?;
    let pretty = |v: &serde_json::Value| serde_json::to_string_pretty(v).unwrap_or_default();
    Ok(match action {
        ModelsCommand::List { search } => {
            let mut out = String::new();
            for m in api.models(search.as_deref().unwrap_or(""))? {
                let aliases: Vec<String> = m["aliases"]
                    .as_object()
                    .map(|a| a.iter().map(|(k, v)| format!("{k}=v{v}")).collect())
                    .unwrap_or_default();
                out.push_str(&format!(
                    "{}\t{} version(s)\tlatest v{}\t{}\n",
                    m["name"].as_str().unwrap_or_default(),
                    m["version_count"],
                    m["latest_version"],
                    aliases.join(" ")
                ));
            }
            out
        }
        ModelsCommand::Show { name, version: Some(v) } => pretty(&api.model_version(&name, &v)?),
        ModelsCommand::Show { name, version: None } => {
            let mut model = api.model(&name)?;
            model["versions"] = serde_json::Value::Array(api.model_versions(&name)?);
            pretty(&model)
        }
        ModelsCommand::Alias { name, alias, version } => {
            let v = api.set_model_alias(&name, &alias, &version)?;
            format!("{alias} -> version {} of {name}", v["version"])
        }
        ModelsCommand::Download { name, version, dest } => {
            let v = api.download_model_version(&name, &version, &dest)?;
            format!(
                "downloaded version {} of {name} ({} file(s)) to {}",
                v["version"],
                v["files"].as_array().map_or(0, Vec::len),
                dest.display()
            )
        }
    })
}

/// Reads and checks a sweep file here, so a mistake is reported with the file's name and line.
fn read_sweep_file(file: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    trainlog_sweep::config::parse(&text)
        .map_err(|e| format!("{}:{}: {}: {}", file.display(), e.line, e.field, e.reason))?;
    Ok(text)
}

/// Creates the sweep of a sweep file on the server; answers its id.
fn create_sweep(server: Option<&str>, sweep: &SweepFileArgs) -> Result<String, String> {
    let text = read_sweep_file(&sweep.file)?;
    let api = trainlog::Api::new(server).map_err(|e| e.to_string())?;
    let created =
        api.create_sweep(&text, sweep.project.as_deref(), sweep.name.as_deref()).map_err(|e| e.to_string())?;
    let id = created["id"].as_str().unwrap_or_default().to_owned();
    eprintln!("trainlog: created sweep {id} in project {}", created["project"].as_str().unwrap_or_default());
    Ok(id)
}

fn agent(server: Option<&str>, sweep_id: &str, slots: &SlotArgs, name: Option<String>) -> Result<String, String> {
    let list = if slots.slurm {
        (0..slots.max_concurrent.max(1))
            .map(|k| trainlog::agent::Slot {
                name: format!("slurm:{k}"),
                cuda_visible_devices: None,
                gpus: f64::from(slots.gpus_per_trial),
            })
            .collect()
    } else {
        trainlog::agent::slots(slots.gpus.as_deref(), slots.slots_per_gpu, slots.gpus_per_trial, slots.cpu_slots)
            .map_err(|e| e.to_string())?
    };
    let mut config = trainlog::agent::AgentConfig::new(sweep_id, list);
    if slots.slurm {
        config.slurm = Some(trainlog::slurm::SlurmOptions {
            partition: slots.partition.clone(),
            gpus_per_trial: slots.gpus_per_trial,
            dir: std::path::absolute(&slots.slurm_dir).map_err(|e| e.to_string())?,
            extra_args: slots.sbatch_arg.clone(),
        });
    }
    config.server = server.map(str::to_owned);
    config.grace = std::time::Duration::from_secs(slots.grace);
    config.max_trials = slots.max_trials;
    config.max_initial_failures = slots.max_initial_failures;
    config.name = name;
    let report = trainlog::agent::run_agent(&config).map_err(|e| e.to_string())?;
    Ok(format!("agent done: {} trial(s) run here; {}", report.trials.len(), report.reason))
}

fn set_running(server: Option<&str>, id: &str, running: bool) -> Result<String, String> {
    let api = trainlog::Api::new(server).map_err(|e| e.to_string())?;
    let s = api.set_sweep_running(id, running).map_err(|e| e.to_string())?;
    Ok(format!("sweep {id} is {}", s["state"].as_str().unwrap_or_default()))
}

fn k8s_manifest(server: Option<&str>, id: &str, o: K8sArgs) -> Result<String, String> {
    let api = trainlog::Api::new(server).map_err(|e| e.to_string())?;
    let s = api.sweep(id).map_err(|e| e.to_string())?;
    let trials = o
        .trials
        .or(s["run_cap"].as_u64().map(|n| n as u32))
        .or(s["grid_size"].as_u64().map(|n| n as u32))
        .ok_or("the sweep has no run_cap: give --trials")?;
    let options = trainlog::k8s::ManifestOptions {
        sweep_id: id.to_owned(),
        server: o.pod_server.unwrap_or_else(|| trainlog::server_url(server)),
        image: o.image,
        namespace: o.namespace,
        gpus_per_trial: o.gpus_per_trial,
        parallelism: o.max_concurrent,
        trials,
        job_per_trial: o.job_per_trial.unwrap_or(s["method"] == "tpe"),
        retries: o.retries,
    };
    Ok(trainlog::k8s::manifest_yaml(&options))
}

fn skypilot_task(server: Option<&str>, id: &str, o: SkypilotArgs) -> Result<String, String> {
    let api = trainlog::Api::new(server).map_err(|e| e.to_string())?;
    let s = api.sweep(id).map_err(|e| e.to_string())?;
    let job_server = o.job_server.unwrap_or_else(|| trainlog::server_url(server));
    if ["://127.", "://localhost", "://[::1]", "://0.0.0.0"].iter().any(|h| job_server.contains(h)) {
        eprintln!("trainlog: warning: the jobs would reach the server at {job_server}, on their own machine; give --job-server");
    }
    if o.spot {
        let retries =
            s["config"].as_str().and_then(|text| trainlog_sweep::config::parse(text).ok()).map_or(2, |c| c.max_retries);
        eprintln!("trainlog: note: on spot instances each preemption of a trial counts against the sweep's max_retries ({retries})");
    }
    let options = trainlog::skypilot::TaskOptions {
        sweep_id: s["id"].as_str().unwrap_or(id).to_owned(),
        server: job_server,
        accelerators: o.gpus,
        gpus_per_trial: o.gpus_per_trial,
        use_spot: o.spot,
        cloud: o.cloud,
        region: o.region,
        image: o.image,
        setup: o.setup,
        wheel: o.wheel,
        workdir: o.workdir,
        workers: o.workers,
        api_key: !o.no_api_key,
    };
    let text = trainlog::skypilot::task_yaml(&options)?;
    let Some(path) = o.output else { return Ok(text) };
    std::fs::write(&path, &text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(format!(
        "wrote {}; launch with:\n{}",
        path.display(),
        trainlog::skypilot::launch_command(&options, &path.display().to_string())
    ))
}

fn money(v: &serde_json::Value) -> String {
    v.as_f64().map_or_else(|| "-".into(), |x| format!("${x:.2}"))
}

fn sweep_status(server: Option<&str>, id: &str) -> Result<String, trainlog::Error> {
    let api = trainlog::Api::new(server)?;
    let s = api.sweep(id)?;
    let trials = api.sweep_trials(id)?;
    let metric = s["metric"]["name"].as_str().unwrap_or_default().to_owned();
    let mut out = format!(
        "sweep {} ({}) in project {}: {}{}\nmethod {}, metric {} ({}), {} trial(s) {}\n",
        s["id"].as_str().unwrap_or_default(),
        s["name"].as_str().unwrap_or_default(),
        s["project"].as_str().unwrap_or_default(),
        s["state"].as_str().unwrap_or_default(),
        s["ended_reason"].as_str().filter(|r| !r.is_empty()).map(|r| format!(" ({r})")).unwrap_or_default(),
        s["method"].as_str().unwrap_or_default(),
        metric,
        s["metric"]["goal"].as_str().unwrap_or_default(),
        s["trial_count"],
        s["counts"],
    );
    if s["best"].is_object() {
        out.push_str(&format!(
            "best: trial {} {metric}={} {}\n",
            s["best"]["trial"], s["best"]["value"], s["best"]["params"]
        ));
    }
    out.push_str(&format!(
        "spent: {} (budget {}), {:.3} GPU-hours (budget {}); run cap {}\n",
        money(&s["spent"]["usd"]),
        money(&s["budget"]["usd"]),
        s["spent"]["gpu_hours"].as_f64().unwrap_or(0.0),
        s["budget"]["gpu_hours"],
        s["run_cap"],
    ));
    out.push_str("trial\tstate\tattempts\tslot\tmetric\tcost\tparams\n");
    for t in &trials {
        out.push_str(&format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
            t["index"],
            t["state"].as_str().unwrap_or_default(),
            t["attempts"],
            t["slot"].as_str().unwrap_or_default(),
            t["metric"],
            money(&t["cost_usd"]),
            t["params"]
        ));
    }
    Ok(out)
}

/// Seconds, more than 0 and at most a day.
fn positive_seconds(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(s) if s > 0.0 && s <= 86_400.0 => Ok(s),
        _ => Err(format!("expected seconds, more than 0 and at most 86400, got {text:?}")),
    }
}

fn print_result(r: Result<String, String>) -> std::process::ExitCode {
    match r {
        Ok(text) => {
            println!("{}", text.trim_end());
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("trainlog: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Runs the `trainlog` command with `args` (the first is the program name); answers the exit code.
pub fn main_with_args(args: Vec<String>) -> std::process::ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { std::process::ExitCode::from(2) } else { std::process::ExitCode::SUCCESS };
        }
    };
    if !matches!(cli.command, Command::Server { .. }) {
        // A reader that goes away (`trainlog keys list | head -1`) ends the command quietly, as
        // it ends other Unix tools, instead of a panic on the failed write.
        // SAFETY: restores the default action of one signal; no handler runs Rust code.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    match cli.command {
        Command::Agent { sweep_id, server, name, slots } => {
            print_result(agent(server.as_deref(), &sweep_id, &slots, name))
        }
        Command::Sweep { server, action } => {
            let server = server.as_deref();
            match action {
                SweepCommand::Create { sweep } => print_result(create_sweep(server, &sweep)),
                SweepCommand::Run { sweep, slots } => {
                    print_result(create_sweep(server, &sweep).and_then(|id| agent(server, &id, &slots, None)))
                }
                SweepCommand::Submit { sweep, mut slots } => {
                    slots.slurm = true;
                    print_result(create_sweep(server, &sweep).and_then(|id| agent(server, &id, &slots, None)))
                }
                SweepCommand::Status { id } => print_result(sweep_status(server, &id).map_err(|e| e.to_string())),
                SweepCommand::Stop { id } => print_result(set_running(server, &id, false)),
                SweepCommand::Resume { id } => print_result(set_running(server, &id, true)),
                SweepCommand::K8sManifest { id, options } => print_result(k8s_manifest(server, &id, options)),
                SweepCommand::Skypilot { id, options } => print_result(skypilot_task(server, &id, options)),
            }
        }
        Command::Logs(args) => match logs::logs(args) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) if e.is_empty() => std::process::ExitCode::SUCCESS,
            Err(e) => print_result(Err(e)),
        },
        Command::Stop { run_id, reason, server } => print_result(alerts::stop(server.as_deref(), &run_id, &reason)),
        Command::Alerts { server, action } => {
            print_result(alerts::alerts(server.as_deref(), action).map_err(|e| e.to_string()))
        }
        Command::Models { server, action } => match models(server.as_deref(), action) {
            Ok(text) => {
                println!("{}", text.trim_end());
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("trainlog: {e}");
                std::process::ExitCode::FAILURE
            }
        },
        Command::Import { what: ImportCommand::Mlflow { from, artifacts, server } } => {
            let server = trainlog::server_url(server.as_deref());
            print_result(mlflow_import::import(&mlflow_import::Options { from, artifacts, server }))
        }
        Command::Sync { server, dir, include_live } => {
            let dir = dir.unwrap_or_else(trainlog::spool::default_dir);
            match trainlog::sync_all(&dir, server.as_deref(), include_live) {
                Ok(report) => {
                    println!(
                        "synced {} run(s), {} request(s), {} media item(s); {} still owned by a live process; {} failed",
                        report.synced.len(),
                        report.requests,
                        report.media_sent,
                        report.live.len(),
                        report.failed.len()
                    );
                    for (run, why) in &report.failed {
                        eprintln!("trainlog: run {run}: {why}");
                    }
                    if report.failed.is_empty() {
                        std::process::ExitCode::SUCCESS
                    } else {
                        std::process::ExitCode::FAILURE
                    }
                }
                Err(e) => {
                    eprintln!("trainlog: {e}");
                    std::process::ExitCode::FAILURE
                }
            }
        }
        Command::Report(args) => report::run(args),
        Command::Prices { server, action } => print_result(prices::run(server.as_deref(), action)),
        Command::Users { data, meta, action } => print_result(admin::users(&data, meta.as_deref(), action)),
        Command::Login { server, key } => print_result(login(server.as_deref(), key)),
        Command::Keys { data, meta, action } => print_result(admin::keys(&data, meta.as_deref(), action)),
        Command::Ledger { data, meta, action } => print_result(admin::ledger(&data, meta.as_deref(), action)),
        Command::Grant { user, project, role, model, data, meta } => {
            print_result(admin::grant((&data, meta.as_deref()), &user, &project, &role, model))
        }
        Command::Migrate { meta } => print_result(migrate(&meta)),
        Command::Meta { action } => print_result(meta_command(action)),
        Command::Server {
            host,
            port,
            data,
            store,
            meta,
            trial_timeout,
            allowed_hosts,
            persist_interval,
            max_buffer_bytes,
            auth,
            insecure_no_auth,
            default_permission,
            tls_cert,
            tls_key,
            metrics_key_file,
            max_key_failures,
            body_timeout_s,
            max_query_points,
            lost_after_s,
            project_rules_every_s,
            smtp_url,
            smtp_from,
            smtp_password_file,
            smtp_ca_file,
        } => {
            // Fails only when this process already has a subscriber, which then keeps logging.
            tracing_subscriber::fmt()
                .with_writer(std::io::stderr)
                .with_target(false)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_max_level(tracing::Level::WARN)
                .try_init()
                .ok();
            // A panic the server catches (a request body that trips a decoder) is one log line,
            // like every other failure, not a raw message on stderr.
            std::panic::set_hook(Box::new(|panic| tracing::error!("caught a panic: {panic}")));
            let config = ServerConfig {
                host,
                port,
                data_dir: data,
                store_url: store,
                meta_url: meta,
                trial_timeout: std::time::Duration::from_secs(trial_timeout.max(1)),
                allowed_hosts,
                max_buffer_bytes,
                persist_interval: std::time::Duration::from_secs(persist_interval),
                auth,
                insecure_no_auth,
                tls: tls_cert.zip(tls_key).map(|(cert, key)| trainlog_server::TlsFiles { cert, key }),
                metrics_key_file,
                max_key_failures,
                body_timeout: std::time::Duration::from_secs_f64(body_timeout_s),
                max_query_points,
                lost_after: std::time::Duration::from_secs_f64(lost_after_s),
                project_rules_every: std::time::Duration::from_secs_f64(project_rules_every_s),
                smtp: match alerts::smtp_config(smtp_url, smtp_from, smtp_password_file, smtp_ca_file) {
                    Ok(smtp) => smtp,
                    Err(e) => {
                        eprintln!("trainlog: {e}");
                        return std::process::ExitCode::FAILURE;
                    }
                },
                default_role: match trainlog_meta::Role::parse("default-permission", &default_permission) {
                    Ok(role) => role,
                    Err(e) => {
                        eprintln!("trainlog: {e}");
                        return std::process::ExitCode::FAILURE;
                    }
                },
            };
            let system = actix_web::rt::System::with_tokio_rt(|| {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .unwrap_or_else(|e| panic!("could not start the async runtime: {e}"))
            });
            match system.block_on(serve(config)) {
                Ok(()) => std::process::ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("trainlog: {e}");
                    std::process::ExitCode::FAILURE
                }
            }
        }
    }
}
