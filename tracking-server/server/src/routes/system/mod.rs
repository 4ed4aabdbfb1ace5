//! The system routes: health (live and ready), the server's counters (JSON here, OpenMetrics in
//! `prometheus`) and flushing the buffer.

pub(super) mod prometheus;
mod wire;

use crate::error::Result;
use crate::state::{meta, State};
use crate::wire::{StatusOk, OK};
use actix_web::{web, HttpRequest, HttpResponse};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/health", web::get().to(health))
        .route("/health/live", web::get().to(health_live))
        .route("/health/ready", web::get().to(health_ready))
        .route("/admin/flush", web::post().to(flush))
        .route("/admin/stats", web::get().to(stats));
}

/// This resource's operations in the API document.
#[derive(utoipa::OpenApi)]
#[openapi(paths(health, health_live, health_ready, prometheus::prometheus, flush, stats,))]
pub(super) struct Api;

/// Whether the server answers and its database is usable.
#[utoipa::path(get, path = "/api/v1/health", tag = "system", responses((status = 200, description = "The server is up.", body = wire::Health)))]
pub(crate) async fn health(state: State) -> Result<HttpResponse> {
    meta(&state, |m| m.counter("health")).await?;
    Ok(HttpResponse::Ok().json(wire::Health { status: "ok" }))
}

/// Liveness for a load balancer or an orchestrator: the process answers requests. Checks nothing
/// else, so a database outage does not get every replica restarted.
#[utoipa::path(get, path = "/api/v1/health/live", tag = "system", responses((status = 200, description = "The process serves requests.", body = wire::Health)))]
pub(crate) async fn health_live() -> HttpResponse {
    HttpResponse::Ok().json(wire::Health { status: "ok" })
}

/// Readiness for a load balancer: the metadata database and the object store both answer. A
/// replica that is not ready answers 503, naming what failed, and should get no traffic.
#[utoipa::path(get, path = "/api/v1/health/ready", tag = "system", responses(
    (status = 200, description = "The database and the object store answer.", body = wire::Readiness),
    (status = 503, description = "The database or the object store does not answer.", body = wire::Readiness)))]
pub(crate) async fn health_ready(state: State) -> HttpResponse {
    let m = state.meta.clone();
    let database = match web::block(move || m.ping()).await {
        Ok(Ok(())) => "ok".to_owned(),
        Ok(Err(e)) => e.to_string(),
        Err(e) => e.to_string(),
    };
    let store = match state.store.probe().await {
        Ok(()) => "ok".to_owned(),
        Err(e) => e.to_string(),
    };
    let ready = database == "ok" && store == "ok";
    let body = wire::Readiness { status: if ready { "ready" } else { "unavailable" }, database, store };
    if ready {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().insert_header(("Retry-After", "5")).json(body)
    }
}

/// Persist everything buffered to Parquet now.
#[utoipa::path(post, path = "/api/v1/admin/flush", tag = "system", responses((status = 200, description = "Everything acknowledged is in Parquet.", body = StatusOk)))]
pub(crate) async fn flush(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    crate::body::empty_body(&req, payload).await?;
    crate::auth::require_admin(&req, "flushing")?;
    state.store.flush().await?;
    Ok(HttpResponse::Ok().json(OK))
}

/// The server's counters: buffer, files, write-ahead log, persisting, compaction, errors.
#[utoipa::path(get, path = "/api/v1/admin/stats", tag = "system", responses((status = 200, description = "The counters.", body = wire::Stats)))]
pub(crate) async fn stats(state: State, req: HttpRequest) -> Result<HttpResponse> {
    crate::auth::require_admin(&req, "the server's counters")?;
    let s = state.store.stats();
    let c = s.counters;
    Ok(HttpResponse::Ok().json(wire::Stats {
        buffered_points: s.buffered_points as u64,
        buffered_bytes: s.buffered_bytes as u64,
        max_buffer_bytes: s.max_buffer_bytes as u64,
        frozen_generations: s.frozen_generations as u64,
        files: s.files as u64,
        file_bytes: s.file_bytes,
        file_rows: s.file_rows,
        wal_replayed_records: s.wal_replayed_records as u64,
        wal_cut_bytes: s.wal_cut_bytes,
        object_store_seconds: c.object_store_micros as f64 / 1e6,
        errors: crate::error::error_counts().into_iter().map(|(code, n)| (code.to_owned(), n)).collect(),
        counters: c.named().into_iter().map(|(name, _, value)| (name.to_owned(), value)).collect(),
    }))
}
