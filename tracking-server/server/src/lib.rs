//! The trainlog tracking server: actix-web routes over the metadata and metrics stores.
//!
//! Shared modules (`state`, `lookup`, `query`, `respond`, `body`, `wire`, `error`, `auth`,
//! `guard`) never import `routes`; each resource's handlers and wire types live together under
//! `routes/`.

mod auth;
mod body;
mod data_lock;
mod deliver;
mod error;
mod guard;
mod liveness;
mod lookup;
mod mail;
mod query;
mod report_rows;
mod respond;
mod routes;
mod rule_cache;
mod rules;
mod run_watch;
mod startup;
mod state;
mod ui;
mod wire;

pub use auth::DEFAULT_MAX_KEY_FAILURES;
pub use body::BODY_TIMEOUT;
/// How long a running job may stay silent before the server ends it `lost`, unless configured.
pub const DEFAULT_LOST_AFTER: std::time::Duration =
    std::time::Duration::from_millis(trainlog_meta::jobs::DEFAULT_LOST_AFTER_MS as u64);
pub use mail::SmtpConfig;
pub use routes::MAX_QUERY_POINTS;
pub use startup::{serve, ServerConfig, TlsFiles, DEFAULT_PORT};
