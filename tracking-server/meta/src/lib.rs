//! The metadata store: projects, runs, params, tags, metric summaries and the catalog of metric
//! files, in one SQLite database with numbered migrations. Blocking; callers run it off async executors.

pub mod alert_reads;
pub mod alert_rules;
pub mod alerts;
mod artifacts;
pub mod auth;
mod catalog;
mod checkpoints;
mod copy;
mod db;
mod histograms;
pub mod jobs;
mod keys;
mod lifecycle;
mod logged_models;
mod media;
mod migrate;
mod postgres;
pub use postgres::create_database as create_postgres_database;
pub mod prices;
mod purge;
mod registry;
pub mod report;
pub mod roles;
mod runs;
pub mod search;
mod settings;
mod stops;
mod sweeps;
mod views;

pub use artifacts::ArtifactRow;
pub use catalog::{wal_counter, MetricFileRow, NEXT_FILE_NUMBER, WAL_PERSISTED_THROUGH};
pub use checkpoints::{CheckpointRow, Retention};
pub use copy::copy;
pub use histograms::HistogramQuery;
pub use keys::ProjectKeys;
pub use logged_models::{new_logged_model_id, LoggedModelRow};
pub use media::{
    BlobRow, DirtyIndex, MediaKeyRow, MediaQuery, MediaRow, PartIndex, StoredBlob, TablePart, TablePartShape,
};
pub use purge::{LedgerEntry, PurgedRun};
pub use registry::{ModelRow, NewVersion, VersionRef, VersionRow, VersionUpdate};
pub use roles::{Actor, Role, Scope, Visibility};
pub use runs::{NewRun, Project, Run, RunExport, RunHead, RunUpdate};
pub use settings::ProjectSettings;
pub use stops::StopRequest;
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
    #[error("postgres: {}", postgres_message(.0))]
    Postgres(#[from] ::postgres::Error),
    /// The database cannot be reached.
    #[error("the metadata database is unavailable: {0}")]
    Unavailable(String),
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
    /// Whether the database failed because its disk (or a quota) is full.
    pub fn is_disk_full(&self) -> bool {
        match self {
            Error::Sqlite(rusqlite::Error::SqliteFailure(e, _)) => e.code == rusqlite::ErrorCode::DiskFull,
            Error::Postgres(e) => e.code() == Some(&::postgres::error::SqlState::DISK_FULL),
            _ => false,
        }
    }

    /// Whether the database could not be reached (as against refusing what was asked).
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Unavailable(_) => true,
            Error::Postgres(e) => {
                use std::error::Error as _;
                let state = e.code().map(|c| c.code()).unwrap_or_default();
                // Class 08: connection exception; 57: operator intervention (a shutdown, a
                // terminated connection); 53300: too many connections.
                e.is_closed()
                    || e.source().is_some_and(|s| s.is::<std::io::Error>())
                    || state.starts_with("08")
                    || state.starts_with("57")
                    || state == "53300"
            }
            _ => false,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// PostgreSQL's own message and detail, which the driver's `Display` leaves out.
fn postgres_message(e: &::postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("{} ({detail})", db.message()),
            None => db.message().to_owned(),
        },
        None => e.to_string(),
    }
}

pub(crate) fn not_found(what: impl Into<String>) -> Error {
    Error::NotFound { what: what.into() }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// The metadata database behind [`db::Db`]: SQLite (one writer connection and a small pool of
/// readers, WAL journal mode) or PostgreSQL (a pool of connections).
pub struct MetaStore {
    backend: Backend,
    run_cache: lifecycle::RunCache,
    summary_cache: lifecycle::SummaryCache,
}

enum Backend {
    Sqlite { path: PathBuf, writer: Mutex<Connection>, readers: Mutex<Vec<Connection>> },
    Postgres(postgres::Pool),
}

/// Where the metadata lives, parsed from `--meta`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaUrl {
    Sqlite(PathBuf),
    Postgres(String),
}

impl MetaUrl {
    /// `sqlite:///absolute/path`, `sqlite://relative/path` or `postgres://…` (`postgresql://…`).
    pub fn parse(url: &str) -> Result<MetaUrl> {
        if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(Error::Invalid { field: "meta".into(), reason: "sqlite:// needs a file path".into() });
            }
            return Ok(MetaUrl::Sqlite(PathBuf::from(path)));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(MetaUrl::Postgres(url.to_owned()));
        }
        Err(Error::Invalid {
            field: "meta".into(),
            reason: "expected sqlite:///path/to/file or postgres://user@host:port/database".into(),
        })
    }

    /// The URL with any password replaced by `***`, for logs.
    pub fn redacted(&self) -> String {
        match self {
            MetaUrl::Sqlite(path) => format!("sqlite://{}", path.display()),
            MetaUrl::Postgres(url) => match url::Url::parse(url) {
                Ok(mut u) if u.password().is_some() => {
                    let _ = u.set_password(Some("***"));
                    u.to_string()
                }
                _ => url.clone(),
            },
        }
    }
}

