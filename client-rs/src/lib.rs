//! The trainlog Rust SDK. `Run::builder("project").config(json!({...})).start()?` starts a run;
//! `run.log(step, &[("loss", v)])` only enqueues: a background thread batches and sends, and
//! when the server cannot be reached it spools to local disk and sends later, in order.
//!
//! ```no_run
//! use serde_json::json;
//! let run = trainlog::Run::builder("resnet")
//!     .name("lr-3e-4")
//!     .config(json!({"lr": 3e-4, "model": {"depth": 50}}))
//!     .start()?;
//! for step in 0..100 {
//!     run.log(step, &[("train/loss", 1.0 / (step as f64 + 1.0))]);
//! }
//! run.finish()?;
//! # Ok::<(), trainlog::Error>(())
//! ```

pub mod agent;
pub mod api;
mod artifacts;
pub mod collect;
pub mod console;
pub mod credentials;
mod http;
pub mod k8s;
pub mod media;
pub mod membership;
mod registry;
mod run;
mod sampler;
mod sender;
pub mod skypilot;
pub mod slurm;
pub mod spool;
mod tls;

pub use api::{Api, HistoryPoint, RunInfo};
pub use artifacts::Retention;
pub use http::{client_for, error_chain};
pub use media::{Content, Mask, Media, Pixels};
pub use registry::ModelSource;
pub use run::{Mode, Resume, Run, RunBuilder};
pub use sender::FinishSummary;
pub use spool::{rejected_path, sync_all, SyncReport};

/// Where a server runs when neither `server(...)` nor `TRAINLOG_SERVER` says otherwise.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:7310";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server answered with an error: its status, code, message and the field at fault.
    #[error("the server refused the request ({status} {code}): {message}")]
    Server { status: u16, code: String, message: String, field: Option<String> },
    /// The server could not be reached, or answered that it cannot take the request now (408,
    /// 429, 5xx): send it again later, after `retry_after` when the server said how long.
    #[error("the server at {url} cannot be reached: {reason}")]
    Unreachable { url: String, reason: String, retry_after: Option<std::time::Duration> },
    #[error("{0}")]
    Invalid(String),
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
    /// A downloaded file does not match its recorded checksum: it is not to be used.
    #[error("{path} is corrupt: sha256 {actual}, expected {expected}")]
    Corrupt { path: String, expected: String, actual: String },
    /// A model version whose files were deleted (its checkpoint fell to retention, say).
    #[error("version {version} of model {model:?} cannot be downloaded: its files were deleted ({})", missing.join(", "))]
    SourceDeleted { model: String, version: i64, missing: Vec<String> },
    #[error("the run was already finished")]
    Finished,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}

/// The server URL: an explicit one, else `TRAINLOG_SERVER`, else the local default.
pub fn server_url(explicit: Option<&str>) -> String {
    let url = explicit
        .map(str::to_owned)
        .or_else(|| std::env::var("TRAINLOG_SERVER").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| DEFAULT_SERVER.to_owned());
    let url = url.trim_end_matches('/');
    if url.contains("://") {
        return url.to_owned();
    }
    // `host:port` as people type it: plain HTTP, said once per process.
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| eprintln!("trainlog: the server {url:?} has no scheme; using http://{url}"));
    format!("http://{url}")
}

/// Folder for spools and other local state: `TRAINLOG_DIR`, else `~/.trainlog`.
pub fn local_dir() -> std::path::PathBuf {
    if let Some(dir) = std::env::var_os("TRAINLOG_DIR").filter(|d| !d.is_empty()) {
        return dir.into();
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| ".".into());
    std::path::Path::new(&home).join(".trainlog")
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
