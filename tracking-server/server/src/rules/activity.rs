//! The rules on a running run's activity (`stalled 10m`, `idle < 10% for 20m [then stop]`), on
//! a timer: the watched runs the rule cache says are due, checked against the store (still
//! running, what their GPUs cost), then alerted and, with `then stop`, stopped.

use super::{failed, record_fired};
use crate::rule_cache::{due_alert, Due};
use crate::state::{meta, State};
use std::collections::HashMap;
use std::time::Duration;
use trainlog_meta::alert_rules::WatchedRun;
use trainlog_schema::RunId;

/// How often the activity rules look.
const ACTIVITY_CHECK: Duration = Duration::from_secs(2);

/// Fires the activity rules for the server's whole life.
pub(crate) async fn watch_activity(state: State) {
    let mut every = tokio::time::interval(ACTIVITY_CHECK);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let due = state.rules.due(trainlog_meta::now_ms());
        if due.is_empty() {
            continue;
        }
        let ids: Vec<String> = due.iter().map(|d| d.run.clone()).collect();
        let runs =
            match meta(&state, move |m| m.watched_runs(&ids.iter().map(String::as_str).collect::<Vec<_>>())).await {
                Ok(runs) => runs.into_iter().map(|r| (r.id.clone(), r)).collect::<HashMap<String, WatchedRun>>(),
                Err(e) => {
                    failed("the activity rules could not read their runs (tried again)", e);
                    continue;
                }
            };
        let mut raised = false;
        for d in due {
            let Some(run) = runs.get(&d.run).filter(|r| r.status == "running") else {
                state.rules.forget(&d.run);
                continue;
            };
            match fire(&state, &d, run).await {
                Ok(new) => {
                    raised |= new;
                    state.rules.mark(&d.run, d.episode);
                }
                Err(e) => failed("an activity rule could not record its alert (tried again)", e),
            }
        }
        if raised {
            crate::deliver::wake();
        }
    }
}

async fn fire(state: &State, due: &Due, run: &WatchedRun) -> crate::error::Result<bool> {
    let price = run.usd_per_hour.map(|usd| (if run.unpriced_nodes > 0 && usd == 0.0 { 0.0 } else { usd }, run.gpus));
    let fired = due_alert(due, price);
    let id = RunId::parse("run", &due.run)?;
    meta(state, move |m| record_fired(m, &id, &fired)).await
}
