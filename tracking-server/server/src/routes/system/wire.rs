//! The system routes' wire types: health, readiness and the server's counters.

use serde::Serialize;
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// What the server holds and has done since start. Every counter of the store is listed
/// besides these fields; `GET /metrics` gives the same in Prometheus' text format.
#[derive(Serialize, ToSchema)]
pub struct Stats {
    /// Points in memory, not yet in Parquet.
    pub buffered_points: u64,
    pub buffered_bytes: u64,
    /// Past this many buffered bytes ingest answers 503.
    pub max_buffer_bytes: u64,
    /// In-memory generations frozen and waiting to be persisted.
    pub frozen_generations: u64,
    /// Parquet files in the catalog.
    pub files: u64,
    pub file_bytes: u64,
    pub file_rows: u64,
    /// Write-ahead log records replayed at start.
    pub wal_replayed_records: u64,
    /// Bytes of torn write-ahead log tail cut at start.
    pub wal_cut_bytes: u64,
    /// Seconds spent waiting on the object store.
    pub object_store_seconds: f64,
    /// Error answers given since start, by error code.
    pub errors: BTreeMap<String, u64>,
    /// The store's counters, by name.
    #[serde(flatten)]
    pub counters: BTreeMap<String, u64>,
}

/// The health check's answer.
#[derive(Serialize, ToSchema)]
pub struct Health {
    #[schema(value_type = String, example = "ok")]
    pub status: &'static str,
}

/// Whether a replica can serve: each dependency's state, "ok" or what went wrong.
#[derive(Debug, Serialize, ToSchema)]
pub struct Readiness {
    /// `ready` or `unavailable`.
    #[schema(value_type = String, example = "ready")]
    pub status: &'static str,
    /// The metadata database (SQLite or PostgreSQL).
    pub database: String,
    /// The object store of metric files and artifacts.
    pub store: String,
}
