//! The metrics store: batches are acknowledged once in the write-ahead log (group commit), kept
//! in an in-memory buffer where they are queryable at once, and persisted in the background as
//! Parquet files through object_store. Also keeps per-series summaries current and writes the
//! per-project runs table. Never imports actix.

pub mod artifacts;
mod background;
mod buffer;
pub mod console;
mod counters;
pub mod media;
mod objects;
mod parquet_io;
mod runs_table;
mod series;
mod store;
mod summaries;
pub mod wal;

pub use artifacts::{ArtifactStore, Uploaded};
pub use console::ConsoleStore;
pub use counters::CounterValues;
pub use media::MediaStore;
pub use objects::{metric_file_path, runs_table_path};
pub use parquet_io::{KeyIndex, KeyRange};
pub use runs_table::record_batch as runs_record_batch;
pub use series::{Bucket, GroupBucket, GroupBuckets, Series, StepGrid, StepRange};
pub use store::{MetricsStore, PurgeOutcome, StoreConfig, StoreStats, DEFAULT_MAX_BUFFER_BYTES};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{context}: {source}")]
    Io { context: &'static str, source: std::io::Error },
    #[error("object store: {0}")]
    ObjectStore(#[from] object_store::Error),
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    #[error("arrow: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
    #[error(transparent)]
    Meta(#[from] trainlog_meta::Error),
    #[error("configuration: {0}")]
    Config(String),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    #[error("the metrics store is shutting down")]
    ShuttingDown,
    #[error("the request body could not be read: {0}")]
    Body(String),
    #[error("a background task failed: {0}")]
    Task(String),
    /// Ingest cannot take a batch now; nothing of it was acknowledged, and the client should
    /// send it again later.
    #[error(transparent)]
    Backpressure(#[from] Backpressure),
}

/// Why ingest refuses a batch for now. Each clears by itself: persisting catches up, or the
/// disk gets space again.
#[derive(Debug, thiserror::Error)]
pub enum Backpressure {
    /// Buffered points wait for an object store that is slow or away.
    #[error("the server's buffer holds {buffered_bytes} bytes of points waiting for the object store (limit {limit})")]
    BufferFull { buffered_bytes: usize, limit: usize },
    /// The write-ahead log cannot be written.
    #[error("the write-ahead log cannot be written: {message}")]
    LogUnavailable { message: String, disk_full: bool },
    /// A media blob uploaded while it is being deleted as unreferenced: it is not recorded, and
    /// an upload sent again once the deletion is done is.
    #[error("media blob {sha256} is being deleted as no item names it; upload it again")]
    BlobBeingDeleted { sha256: String },
}

impl Error {
    /// Whether the error comes from a full disk (or an exhausted quota), which frees up by itself
    /// once space is made.
    pub fn is_disk_full(&self) -> bool {
        match self {
            Error::Io { source, .. } => io_is_disk_full(source),
            Error::Backpressure(Backpressure::LogUnavailable { disk_full, .. }) => *disk_full,
            Error::Meta(m) => m.is_disk_full(),
            _ => false,
        }
    }
}

pub(crate) fn io_is_disk_full(e: &std::io::Error) -> bool {
    const ENOSPC: i32 = 28;
    const EDQUOT: i32 = 122;
    e.kind() == std::io::ErrorKind::StorageFull
        || e.kind() == std::io::ErrorKind::QuotaExceeded
        || matches!(e.raw_os_error(), Some(ENOSPC | EDQUOT))
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn io_err(context: &'static str) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { context, source }
}

/// The guarded value, also after a thread panicked holding the lock: every lock here guards
/// state that each step leaves whole.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn read<T>(m: &std::sync::RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn write<T>(m: &std::sync::RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(|p| p.into_inner())
}

/// Hands a command to a log writer's thread. A full channel means the writer is behind: the
/// wait happens off the executor.
pub(crate) async fn send_to_writer<C: Send + 'static>(tx: std::sync::mpsc::SyncSender<C>, cmd: C) -> Result<()> {
    match tx.try_send(cmd) {
        Ok(()) => Ok(()),
        Err(std::sync::mpsc::TrySendError::Full(cmd)) => {
            blocking(move || tx.send(cmd).map_err(|_| Error::ShuttingDown)).await
        }
        Err(std::sync::mpsc::TrySendError::Disconnected(_)) => Err(Error::ShuttingDown),
    }
}

/// Runs blocking work (Parquet encoding, SQLite, fsync) off the async executor.
pub(crate) async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f).await.map_err(|e| Error::Task(e.to_string()))?
}
