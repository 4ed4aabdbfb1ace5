//! Counters of what the store did and what failed, read by the server's stats and `/metrics`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Monotonic counts since the server started. Every failure on the data path that is retried in
/// the background is counted here, so an operator sees it.
#[derive(Debug, Default)]
pub struct Counters {
    pub ingest_batches: AtomicU64,
    pub ingest_points: AtomicU64,
    pub ingest_refused_buffer_full: AtomicU64,
    pub wal_records: AtomicU64,
    pub wal_syncs: AtomicU64,
    pub wal_write_failures: AtomicU64,
    pub wal_rotate_failures: AtomicU64,
    pub wal_release_failures: AtomicU64,
    pub persisted_files: AtomicU64,
    pub persisted_points: AtomicU64,
    pub persist_failures: AtomicU64,
    pub compactions: AtomicU64,
    pub compaction_failures: AtomicU64,
    pub summary_sync_failures: AtomicU64,
    pub summary_recomputes: AtomicU64,
    pub runs_table_failures: AtomicU64,
    pub orphan_sweep_failures: AtomicU64,
    pub purged_runs: AtomicU64,
    pub purge_failures: AtomicU64,
    pub object_store_requests: AtomicU64,
    pub object_store_failures: AtomicU64,
    pub missing_files: AtomicU64,
    pub media_indexes_written: AtomicU64,
    pub media_index_failures: AtomicU64,
    pub media_blobs_collected: AtomicU64,
    pub media_collection_failures: AtomicU64,
    pub object_store_micros: AtomicU64,
    pub console_lines: AtomicU64,
    pub console_files: AtomicU64,
    pub console_wal_failures: AtomicU64,
    pub console_persist_failures: AtomicU64,
}

/// A copy of every counter at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CounterValues {
    pub ingest_batches: u64,
    pub ingest_points: u64,
    pub ingest_refused_buffer_full: u64,
    pub wal_records: u64,
    pub wal_syncs: u64,
    pub wal_write_failures: u64,
    pub wal_rotate_failures: u64,
    pub wal_release_failures: u64,
    pub persisted_files: u64,
    pub persisted_points: u64,
    pub persist_failures: u64,
    pub compactions: u64,
    pub compaction_failures: u64,
    pub summary_sync_failures: u64,
    pub summary_recomputes: u64,
    pub runs_table_failures: u64,
    pub orphan_sweep_failures: u64,
    pub purged_runs: u64,
    pub purge_failures: u64,
    pub object_store_requests: u64,
    pub object_store_failures: u64,
    pub missing_files: u64,
    pub media_indexes_written: u64,
    pub media_index_failures: u64,
    pub media_blobs_collected: u64,
    pub media_collection_failures: u64,
    pub object_store_micros: u64,
    pub console_lines: u64,
    pub console_files: u64,
    pub console_wal_failures: u64,
    pub console_persist_failures: u64,
}

pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl CounterValues {
    /// Every count with its name and meaning (the object-store time aside), for the operator's
    /// views: `/api/v1/admin/stats` and `/metrics`.
    pub fn named(&self) -> [(&'static str, &'static str, u64); 30] {
        [
            ("ingest_batches", "Metric batches acknowledged", self.ingest_batches),
            ("ingest_points", "Metric points acknowledged", self.ingest_points),
            (
                "ingest_refused_buffer_full",
                "Metric batches refused with 503 because the buffer was at its bound",
                self.ingest_refused_buffer_full,
            ),
            ("wal_records", "Records written to the write-ahead log", self.wal_records),
            ("wal_syncs", "fsyncs of the write-ahead log (group commits)", self.wal_syncs),
            (
                "wal_write_failures",
                "Write-ahead log writes that failed (their batches were refused)",
                self.wal_write_failures,
            ),
            ("wal_rotate_failures", "Write-ahead log segments that could not be started", self.wal_rotate_failures),
            (
                "wal_release_failures",
                "Write-ahead log segments whose records are in files but that could not be removed (tried again later)",
                self.wal_release_failures,
            ),
            ("persisted_files", "Metric files written from the buffer", self.persisted_files),
            ("persisted_points", "Points written from the buffer to metric files", self.persisted_points),
            ("persist_failures", "Rounds of persisting that failed and will be retried", self.persist_failures),
            ("compactions", "Compactions committed", self.compactions),
            ("compaction_failures", "Compaction rounds that failed and will be retried", self.compaction_failures),
            ("summary_sync_failures", "Writes of metric summaries to SQLite that failed", self.summary_sync_failures),
            ("runs_table_failures", "Runs-table rewrites that failed", self.runs_table_failures),
            (
                "summary_recomputes",
                "Series summaries recomputed in the background after a rewritten step",
                self.summary_recomputes,
            ),
            ("orphan_sweep_failures", "Start-up sweeps of unrecorded files that failed", self.orphan_sweep_failures),
            ("purged_runs", "Runs whose objects were deleted for good", self.purged_runs),
            (
                "purge_failures",
                "Deletions of a purged run's objects that failed and will be retried",
                self.purge_failures,
            ),
            ("object_store_requests", "Object-store reads and writes of metric files", self.object_store_requests),
            ("object_store_failures", "Object-store requests that failed", self.object_store_failures),
            ("missing_files", "Catalogued metric files found missing from the object store", self.missing_files),
            ("media_indexes_written", "Runs' media indexes written to Parquet", self.media_indexes_written),
            (
                "media_index_failures",
                "Writes of a run's media index that failed and will be retried",
                self.media_index_failures,
            ),
            (
                "media_blobs_collected",
                "Media blobs that no item named any more, deleted from the object store",
                self.media_blobs_collected,
            ),
            (
                "media_collection_failures",
                "Unreferenced media blobs (or listings of them) that could not be collected and will be retried",
                self.media_collection_failures,
            ),
            ("console_lines", "Console lines acknowledged", self.console_lines),
            ("console_files", "Console files written from the buffer", self.console_files),
            (
                "console_wal_failures",
                "Write-ahead log writes that failed with console lines in them (their batches were refused)",
                self.console_wal_failures,
            ),
            (
                "console_persist_failures",
                "Rounds of persisting console lines that failed and will be retried",
                self.console_persist_failures,
            ),
        ]
    }
}

impl Counters {
    /// Counts one object-store request and its latency.
    pub(crate) fn object_store_call<T, E>(&self, took: Duration, outcome: &Result<T, E>) {
        bump(&self.object_store_requests);
        self.object_store_micros.fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        if outcome.is_err() {
            bump(&self.object_store_failures);
        }
    }

    pub fn values(&self) -> CounterValues {
        let v = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CounterValues {
            ingest_batches: v(&self.ingest_batches),
            ingest_points: v(&self.ingest_points),
            ingest_refused_buffer_full: v(&self.ingest_refused_buffer_full),
            wal_records: v(&self.wal_records),
            wal_syncs: v(&self.wal_syncs),
            wal_write_failures: v(&self.wal_write_failures),
            wal_rotate_failures: v(&self.wal_rotate_failures),
            wal_release_failures: v(&self.wal_release_failures),
            persisted_files: v(&self.persisted_files),
            persisted_points: v(&self.persisted_points),
            persist_failures: v(&self.persist_failures),
            compactions: v(&self.compactions),
            compaction_failures: v(&self.compaction_failures),
            summary_sync_failures: v(&self.summary_sync_failures),
            summary_recomputes: v(&self.summary_recomputes),
            runs_table_failures: v(&self.runs_table_failures),
            orphan_sweep_failures: v(&self.orphan_sweep_failures),
            purged_runs: v(&self.purged_runs),
            purge_failures: v(&self.purge_failures),
            object_store_requests: v(&self.object_store_requests),
            object_store_failures: v(&self.object_store_failures),
            missing_files: v(&self.missing_files),
            media_indexes_written: v(&self.media_indexes_written),
            media_index_failures: v(&self.media_index_failures),
            media_blobs_collected: v(&self.media_blobs_collected),
            media_collection_failures: v(&self.media_collection_failures),
            object_store_micros: v(&self.object_store_micros),
            console_lines: v(&self.console_lines),
            console_files: v(&self.console_files),
            console_wal_failures: v(&self.console_wal_failures),
            console_persist_failures: v(&self.console_persist_failures),
        }
    }
}
