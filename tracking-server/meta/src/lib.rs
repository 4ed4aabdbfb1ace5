//! The metadata store: projects, runs, params, tags, metric summaries and the catalog of metric
//! files, in one SQLite database with numbered migrations. Blocking; callers run it off async executors.

mod artifacts;
pub mod auth;
mod catalog;
mod checkpoints;
mod db;
mod keys;
mod lifecycle;
mod logged_models;
mod migrate;
mod purge;
mod registry;
pub mod roles;
mod runs;
pub mod search;
mod sweeps;
mod views;

pub use artifacts::ArtifactRow;
pub use catalog::{MetricFileRow, NEXT_FILE_NUMBER, WAL_PERSISTED_THROUGH};
pub use checkpoints::{CheckpointRow, Retention};
pub use keys::ProjectKeys;
pub use logged_models::{new_logged_model_id, LoggedModelRow};
pub use purge::PurgedRun;
pub use registry::{ModelRow, NewVersion, VersionRef, VersionRow, VersionUpdate};
pub use roles::{Actor, Role, Scope, Visibility};
pub use runs::{NewRun, Project, Run, RunExport, RunHead, RunUpdate};
pub use sweeps::{Placement, SweepRow, TrialEnd, TrialRow};
pub use views::ViewRow;

use db::Db;
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what} not found")]
    NotFound { what: String },
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
    #[error("{field}: {reason}")]
    Conflict { field: String, reason: String },
    /// The caller may see the thing but not do this to it.
    #[error("{field}: {reason}")]
    Forbidden { field: String, reason: String },
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("stored metadata is inconsistent: {0}")]
    Corrupt(String),
    #[error("the metadata store's connection lock was poisoned")]
    Poisoned,
}

impl From<trainlog_schema::Error> for Error {
    fn from(e: trainlog_schema::Error) -> Self {
        Error::Invalid { field: e.field, reason: e.reason }
    }
}

impl Error {
    /// Whether SQLite failed because the disk (or a quota) is full.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, Error::Sqlite(rusqlite::Error::SqliteFailure(e, _)) if e.code == rusqlite::ErrorCode::DiskFull)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn not_found(what: impl Into<String>) -> Error {
    Error::NotFound { what: what.into() }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// The metadata database behind [`db::Db`]: SQLite (one writer connection and a small pool of
/// readers, WAL journal mode).
pub struct MetaStore {
    backend: Backend,
    run_cache: lifecycle::RunCache,
}

enum Backend {
    Sqlite { path: PathBuf, writer: Mutex<Connection>, readers: Mutex<Vec<Connection>> },
}

const MAX_IDLE_READERS: usize = 8;

/// Runs `f` again while SQLite answers "busy" without waiting (as it does for a stale WAL
/// snapshot); every transaction here is all-or-nothing, so a retry is safe.
fn retry_busy<T>(mut f: impl FnMut() -> Result<T>) -> Result<T> {
    let mut attempt = 0u32;
    loop {
        match f() {
            Err(Error::Sqlite(rusqlite::Error::SqliteFailure(e, _)))
                if e.code == rusqlite::ErrorCode::DatabaseBusy && attempt < 50 =>
            {
                attempt += 1;
                std::thread::sleep(std::time::Duration::from_millis(2 * u64::from(attempt)));
            }
            other => return other,
        }
    }
}

impl MetaStore {
    /// Opens (creating if needed) the SQLite database at `path` and applies pending migrations.
    pub fn open(path: &Path) -> Result<Self> {
        let mut writer = Connection::open(path)?;
        writer.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 10000;",
        )?;
        migrate::apply(&mut writer)?;
        Ok(Self {
            backend: Backend::Sqlite {
                path: path.to_owned(),
                writer: Mutex::new(writer),
                readers: Mutex::new(Vec::new()),
            },
            run_cache: lifecycle::RunCache::default(),
        })
    }

    /// Runs `f` in one write transaction, committed when `f` succeeds and rolled back when it
    /// fails; `f` may run again when the database asks for a retry.
    pub(crate) fn write<T>(&self, mut f: impl FnMut(&dyn Db) -> Result<T>) -> Result<T> {
        match &self.backend {
            Backend::Sqlite { writer, .. } => {
                let mut conn = writer.lock().map_err(|_| Error::Poisoned)?;
                retry_busy(|| {
                    let tx = conn.transaction()?;
                    let out = f(&*tx)?;
                    tx.commit()?;
                    Ok(out)
                })
            }
        }
    }

    /// Runs `f` on a reading connection; each statement sees the latest committed state.
    pub(crate) fn read<T>(&self, mut f: impl FnMut(&dyn Db) -> Result<T>) -> Result<T> {
        match &self.backend {
            Backend::Sqlite { path, readers, .. } => retry_busy(|| sqlite_read(path, readers, &mut |c| f(c))),
        }
    }

    /// Runs `f` on a reading connection where every statement sees one snapshot.
    pub(crate) fn snapshot<T>(&self, mut f: impl FnMut(&dyn Db) -> Result<T>) -> Result<T> {
        match &self.backend {
            Backend::Sqlite { path, readers, .. } => retry_busy(|| {
                sqlite_read(path, readers, &mut |c| {
                    let tx = c.unchecked_transaction()?;
                    f(&*tx)
                })
            }),
        }
    }
}

fn sqlite_read<T>(
    path: &Path,
    readers: &Mutex<Vec<Connection>>,
    f: &mut dyn FnMut(&Connection) -> Result<T>,
) -> Result<T> {
    let pooled = readers.lock().map_err(|_| Error::Poisoned)?.pop();
    let conn = match pooled {
        Some(c) => c,
        None => {
            let c = Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI,
            )?;
            c.busy_timeout(std::time::Duration::from_secs(10))?;
            c
        }
    };
    let out = f(&conn);
    let mut pool = readers.lock().map_err(|_| Error::Poisoned)?;
    if pool.len() < MAX_IDLE_READERS {
        pool.push(conn);
    }
    out
}
