//! `MetricsStore`: the write path (write-ahead log thread with group commit), the background
//! persister and compactor, and the read path merging files with buffered points.

mod compactor;
mod log_writer;
mod persister;
mod purge;
mod reads;

use crate::buffer::{FileMeta, Generation, RunFiles, State};
use crate::counters::{bump, CounterValues, Counters};
use crate::parquet_io::{self, key_index_from_json, key_index_to_json, COMPACT_ZSTD_LEVEL, FLUSH_ZSTD_LEVEL};
use crate::series::{Series, StepRange};
use crate::summaries::{Summaries, SummaryWrite};
use crate::wal::{self, Segment};
use crate::{blocking, io_err, lock, objects, read, runs_table, write, Backpressure, Error, Result};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, Notify};
use trainlog_meta::{MetaStore, MetricFileRow, WAL_PERSISTED_THROUGH};
use trainlog_schema::{MetricKey, MetricSummary, PointBatch, RunId};

use log_writer::{recover, wal_loop, WalCmd};
use persister::{catalog_row, file_meta};
use reads::SeriesCache;

pub use purge::PurgeOutcome;

/// How long a run's media index may lag its rows: it is rewritten at most this often.
const MEDIA_INDEX_DELAY: Duration = Duration::from_secs(5);

/// How often media blobs that nothing names are collected (and once at start).
const MEDIA_COLLECT_EVERY: Duration = Duration::from_secs(3600);

/// Default bound of buffered point bytes: about 2.8 million points, a few persist rounds.
pub const DEFAULT_MAX_BUFFER_BYTES: usize = 64 << 20;

#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Holds `wal/` and, without `store_url`, the local object store in `store/`.
    pub data_dir: PathBuf,
    /// An object_store URL (`file:///…`, `s3://bucket/prefix`).
    pub store_url: Option<String>,
    /// Buffered points that make the active generation freeze and persist.
    pub rotate_points: usize,
    /// Age at which a non-empty active generation freezes and persists.
    pub rotate_after: Duration,
    /// Frozen generations allowed to wait for persistence before ingest waits.
    pub max_frozen: usize,
    /// A run with more files than this is compacted while it is still running.
    pub max_files_per_run: usize,
    /// Bytes of decoded series kept in memory for reads.
    pub cache_bytes: usize,
    /// Bytes of buffered points (`Series::BYTES_PER_POINT` each) above which ingest is refused
    /// with `Error::BufferFull` until persisting catches up.
    pub max_buffer_bytes: usize,
    /// Age past which a metric file the catalog does not name is an orphan that the start-up
    /// sweep deletes, and past which a media blob that no item names (counted from when its
    /// bytes were last sent) is collected. Younger ones may be uploads not yet recorded.
    pub orphan_min_age: Duration,
}

impl StoreConfig {
    pub fn new(data_dir: PathBuf, store_url: Option<String>) -> Self {
        Self {
            data_dir,
            store_url,
            rotate_points: 500_000,
            rotate_after: Duration::from_secs(30),
            max_frozen: 2,
            max_files_per_run: 16,
            cache_bytes: 128 << 20,
            max_buffer_bytes: DEFAULT_MAX_BUFFER_BYTES,
            orphan_min_age: Duration::from_secs(3600),
        }
    }
}

/// Counters for health and benchmarks.
#[derive(Debug, Clone, Default)]
pub struct StoreStats {
    pub buffered_points: usize,
    pub buffered_bytes: usize,
    pub max_buffer_bytes: usize,
    pub frozen_generations: usize,
    pub files: usize,
    pub file_bytes: u64,
    pub file_rows: u64,
    pub wal_replayed_records: usize,
    pub wal_cut_bytes: u64,
    pub counters: CounterValues,
}

pub(crate) struct Inner {
    config: StoreConfig,
    meta: Arc<MetaStore>,
    objects: Arc<dyn ObjectStore>,
    /// The store's folder when it is on the local disk: files written there are fsynced.
    local_root: Option<PathBuf>,
    wal_dir: PathBuf,
    /// Removes the log segments whose points and console lines are all in files.
    retention: Arc<wal::Retention>,
    /// This data folder's id: it names the folder's log counter and the compaction leases it holds.
    folder_id: String,
    /// This data folder's counter of persisted log segments in the metadata database.
    wal_counter: String,
    state: RwLock<State>,
    summaries: Mutex<Summaries>,
    cache: Mutex<SeriesCache>,
    wal_tx: Mutex<Option<SyncSender<WalCmd>>>,
    wal_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    persist_wanted: Notify,
    /// Runs to compact: `true` merges every file (a finished run), `false` only the small recent ones.
    compact_wanted: Mutex<HashMap<RunId, bool>>,
    projects_changed: Mutex<HashSet<i64>>,
    projects_summary_changed: Mutex<HashSet<i64>>,
    stopping: AtomicBool,
    replay: (usize, u64),
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    counters: Arc<Counters>,
    /// Metric files the catalog names but the object store no longer has, by run: reads skip
    /// them and say so, and the run's next compaction drops them from the catalog.
    missing_files: Mutex<HashMap<RunId, BTreeSet<String>>>,
    /// Points in the active and frozen generations, read by ingest to refuse what exceeds the bound.
    buffered_points: AtomicUsize,
    /// Serializes persisting and compacting, which the background task and `flush` both start.
    persist_lock: tokio::sync::Mutex<()>,
    /// Held to write summaries, so an older snapshot never lands after a newer one; read to
    /// answer them, so no read sees points neither pending here nor written yet.
    summary_sync_lock: tokio::sync::RwLock<()>,
    /// Runs deleted for good: their points are dropped wherever they are met.
    purged: RwLock<HashSet<RunId>>,
}

