//! `GET /metrics`: the store's counters and gauges and the error answers by code, in the
//! OpenMetrics text format that Prometheus scrapes.

use crate::routes::State;
use actix_web::HttpResponse;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};

const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

pub async fn prometheus(state: State) -> HttpResponse {
    let stats = state.store.stats();
    let c = stats.counters;
    let mut registry = Registry::with_prefix("trainlog");
    let counters: [(&str, &str, u64); 19] = [
        ("ingest_batches", "Metric batches acknowledged", c.ingest_batches),
        ("ingest_points", "Metric points acknowledged", c.ingest_points),
        (
            "ingest_refused_buffer_full",
            "Metric batches refused with 503 because the buffer was at its bound",
            c.ingest_refused_buffer_full,
        ),
        ("wal_records", "Records written to the write-ahead log", c.wal_records),
        ("wal_syncs", "fsyncs of the write-ahead log (group commits)", c.wal_syncs),
        ("wal_write_failures", "Write-ahead log writes that failed (their batches were refused)", c.wal_write_failures),
        ("wal_rotate_failures", "Write-ahead log segments that could not be started", c.wal_rotate_failures),
        ("persisted_files", "Metric files written from the buffer", c.persisted_files),
        ("persisted_points", "Points written from the buffer to metric files", c.persisted_points),
        ("persist_failures", "Rounds of persisting that failed and will be retried", c.persist_failures),
        ("compactions", "Compactions committed", c.compactions),
        ("compaction_failures", "Compaction rounds that failed and will be retried", c.compaction_failures),
        ("summary_sync_failures", "Writes of metric summaries to SQLite that failed", c.summary_sync_failures),
        ("runs_table_failures", "Runs-table rewrites that failed", c.runs_table_failures),
        (
            "summary_recomputes",
            "Series summaries recomputed in the background after a rewritten step",
            c.summary_recomputes,
        ),
        ("orphan_sweep_failures", "Start-up sweeps of unrecorded files that failed", c.orphan_sweep_failures),
        ("object_store_requests", "Object-store reads and writes of metric files", c.object_store_requests),
        ("object_store_failures", "Object-store requests that failed", c.object_store_failures),
        ("missing_files", "Catalogued metric files found missing from the object store", c.missing_files),
    ];
    for (name, help, value) in counters {
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
    let mut text = String::new();
    match encode(&mut text, &registry) {
        Ok(()) => HttpResponse::Ok().content_type(CONTENT_TYPE).body(text),
        Err(e) => HttpResponse::InternalServerError().body(format!("encoding metrics: {e}")),
    }
}