/// Connections a server keeps to PostgreSQL at most.
const POSTGRES_CONNECTIONS: u32 = 16;
/// How long a statement waits for a free connection, or for PostgreSQL to accept one.
const POSTGRES_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

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
        migrate::apply_sqlite(&mut writer)?;
        Ok(Self {
            backend: Backend::Sqlite {
                path: path.to_owned(),
                writer: Mutex::new(writer),
                readers: Mutex::new(Vec::new()),
            },
            run_cache: lifecycle::RunCache::default(),
            summary_cache: lifecycle::SummaryCache::default(),
        })
    }

    /// Opens the database `url` names, applying pending migrations.
    pub fn connect(url: &MetaUrl) -> Result<Self> {
        match url {
            MetaUrl::Sqlite(path) => Self::open(path),
            MetaUrl::Postgres(url) => {
                let pool = postgres::Pool::connect(url, POSTGRES_CONNECTIONS, POSTGRES_CONNECT_TIMEOUT)?;
                pool.with_client(migrate::apply_postgres)?;
                Ok(Self {
                    backend: Backend::Postgres(pool),
                    run_cache: lifecycle::RunCache::default(),
                    summary_cache: lifecycle::SummaryCache::default(),
                })
            }
        }
    }

    /// Brings the schema of `url` to this build's version; answers (version before, version now).
    pub fn migrate(url: &MetaUrl) -> Result<(i64, i64)> {
        match url {
            MetaUrl::Sqlite(path) => {
                let mut conn = Connection::open(path)?;
                let before: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
                migrate::apply_sqlite(&mut conn)?;
                Ok((before, migrate::newest()))
            }
            MetaUrl::Postgres(url) => {
                let pool = postgres::Pool::connect(url, 1, POSTGRES_CONNECT_TIMEOUT)?;
                pool.with_client(|client| {
                    let before = migrate::postgres_version(client)?;
                    let now = migrate::apply_postgres(client)?;
                    Ok((before, now))
                })
            }
        }
    }

    /// Whether the database answers a query now.
    pub fn ping(&self) -> Result<()> {
        self.read(|db| db.row("SELECT 1", db::vals![]).map(|_| ()))
    }

    pub(crate) fn dialect(&self) -> db::Dialect {
        match self.backend {
            Backend::Sqlite { .. } => db::Dialect::Sqlite,
            Backend::Postgres(_) => db::Dialect::Postgres,
        }
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
            Backend::Postgres(pool) => pool.write(&mut f),
        }
    }

    /// Runs `f` on a reading connection; each statement sees the latest committed state.
    pub(crate) fn read<T>(&self, mut f: impl FnMut(&dyn Db) -> Result<T>) -> Result<T> {
        match &self.backend {
            Backend::Sqlite { path, readers, .. } => retry_busy(|| sqlite_read(path, readers, &mut |c| f(c))),
            Backend::Postgres(pool) => pool.read(&mut f),
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
            Backend::Postgres(pool) => pool.snapshot(&mut f),
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

/// A store for a unit test: SQLite in `dir`, or with `TRAINLOG_TEST_META=postgres` a fresh
/// database on the PostgreSQL server `TRAINLOG_TEST_PG` names.
#[cfg(test)]
pub(crate) fn test_store(dir: &Path) -> MetaStore {
    MetaStore::connect(&test_url(dir)).expect("the test database")
}

/// A fresh test database: on PostgreSQL with `TRAINLOG_TEST_META=postgres`, else SQLite in `dir`.
#[cfg(test)]
pub(crate) fn test_url(dir: &Path) -> MetaUrl {
    if std::env::var("TRAINLOG_TEST_META").as_deref() == Ok("postgres") {
        let admin =
            std::env::var("TRAINLOG_TEST_PG").expect("TRAINLOG_TEST_PG: the URL of a PostgreSQL server for tests");
        let name = format!("t_{}", uuid::Uuid::new_v4().simple());
        return MetaUrl::Postgres(create_postgres_database(&admin, &name).expect("a test database"));
    }
    MetaUrl::Sqlite(dir.join("meta.sqlite"))
}