/// The metrics store; cheap to clone.
#[derive(Clone)]
pub struct MetricsStore {
    inner: Arc<Inner>,
    console: crate::ConsoleStore,
}

/// The data folder's id. Servers sharing a database each keep a log of their own in their own
/// folder, so each folder has an id (kept in `DATA/folder-id`) and a counter of persisted log
/// segments of its own. A folder that has a log but no id yet (made
/// before folders had ids) takes the one counter it used then.
fn folder_id(meta: &MetaStore, data_dir: &std::path::Path, had_log: bool) -> Result<String> {
    let id_path = data_dir.join("folder-id");
    match std::fs::read_to_string(&id_path) {
        Ok(id) if !id.trim().is_empty() => return Ok(id.trim().to_owned()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err("reading the data folder's id")(e)),
    }
    let id = format!("{:016x}{:016x}", rand_u64()?, rand_u64()?);
    let counter = trainlog_meta::wal_counter(&id);
    if had_log {
        if let Some(through) = meta.counter(WAL_PERSISTED_THROUGH)? {
            meta.set_counter(&counter, through)?;
        }
    }
    let temporary = data_dir.join("folder-id.tmp");
    std::fs::write(&temporary, &id).map_err(io_err("writing the data folder's id"))?;
    std::fs::File::open(&temporary).and_then(|f| f.sync_all()).map_err(io_err("syncing the data folder's id"))?;
    std::fs::rename(&temporary, &id_path).map_err(io_err("writing the data folder's id"))?;
    std::fs::File::open(data_dir).and_then(|f| f.sync_all()).map_err(io_err("syncing the data folder"))?;
    Ok(id)
}

fn rand_u64() -> Result<u64> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 8];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| Error::Config("the system's random number generator failed".into()))?;
    Ok(u64::from_le_bytes(bytes))
}

impl MetricsStore {
    /// Opens the store: loads the file catalog, replays the write-ahead log, starts the log
    /// writer thread and the background tasks. Must be called inside a tokio runtime.
    pub async fn open(config: StoreConfig, meta: Arc<MetaStore>) -> Result<Self> {
        let opened = objects::open(config.store_url.as_deref(), &config.data_dir.join("store"))?;
        let wal_dir = config.data_dir.join("wal");
        let had_log = wal_dir.is_dir();
        std::fs::create_dir_all(&wal_dir).map_err(io_err("creating the write-ahead log folder"))?;
        let meta2 = meta.clone();
        let (wal_dir2, data_dir) = (wal_dir.clone(), config.data_dir.clone());
        let (folder_id, wal_counter, purged, recovered) = blocking(move || {
            let folder_id = folder_id(&meta2, &data_dir, had_log)?;
            let wal_counter = trainlog_meta::wal_counter(&folder_id);
            let purged: HashSet<RunId> = meta2.purged_runs()?.into_iter().collect();
            let mut recovered = recover(&meta2, &wal_dir2, &folder_id, &purged)?;
            log_writer::take_own_console_log(&data_dir, &wal_dir2, &mut recovered)?;
            Ok((folder_id, wal_counter, purged, recovered))
        })
        .await?;
        let log_writer::Recovered { state, summaries, segment, replay, lines, points_low } = recovered;
        let replayed_points = state.frozen.iter().map(|g| g.points).sum();
        let retention = Arc::new(wal::Retention::new(wal_dir.clone(), points_low, 0));
        let (tx, rx) = mpsc::sync_channel(1024);
        let inner = Arc::new(Inner {
            config,
            meta,
            objects: opened.store,
            local_root: opened.local_root,
            wal_dir,
            retention: retention.clone(),
            folder_id,
            wal_counter,
            state: RwLock::new(state),
            summaries: Mutex::new(summaries),
            cache: Mutex::new(SeriesCache::default()),
            wal_tx: Mutex::new(Some(tx)),
            wal_thread: Mutex::new(None),
            persist_wanted: Notify::new(),
            compact_wanted: Mutex::new(HashMap::new()),
            projects_changed: Mutex::new(HashSet::new()),
            projects_summary_changed: Mutex::new(HashSet::new()),
            stopping: AtomicBool::new(false),
            replay,
            tasks: Mutex::new(Vec::new()),
            counters: Arc::new(Counters::default()),
            buffered_points: AtomicUsize::new(replayed_points),
            missing_files: Mutex::new(HashMap::new()),
            persist_lock: tokio::sync::Mutex::new(()),
            summary_sync_lock: tokio::sync::RwLock::new(()),
            purged: RwLock::new(purged),
        });
        let console = crate::ConsoleStore::open(
            inner.objects.clone(),
            inner.local_root.clone(),
            retention.clone(),
            inner.folder_id.clone(),
            inner.counters.clone(),
            inner.config.rotate_after,
            crate::console::Replayed { lines, current: segment.number, purged: read(&inner.purged).clone() },
        )?;
        let lines_low = console.lines_low();
        blocking(move || retention.raise_marks(0, lines_low)).await?;
        let runtime = tokio::runtime::Handle::current();
        let (thread_inner, thread_console) = (inner.clone(), console.clone());
        let handle = std::thread::Builder::new()
            .name("trainlog-wal".into())
            .spawn(move || wal_loop(thread_inner, thread_console, segment, rx, runtime))
            .map_err(io_err("starting the write-ahead log thread"))?;
        *lock(&inner.wal_thread) = Some(handle);
        let store = Self { inner, console };
        store.spawn_background();
        Ok(store)
    }

