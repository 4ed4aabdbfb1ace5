//! The state every handler shares, and the one way handlers reach the metadata store: on the
//! blocking pool. Imports no route module.

use crate::error::Result;
use actix_web::web;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use trainlog_meta::MetaStore;
use trainlog_schema::RunId;
use trainlog_store::MetricsStore;

/// Shared by every request handler.
pub struct AppState {
    pub meta: Arc<MetaStore>,
    pub store: MetricsStore,
    /// Project of each run seen by ingest; a run never changes project.
    pub run_projects: Mutex<HashMap<RunId, i64>>,
    /// Held while a sweep proposes or completes, so two agents never get the same trial.
    pub sweep_lock: tokio::sync::Mutex<()>,
    pub trial_timeout_ms: i64,
    /// When this server started, in milliseconds since the epoch.
    pub started_ms: i64,
    /// Each project's metric rules, which ingest checks each batch against.
    pub rules: crate::rule_cache::RuleCache,
    /// The SMTP relay e-mail alerts go through, when the server has one.
    pub mailer: Option<Arc<crate::mail::Mailer>>,
}

/// The state as handlers take it.
pub(crate) type State = web::Data<AppState>;

/// Runs a metadata-store call on the blocking pool.
pub(crate) async fn meta<T: Send + 'static>(
    state: &State,
    f: impl FnOnce(&MetaStore) -> trainlog_meta::Result<T> + Send + 'static,
) -> Result<T> {
    let m: Arc<MetaStore> = state.meta.clone();
    Ok(web::block(move || f(&m)).await??)
}
