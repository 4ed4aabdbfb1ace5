//! `GET /metrics`: the store's counters and gauges and the error answers by code, in the
//! OpenMetrics text format that Prometheus scrapes. With `--auth`, the figures of projects
//! (names, budgets, spend) are shown to server admins and to the scraper's key only.

use crate::state::State;
use actix_web::{HttpMessage, HttpRequest, HttpResponse};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;

const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The server's counters in the OpenMetrics text format, for Prometheus.
#[utoipa::path(get, path = "/metrics", tag = "system",
    responses((status = 200, description = "Counters and gauges.", content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8", body = String)))]
pub(crate) async fn prometheus(state: State, req: HttpRequest) -> HttpResponse {
    let stats = state.store.stats();
    let c = stats.counters;
    let mut registry = Registry::with_prefix("trainlog");
    for (name, help, value) in c.named() {
        registry.register(name, help, ConstCounter::new(value));
    }
    registry.register_with_unit(
        "object_store_latency",
        "Time spent in object-store requests of metric files",
        Unit::Seconds,
        ConstCounter::new(c.object_store_micros as f64 / 1e6),
    );
    let gauges: [(&str, &str, i64); 6] = [
        ("buffered_points", "Points in memory waiting to be persisted", stats.buffered_points as i64),
        ("buffered_bytes", "Bytes of points in memory waiting to be persisted", stats.buffered_bytes as i64),
        ("max_buffer_bytes", "Bound of buffered bytes above which ingest answers 503", stats.max_buffer_bytes as i64),
        ("frozen_generations", "Buffer generations waiting to be persisted", stats.frozen_generations as i64),
        ("files", "Metric files in the catalog", stats.files as i64),
        ("file_bytes", "Bytes of metric files in the catalog", stats.file_bytes as i64),
    ];
    for (name, help, value) in gauges {
        registry.register(name, help, ConstGauge::new(value));
    }
    let errors = Family::<Vec<(String, String)>, Counter>::default();
    for (code, n) in crate::error::error_counts() {
        errors.get_or_create(&vec![("code".to_owned(), code.to_owned())]).inc_by(n);
    }
    registry.register("http_errors", "Error answers by error code", errors);
    registry.register(
        "report_refresh_failures",
        "Background rounds that failed to bring the training report's rows up to date (each is tried again)",
        ConstCounter::new(crate::report_rows::refresh_failures()),
    );
    let (lost, check_failures) = crate::liveness::counts();
    registry.register(
        "runs_lost",
        "Runs this server ended lost: no process of their job sent a heartbeat within --lost-after-s",
        ConstCounter::new(lost),
    );
    registry.register(
        "liveness_check_failures",
        "Rounds of the liveness check that failed (each is tried again)",
        ConstCounter::new(check_failures),
    );
    let (sent, failed_attempts, delivery_failures) = crate::deliver::counts();
    registry.register("alert_deliveries_sent", "Alert deliveries sent to their channels", ConstCounter::new(sent));
    registry.register(
        "alert_delivery_attempts_failed",
        "Attempts at an alert delivery that failed (each tried again with backoff until its last; see the project's deliveries)",
        ConstCounter::new(failed_attempts),
    );
    registry.register(
        "alert_delivery_round_failures",
        "Rounds of the alert sender that could not read or record deliveries (each tried again)",
        ConstCounter::new(delivery_failures),
    );
    registry.register(
        "alert_rule_failures",
        "Rounds of the alert rules (runs' ends, activity, projects) and alerts of metric rules that could not be read or recorded",
        ConstCounter::new(crate::rules::failures()),
    );
    registry.register(
        "alert_rules_watched_runs",
        "Runs whose steps, GPUs or metric history the alert rules remember",
        ConstGauge::new(state.rules.watched_runs() as i64),
    );
    registry.register(
        "alert_rules_unwatched_runs",
        "Runs the alert rules could not watch, the server watching as many as it keeps",
        ConstCounter::new(state.rules.unwatched_runs()),
    );
    let (failed, throttled) = crate::auth::failure_counts(&req);
    registry.register("auth_failures", "Requests refused for a missing or invalid API key", ConstCounter::new(failed));
    registry.register(
        "auth_throttled",
        "Requests refused without a key check, their address having failed too many",
        ConstCounter::new(throttled),
    );
    let sees_projects = crate::auth::actor(&req).is_none_or(|a| a.is_admin)
        || req.extensions().get::<crate::auth::MetricsScraper>().is_some();
    if sees_projects {
        if let Err(response) = register_projects(&state, &mut registry).await {
            return response;
        }
    }
    let mut text = String::new();
    match encode(&mut text, &registry) {
        Ok(()) => HttpResponse::Ok().content_type(CONTENT_TYPE).body(text),
        Err(e) => HttpResponse::InternalServerError().body(format!("encoding metrics: {e}")),
    }
}

/// Every project's budget and spend this month.
async fn register_projects(state: &State, registry: &mut Registry) -> Result<(), HttpResponse> {
    // Budgets read the report's rows as the background refresh left them (at most 30 s old).
    let now = trainlog_meta::now_ms();
    let budgets = crate::state::meta(state, move |m| m.budgets(&trainlog_meta::search::RunScope::All, now))
        .await
        .map_err(|e| HttpResponse::ServiceUnavailable().body(format!("reading the projects' budgets: {e}")))?;
    let budget = Family::<Vec<(String, String)>, Gauge<f64, AtomicU64>>::default();
    let spend = Family::<Vec<(String, String)>, Gauge<f64, AtomicU64>>::default();
    for b in &budgets {
        let labels = vec![("project".to_owned(), b.project.clone())];
        budget.get_or_create(&labels).set(b.monthly_usd);
        spend.get_or_create(&labels).set(b.spent_usd);
    }
    registry.register("project_budget_usd", "A project's budget for this calendar month (UTC)", budget);
    registry.register("project_spend_usd", "What a project's runs that started this month cost (priced runs)", spend);
    Ok(())
}