    /// Deletes metric files the catalog does not know: left by a crash between writing a file
    /// and recording it, or between a compaction's commit and its deletes. Answers how many.
    pub async fn sweep_orphans(&self) -> Result<usize> {
        self.inner.sweep_orphans().await
    }

    fn spawn_background(&self) {
        let sweeper = {
            let inner = self.inner.clone();
            tokio::spawn(async move {
                if let Err(e) = inner.finish_purges().await {
                    tracing::error!("could not delete the objects of runs deleted for good, will retry: {e}");
                }
                match inner.sweep_orphans().await {
                    Ok(0) => {}
                    Ok(n) => tracing::warn!(files = n, "removed metric files left unrecorded by a crash"),
                    Err(e) => {
                        bump(&inner.counters.orphan_sweep_failures);
                        tracing::error!("could not sweep unrecorded metric files: {e}");
                    }
                }
            })
        };
        let collector = {
            let inner = self.inner.clone();
            tokio::spawn(async move {
                loop {
                    match inner.collect_media().await {
                        Ok(0) => {}
                        Ok(n) => tracing::info!(blobs = n, "deleted media blobs that no item names any more"),
                        Err(e) => tracing::error!("collecting media blobs that no item names failed, will retry: {e}"),
                    }
                    let next = tokio::time::Instant::now() + MEDIA_COLLECT_EVERY;
                    while tokio::time::Instant::now() < next {
                        if inner.stopping.load(Ordering::Acquire) {
                            return;
                        }
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            })
        };
        let persister = {
            let inner = self.inner.clone();
            tokio::spawn(async move {
                loop {
                    let _ = tokio::time::timeout(Duration::from_secs(1), inner.persist_wanted.notified()).await;
                    if let Err(e) = inner.persist_frozen().await {
                        bump(&inner.counters.persist_failures);
                        tracing::error!("persisting buffered points failed, will retry: {e}");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    if let Err(e) = inner.compact_pending().await {
                        bump(&inner.counters.compaction_failures);
                        tracing::error!("compaction failed, will retry: {e}");
                    }
                    if inner.stopping.load(Ordering::Acquire) {
                        break;
                    }
                }
            })
        };
        let maintenance = {
            let inner = self.inner.clone();
            tokio::spawn(async move {
                let mut tick = 0u64;
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    if inner.stopping.load(Ordering::Acquire) {
                        break;
                    }
                    tick += 1;
                    if tick.is_multiple_of(5) {
                        if let Err(e) = inner.mark_flagged_stale().await {
                            bump(&inner.counters.summary_sync_failures);
                            tracing::error!("reading summaries to recompute failed, will retry: {e}");
                        }
                    }
                    if let Err(e) = inner.settle_stale_summaries().await {
                        bump(&inner.counters.summary_sync_failures);
                        tracing::error!("recomputing metric summaries failed, will retry: {e}");
                    }
                    if let Err(e) = inner.sync_summaries().await {
                        bump(&inner.counters.summary_sync_failures);
                        tracing::error!("writing metric summaries failed, will retry: {e}");
                    }
                    if tick.is_multiple_of(60) {
                        if let Err(e) = inner.finish_purges().await {
                            tracing::error!("deleting the objects of runs deleted for good failed, will retry: {e}");
                        }
                    }
                    if tick.is_multiple_of(MEDIA_INDEX_DELAY.as_secs()) {
                        if let Err(e) = inner.write_media_indexes(MEDIA_INDEX_DELAY).await {
                            tracing::error!("writing a run's media index failed, will retry: {e}");
                        }
                    }
                    let with_summaries = tick.is_multiple_of(10);
                    if let Err(e) = inner.refresh_runs_tables(with_summaries).await {
                        bump(&inner.counters.runs_table_failures);
                        tracing::error!("writing a runs table failed, will retry: {e}");
                    }
                }
            })
        };
        lock(&self.inner.tasks).extend([sweeper, collector, persister, maintenance]);
    }

    /// Logs a batch for a run; answers once it is durable in the write-ahead log and queryable.
    pub async fn append(&self, run: &RunId, project_id: i64, batch: PointBatch) -> Result<()> {
        if batch.points.is_empty() {
            return Ok(());
        }
        let buffered = self.inner.buffered_points.load(Ordering::Relaxed);
        let limit = self.inner.config.max_buffer_bytes;
        if buffered > 0 && (buffered + batch.points.len()) * Series::BYTES_PER_POINT > limit {
            bump(&self.inner.counters.ingest_refused_buffer_full);
            return Err(Backpressure::BufferFull { buffered_bytes: buffered * Series::BYTES_PER_POINT, limit }.into());
        }
        if self.inner.is_purged(run) {
            return Err(purged_error(run));
        }
        self.inner.ensure_summaries(run, project_id).await?;
        let (done, wait) = oneshot::channel();
        let tx = lock(&self.inner.wal_tx).clone().ok_or(Error::ShuttingDown)?;
        let points = batch.points.len() as u64;
        crate::send_to_writer(tx, WalCmd::Append { run: run.clone(), project_id, batch, done }).await?;
        wait.await.map_err(|_| Error::ShuttingDown)??;
        bump(&self.inner.counters.ingest_batches);
        self.inner.counters.ingest_points.fetch_add(points, Ordering::Relaxed);
        Ok(())
    }

    /// One series of a run, sorted by step, restricted to `range`.
    pub async fn series(&self, run: &RunId, key: &MetricKey, range: StepRange) -> Result<Series> {
        self.inner.series(run, key, range).await
    }

    /// Metric files of a run that its catalog names but the object store lost: reads of the run
    /// leave their points out.
    pub fn missing_files(&self, run: &RunId) -> Vec<String> {
        lock(&self.inner.missing_files).get(run).map(|m| m.iter().cloned().collect()).unwrap_or_default()
    }

    /// Current summaries of a run's series: the stored ones, which every server sharing the
    /// database folds its points into, with the points this server has not written yet. A
    /// series with a rewritten step answers bounds until it is recomputed (see `summaries.rs`);
    /// no read merges a series.
    pub async fn summaries(&self, run: &RunId) -> Result<BTreeMap<String, MetricSummary>> {
        let _no_write_in_flight = self.inner.summary_sync_lock.read().await;
        let (meta, id) = (self.inner.meta.clone(), run.clone());
        let stored = blocking(move || Ok(meta.summaries(&id)?)).await?;
        Ok(lock(&self.inner.summaries).overlay(run, stored, |_| true))
    }

    /// `summaries` of many runs, by run id, with only the keys `keep` accepts, read from the
    /// metadata store in one blocking call.
    pub async fn summaries_of(
        &self,
        runs: &[RunId],
        keep: impl Fn(&str) -> bool,
    ) -> Result<HashMap<String, BTreeMap<String, MetricSummary>>> {
        let _no_write_in_flight = self.inner.summary_sync_lock.read().await;
        let meta = self.inner.meta.clone();
        let ids: Vec<String> = runs.iter().map(|run| run.as_str().to_owned()).collect();
        let mut stored = blocking(move || {
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            Ok(meta.summaries_of(&ids)?)
        })
        .await?;
        let summaries = lock(&self.inner.summaries);
        Ok(runs
            .iter()
            .map(|run| {
                let stored = stored.remove(run.as_str()).unwrap_or_default();
                (run.as_str().to_owned(), summaries.overlay(run, stored, &keep))
            })
            .collect())
    }

    /// Writes every changed summary to the metadata store, so run search sees them.
    pub async fn sync_summaries(&self) -> Result<()> {
        self.inner.sync_summaries().await
    }

    /// Recomputes, from their series, the summaries that a rewritten step left as bounds.
    pub async fn settle_stale_summaries(&self) -> Result<()> {
        self.inner.settle_stale_summaries().await
    }

    /// Notes that a project's runs changed, so its runs table is rewritten soon.
    pub fn project_changed(&self, project_id: i64) {
        lock(&self.inner.projects_changed).insert(project_id);
    }

    /// A run ended: persist its buffered points soon and compact its files.
    pub async fn run_finished(&self, run: &RunId) -> Result<()> {
        lock(&self.inner.compact_wanted).insert(run.clone(), true);
        if read(&self.inner.state).buffered(run) {
            self.rotate().await?;
        }
        self.inner.persist_wanted.notify_one();
        Ok(())
    }

    async fn rotate(&self) -> Result<()> {
        let (done, wait) = oneshot::channel();
        let tx = lock(&self.inner.wal_tx).clone().ok_or(Error::ShuttingDown)?;
        blocking(move || tx.send(WalCmd::Rotate { done }).map_err(|_| Error::ShuttingDown)).await?;
        wait.await.map_err(|_| Error::ShuttingDown)
    }

    /// Persists every buffered point, compacts pending runs and writes summaries and runs tables.
    pub async fn flush(&self) -> Result<()> {
        self.rotate().await?;
        self.inner.persist_frozen().await?;
        self.inner.compact_pending().await?;
        self.inner.mark_flagged_stale().await?;
        self.settle_stale_summaries().await?;
        self.sync_summaries().await?;
        self.inner.refresh_runs_tables(true).await?;
        self.inner.write_media_indexes(Duration::ZERO).await?;
        self.console.persist_frozen().await
    }

    /// Flushes, then stops the log writer and the background tasks.
    pub async fn shutdown(&self) -> Result<()> {
        let flushed = self.flush().await;
        self.console.stop();
        self.inner.stopping.store(true, Ordering::Release);
        if let Some(tx) = lock(&self.inner.wal_tx).take() {
            let _ = tx.send(WalCmd::Stop);
        }
        let thread = lock(&self.inner.wal_thread).take();
        if let Some(t) = thread {
            blocking(move || t.join().map_err(|_| Error::Task("the write-ahead log thread panicked".into()))).await?;
        }
        let tasks = std::mem::take(&mut *lock(&self.inner.tasks));
        for t in tasks {
            t.abort();
        }
        flushed
    }

    /// Whether the object store answers now: a read of an object that need not exist, so a
    /// "not found" is an answer too.
    pub async fn probe(&self) -> Result<()> {
        match self.inner.objects.head(&ObjectPath::from("health/probe")).await {
            Ok(_) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(Error::ObjectStore(e)),
        }
    }

    /// Media blobs and each run's media index, in the same object store as the metric files.
    pub fn media(&self) -> crate::MediaStore {
        self.inner.media()
    }

    /// Console lines of runs, in the same object store as the metric files.
    pub fn console(&self) -> &crate::ConsoleStore {
        &self.console
    }

    /// Artifact bytes, in the same object store as the metric files.
    pub fn artifacts(&self) -> crate::ArtifactStore {
        crate::ArtifactStore::new(self.inner.objects.clone())
    }

    pub fn stats(&self) -> StoreStats {
        let state = read(&self.inner.state);
        let files = state.files.values().flat_map(|f| f.files.iter());
        let (mut n, mut bytes, mut rows) = (0, 0, 0);
        for f in files {
            n += 1;
            bytes += f.bytes;
            rows += f.rows;
        }
        let buffered_points = state.active.points + state.frozen.iter().map(|g| g.points).sum::<usize>();
        StoreStats {
            buffered_points,
            buffered_bytes: buffered_points * Series::BYTES_PER_POINT,
            max_buffer_bytes: self.inner.config.max_buffer_bytes,
            frozen_generations: state.frozen.len(),
            files: n,
            file_bytes: bytes,
            file_rows: rows,
            wal_replayed_records: self.inner.replay.0,
            wal_cut_bytes: self.inner.replay.1,
            counters: self.inner.counters.values(),
        }
    }
}

/// What ingest answers for a run deleted for good.
fn purged_error(run: &RunId) -> Error {
    trainlog_meta::Error::NotFound { what: format!("run {run}") }.into()
}

impl Inner {
    fn media(&self) -> crate::MediaStore {
        crate::MediaStore::new(self.objects.clone(), self.local_root.clone(), self.meta.clone())
    }

    /// Writes the media index of each run whose items changed `min_age` ago or earlier,
    /// counting what was written and what failed.
    async fn write_media_indexes(&self, min_age: Duration) -> Result<()> {
        match self.media().write_due_indexes(min_age).await {
            Ok(n) => {
                self.counters.media_indexes_written.fetch_add(n as u64, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                bump(&self.counters.media_index_failures);
                Err(e)
            }
        }
    }
}

impl Inner {
    /// Collects the media blobs that nothing names, counting what was deleted and what failed;
    /// answers how many were deleted, or the first failure.
    async fn collect_media(&self) -> Result<u64> {
        let collected = self.media().collect_unreferenced(self.config.orphan_min_age).await;
        self.counters.media_blobs_collected.fetch_add(collected.deleted, Ordering::Relaxed);
        self.counters.media_collection_failures.fetch_add(collected.failed, Ordering::Relaxed);
        collected.error.map_or(Ok(collected.deleted), Err)
    }

    async fn ensure_summaries(&self, run: &RunId, project_id: i64) -> Result<()> {
        if lock(&self.summaries).is_loaded(run) {
            return Ok(());
        }
        let meta = self.meta.clone();
        let id = run.clone();
        let stored = blocking(move || Ok(meta.summaries(&id)?)).await?;
        lock(&self.summaries).load(run, project_id, stored);
        Ok(())
    }

    async fn refresh_stale(&self, run: &RunId) -> Result<()> {
        let stale = lock(&self.summaries).stale_keys(run);
        // The persister and the maintenance task may both recompute a series at once: the
        // generation read here lets only the first result settle.
        for (key, generation) in stale {
            let series = self.series(run, &key, StepRange::default()).await?;
            let summary =
                blocking(move || Ok(MetricSummary::of_sorted(&series.steps, &series.timestamps, &series.values)))
                    .await?;
            bump(&self.counters.summary_recomputes);
            lock(&self.summaries).settle(run, &key, generation, summary);
        }
        Ok(())
    }

    async fn settle_stale_summaries(&self) -> Result<()> {
        let stale_runs = lock(&self.summaries).runs_with_stale();
        for run in stale_runs {
            // The recomputation sees the files and this server's buffer: it waits while another
            // server holds points of the run that no file has yet.
            if !self.others_hold_unpersisted(&run).await? {
                self.refresh_stale(&run).await?;
            }
        }
        Ok(())
    }

    /// Marks stale the summaries another server's write flagged as possibly counting a step
    /// twice, so they are recomputed like those of a step rewritten here.
    async fn mark_flagged_stale(&self) -> Result<()> {
        const RUNS_PER_ROUND: i64 = 100;
        let meta = self.meta.clone();
        let flagged = blocking(move || Ok(meta.summaries_to_recompute(RUNS_PER_ROUND)?)).await?;
        for (run, project_id, keys) in flagged {
            if self.is_purged(&run) {
                continue;
            }
            self.ensure_summaries(&run, project_id).await?;
            lock(&self.summaries).mark_stale(&run, &keys);
        }
        Ok(())
    }

    async fn others_hold_unpersisted(&self, run: &RunId) -> Result<bool> {
        let (meta, id, folder) = (self.meta.clone(), run.clone(), self.folder_id.clone());
        blocking(move || Ok(meta.others_hold_unpersisted(&id, &folder)?)).await
    }

    /// Writes what changed in the summaries: points taken since the last write fold into the
    /// stored summaries; recomputed ones replace them unless another server holds points of the
    /// run that no file has yet, and then their pending points fold in and they are recomputed
    /// again later. Runs this server still buffers are recorded as held by its data folder.
    async fn sync_summaries(&self) -> Result<()> {
        /// A hold lapses after this unless renewed: the server that held it died for good.
        const HOLD_MS: i64 = 10 * 60 * 1000;
        let _guard = self.summary_sync_lock.write().await;
        let mut rows = lock(&self.summaries).take_dirty();
        {
            let purged = read(&self.purged);
            rows.retain(|row| !purged.contains(&row.run));
        }
        if rows.is_empty() {
            return Ok(());
        }
        let buffered: HashSet<RunId> = {
            let state = read(&self.state);
            rows.iter().map(|row| &row.run).filter(|run| state.buffered(run)).cloned().collect()
        };
        let (meta, folder) = (self.meta.clone(), self.folder_id.clone());
        let taken = rows.clone();
        let result = blocking(move || {
            let until = trainlog_meta::now_ms() + HOLD_MS;
            let mut merges: Vec<(RunId, MetricKey, MetricSummary, i64)> = Vec::new();
            let mut replaces: BTreeMap<RunId, Vec<(MetricKey, MetricSummary, MetricSummary, i64)>> = BTreeMap::new();
            for row in rows {
                match row.write {
                    SummaryWrite::Merge { pending, first_step } => merges.push((row.run, row.key, pending, first_step)),
                    SummaryWrite::Replace { summary, pending, first_step } => {
                        replaces.entry(row.run).or_default().push((row.key, summary, pending, first_step))
                    }
                }
            }
            let mut refused = Vec::new();
            for (run, keys) in replaces {
                let whole: Vec<(MetricKey, MetricSummary)> = keys.iter().map(|(k, s, ..)| (k.clone(), *s)).collect();
                let hold = buffered.contains(&run).then_some(until);
                if !meta.replace_summaries(&run, &whole, &folder, hold)? {
                    for (key, _, pending, first_step) in keys {
                        merges.push((run.clone(), key.clone(), pending, first_step));
                        refused.push((run.clone(), key));
                    }
                }
            }
            let held: Vec<&RunId> = {
                let mut runs: Vec<&RunId> = merges.iter().map(|m| &m.0).filter(|r| buffered.contains(*r)).collect();
                runs.sort();
                runs.dedup();
                runs
            };
            meta.merge_summaries(&merges, &folder, &held, until)?;
            Ok(refused)
        })
        .await;
        match result {
            Ok(refused) => {
                let mut summaries = lock(&self.summaries);
                for (run, key) in refused {
                    summaries.replacement_refused(&run, &key);
                }
                drop(summaries);
                lock(&self.projects_summary_changed).extend(taken.iter().map(|row| row.project_id));
                Ok(())
            }
            Err(e) => {
                lock(&self.summaries).restore(&taken);
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::persister::is_metric_file_path;
    use super::*;
    use trainlog_schema::{BatchPoint, ProjectName};

    fn batch(steps: impl Iterator<Item = i64>, value: impl Fn(i64) -> f64) -> PointBatch {
        let keys = vec![MetricKey::parse("key", "acc").unwrap(), MetricKey::parse("key", "loss").unwrap()];
        let points = steps
            .flat_map(|step| {
                let point = |key| BatchPoint { key, step, timestamp_ms: 1_700_000_000_000 + step, value: value(step) };
                [point(0), point(1)]
            })
            .collect();
        PointBatch { keys, points }
    }

    fn copy_folder(from: &std::path::Path, to: &std::path::Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy_folder(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), target).unwrap();
            }
        }
    }

    /// Two servers sharing a database each persist their own log: one persisting its segments
    /// must not make the other, restarted after a crash, skip segments it never persisted.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_data_folder_counts_its_own_persisted_log_segments() {
        let dir = tempfile::tempdir().unwrap();
        let meta = Arc::new(MetaStore::open(&dir.path().join("meta.db")).unwrap());
        let new =
            trainlog_meta::NewRun { project: Some(ProjectName::parse("project", "p").unwrap()), ..Default::default() };
        let loss = MetricKey::parse("key", "loss").unwrap();
        let (ours, _) = meta.create_run(&new).unwrap();
        let (theirs, _) = meta.create_run(&new).unwrap();

        let crashed = dir.path().join("crashed");
        let mut config = StoreConfig::new(dir.path().join("b"), None);
        config.rotate_after = Duration::from_secs(3600);
        let b = MetricsStore::open(config, meta.clone()).await.unwrap();
        b.append(&ours.id, ours.project_id, batch(0..50, |s| s as f64)).await.unwrap();
        // The folder as a crash would leave it: the batch acknowledged, in the log only.
        copy_folder(&dir.path().join("b"), &crashed);

        let a = MetricsStore::open(StoreConfig::new(dir.path().join("a"), None), meta.clone()).await.unwrap();
        for round in 0..3 {
            a.append(&theirs.id, theirs.project_id, batch(round * 10..round * 10 + 10, |s| s as f64)).await.unwrap();
            a.flush().await.unwrap();
        }
        a.shutdown().await.unwrap();
        // `b` stays up without persisting (its next rotation is an hour away), as if it had died.
        assert_eq!(b.stats().buffered_points, 100);

        let restarted = MetricsStore::open(StoreConfig::new(crashed, None), meta.clone()).await.unwrap();
        assert_eq!(restarted.stats().wal_replayed_records, 1, "the crashed folder replays its own log");
        let series = restarted.series(&ours.id, &loss, StepRange::default()).await.unwrap();
        assert_eq!(series.steps, (0..50).collect::<Vec<_>>());
        restarted.shutdown().await.unwrap();
    }

    /// Servers sharing a database and an object store: a run whose batches alternate between
    /// them reads whole from either once persisted, and is compacted once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn servers_sharing_a_catalog_read_each_others_files_and_compact_a_run_once() {
        let dir = tempfile::tempdir().unwrap();
        let meta = Arc::new(MetaStore::open(&dir.path().join("meta.db")).unwrap());
        let shared = dir.path().join("objects");
        std::fs::create_dir_all(&shared).unwrap();
        let open = |folder: &str| {
            let mut config = StoreConfig::new(dir.path().join(folder), Some(format!("file://{}", shared.display())));
            config.rotate_after = Duration::from_secs(3600);
            MetricsStore::open(config, meta.clone())
        };
        let (a, b) = (open("a").await.unwrap(), open("b").await.unwrap());
        let new =
            trainlog_meta::NewRun { project: Some(ProjectName::parse("project", "p").unwrap()), ..Default::default() };
        let (run, _) = meta.create_run(&new).unwrap();
        let loss = MetricKey::parse("key", "loss").unwrap();
        for round in 0..6 {
            let to = if round % 2 == 0 { &a } else { &b };
            to.append(&run.id, run.project_id, batch(round * 10..round * 10 + 10, |s| s as f64)).await.unwrap();
            to.flush().await.unwrap();
        }
        for store in [&a, &b] {
            let series = store.series(&run.id, &loss, StepRange::default()).await.unwrap();
            assert_eq!(series.steps, (0..60).collect::<Vec<_>>());
            let summary = store.summaries(&run.id).await.unwrap()["loss"];
            assert_eq!((summary.count, summary.last_step, summary.sum), (60, 59, (0..60).sum::<i64>() as f64));
        }
        assert_eq!(meta.run_files(run.id.as_str()).unwrap().len(), 6);
        // A rewrite through one server is recomputed from the files the other wrote too, once
        // the other holds no points that no file has: until then the summary is a bound.
        a.append(&run.id, run.project_id, batch(60..70, |s| s as f64)).await.unwrap();
        a.sync_summaries().await.unwrap();
        b.append(&run.id, run.project_id, batch([0, 59].into_iter(), |_| 1000.0)).await.unwrap();
        b.flush().await.unwrap();
        let bound = b.summaries(&run.id).await.unwrap()["loss"];
        let exact_sum = (1..59).sum::<i64>() as f64 + 2000.0 + (60..70).sum::<i64>() as f64;
        assert_eq!((bound.count, bound.max), (70, 1000.0), "a bound: the rewrites add to no count");
        assert_ne!(bound.sum, exact_sum, "not recomputed while a holds unpersisted points");
        a.flush().await.unwrap();
        b.flush().await.unwrap();
        for store in [&a, &b] {
            let summary = store.summaries(&run.id).await.unwrap()["loss"];
            assert_eq!((summary.count, summary.last, summary.max, summary.sum), (70, 69.0, 1000.0, exact_sum));
        }

        a.run_finished(&run.id).await.unwrap();
        b.run_finished(&run.id).await.unwrap();
        let (flushed_a, flushed_b) = tokio::join!(a.flush(), b.flush());
        flushed_a.unwrap();
        flushed_b.unwrap();
        // The one that did not compact finds one file on its next round.
        for store in [&a, &b] {
            store.flush().await.unwrap();
        }
        let compactions = a.stats().counters.compactions + b.stats().counters.compactions;
        assert_eq!(compactions, 1, "the run is compacted once");
        assert_eq!(meta.run_files(run.id.as_str()).unwrap().len(), 1);
        for store in [&a, &b] {
            let series = store.series(&run.id, &loss, StepRange::default()).await.unwrap();
            assert_eq!(series.steps, (0..70).collect::<Vec<_>>());
            assert_eq!((series.values[0], series.values[59]), (1000.0, 1000.0));
            assert_eq!(store.missing_files(&run.id), Vec::<String>::new());
        }
        let objects =
            std::fs::read_dir(shared.join(format!("projects/{}/metrics/{}", run.project_id, run.id))).unwrap().count();
        assert_eq!(objects, 1, "the compacted files are gone from the object store");
        a.shutdown().await.unwrap();
        b.shutdown().await.unwrap();
    }

    /// A folder made before folders had ids keeps the counter it used; a new folder starts at 0.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_folder_from_before_ids_takes_the_counter_it_used_and_a_new_one_starts_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let meta = Arc::new(MetaStore::open(&dir.path().join("meta.db")).unwrap());
        meta.set_counter(WAL_PERSISTED_THROUGH, 7).unwrap();
        std::fs::create_dir_all(dir.path().join("old/wal")).unwrap();
        for (folder, expected) in [("old", Some(7)), ("new", None)] {
            let store =
                MetricsStore::open(StoreConfig::new(dir.path().join(folder), None), meta.clone()).await.unwrap();
            let id = std::fs::read_to_string(dir.path().join(folder).join("folder-id")).unwrap();
            assert_eq!(meta.counter(&trainlog_meta::wal_counter(&id)).unwrap(), expected, "{folder}");
            store.shutdown().await.unwrap();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn step_range_reads_equal_slices_of_whole_reads_across_files_and_the_buffer() {
        let dir = tempfile::tempdir().unwrap();
        let meta = Arc::new(MetaStore::open(&dir.path().join("meta.db")).unwrap());
        let store = MetricsStore::open(StoreConfig::new(dir.path().to_owned(), None), meta.clone()).await.unwrap();
        let loss = MetricKey::parse("key", "loss").unwrap();
        let page = parquet_io::DATA_PAGE_ROWS as i64;
        // A long series (step ranges read from pages) and a short one (read whole and cached).
        for scale in [1, 100] {
            let new = trainlog_meta::NewRun {
                project: Some(ProjectName::parse("project", "p").unwrap()),
                ..Default::default()
            };
            let (run, _) = meta.create_run(&new).unwrap();
            let (id, project) = (run.id.clone(), run.project_id);
            // Two files that overlap (the newer one rewrites steps 40,000 to 59,999) and buffered
            // points that rewrite some steps again and add new ones.
            let mut expected: BTreeMap<i64, f64> = BTreeMap::new();
            let layers: [(Vec<i64>, f64, bool); 3] = [
                ((0..60_000 / scale).collect(), 1.0, true),
                ((40_000 / scale..100_000 / scale).collect(), 2.0, true),
                ((90_000 / scale..95_000 / scale).chain([120_000 / scale]).collect(), 3.0, false),
            ];
            for (steps, layer, persist) in layers {
                let value = move |step: i64| layer * 1e6 + step as f64;
                for &step in &steps {
                    expected.insert(step, value(step));
                }
                store.append(&id, project, batch(steps.into_iter(), value)).await.unwrap();
                if persist {
                    store.flush().await.unwrap();
                }
            }
            assert!(store.stats().buffered_points > 0);
            let mut whole = Series::default();
            for (&step, &value) in &expected {
                whole.push(step, 1_700_000_000_000 + step, value);
            }
            let range = |min: Option<i64>, max: Option<i64>| StepRange {
                min: min.map(|m| m / scale),
                max: max.map(|m| m / scale),
            };
            let ranges = [
                range(Some(10), Some(20)),
                range(Some(page - 1), Some(page)),
                range(Some(35_000), Some(65_000)),
                range(Some(59_999), Some(60_000)),
                range(Some(41_000), Some(58_000)),
                range(Some(70_000), None),
                range(None, Some(2 * page + 5)),
                range(Some(92_000), Some(110_000)),
                range(Some(99_999), Some(119_999)),
                range(Some(-1000), Some(-100)),
                range(Some(5000), Some(4000)),
            ];
            // Nothing cached: ranges are read from the files. Then the whole series is read
            // and cached, and ranges come out of the cache.
            for round in ["files", "cache"] {
                for q in ranges {
                    let got = store.series(&id, &loss, q).await.unwrap();
                    assert_eq!(got, whole.slice(q), "1/{scale} scale, {round}: {q:?}");
                }
                assert_eq!(store.series(&id, &loss, StepRange::default()).await.unwrap(), whole);
            }
        }
        // Two files a run, and the first run's buffered points, persisted by the second run's flushes.
        assert_eq!(store.stats().files, 5);
        store.shutdown().await.unwrap();
    }

    #[test]
    fn only_the_exact_metric_file_layout_counts_as_a_metric_file() {
        assert!(is_metric_file_path("projects/1/metrics/abc/00000000000000000007.parquet"));
        assert!(!is_metric_file_path("projects/1/artifacts/abc/eval/metrics/preds.parquet"));
        assert!(!is_metric_file_path("projects/1/metrics/abc/sub/00000000000000000007.parquet"));
        assert!(!is_metric_file_path("projects/1/metrics/abc/7.parquet"));
        assert!(!is_metric_file_path("projects/1/runs.parquet"));
    }
}
