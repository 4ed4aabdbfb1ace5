//! The liveness check: a background task that ends `lost` the running jobs none of whose
//! processes sent a heartbeat within `--lost-after-s` (see `trainlog_meta::jobs::liveness`).

use crate::state::{meta, State};
use std::sync::atomic::{AtomicU64, Ordering};

static RUNS_LOST: AtomicU64 = AtomicU64::new(0);
static CHECK_FAILURES: AtomicU64 = AtomicU64::new(0);

/// Runs this server ended `lost`, and rounds of the check that failed (each is tried again).
pub(crate) fn counts() -> (u64, u64) {
    (RUNS_LOST.load(Ordering::Relaxed), CHECK_FAILURES.load(Ordering::Relaxed))
}

/// Checks every third of the bound (at most every 30 s), for the server's whole life.
pub(crate) async fn watch(state: State) {
    let period = trainlog_meta::jobs::liveness::check_every();
    let mut every = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        match meta(&state, |m| m.close_silent_attempts()).await {
            Ok(ended) => {
                RUNS_LOST.fetch_add(ended.len() as u64, Ordering::Relaxed);
            }
            Err(e) => {
                CHECK_FAILURES.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("the liveness check failed (tried again in {} ms): {e}", period.as_millis());
            }
        }
    }
}
