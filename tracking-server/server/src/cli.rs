//! The `trainlog` command line: `trainlog server`, `trainlog sync`. Shared by the binary and the
//! Python package's console script.

use crate::{serve, ServerConfig, DEFAULT_PORT};
use clap::{Parser, Subcommand};
use std::path::PathBuf;

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
    },
    /// The model registry: list, show, alias, download.
    Models {
        /// Server URL; default TRAINLOG_SERVER, else the local default.
        #[arg(long, env = "TRAINLOG_SERVER", global = true)]
        server: Option<String>,
        #[command(subcommand)]
        action: ModelsCommand,
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

/// Runs the `trainlog` command with `args` (the first is the program name); answers the exit code.
pub fn main_with_args(args: Vec<String>) -> std::process::ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { std::process::ExitCode::from(2) } else { std::process::ExitCode::SUCCESS };
        }
    };
    match cli.command {
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
        Command::Sync { server, dir, include_live } => {
            let dir = dir.unwrap_or_else(trainlog::spool::default_dir);
            match trainlog::sync_all(&dir, server.as_deref(), include_live) {
                Ok(report) => {
                    println!(
                        "synced {} run(s), {} request(s); {} still owned by a live process; {} failed",
                        report.synced.len(),
                        report.requests,
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
        Command::Server { host, port, data, store } => {
            let config = ServerConfig { host, port, data_dir: data, store_url: store };
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
