//! `MetricsStore`: the write path (write-ahead log thread with group commit), the background
//! persister and compactor, and the read path merging files with buffered points.

use crate::buffer::{FileMeta, Generation, RunFiles, State};
use crate::counters::{bump, CounterValues, Counters};
use crate::parquet_io::{self, key_index_from_json, key_index_to_json, COMPACT_ZSTD_LEVEL, FLUSH_ZSTD_LEVEL};
use crate::series::{Series, StepRange};
use crate::summaries::Summaries;
use crate::wal::{self, Segment};
use crate::{blocking, io_err, objects, runs_table, Error, Result};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, Notify};
use trainlog_meta::{MetaStore, MetricFileRow, NEXT_FILE_NUMBER, WAL_PERSISTED_THROUGH};
use trainlog_schema::{MetricKey, MetricSummary, PointBatch, RunId};

/// Default bound of buffered point bytes: about eleven million points.
pub const DEFAULT_MAX_BUFFER_BYTES: usize = 256 << 20;

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

enum WalCmd {
    Append { run: RunId, project_id: i64, batch: PointBatch, done: oneshot::Sender<Result<()>> },
    Rotate { done: oneshot::Sender<()> },
    Stop,
}

struct CachedSeries {
    version: u64,
    series: Arc<Series>,
    last_used: u64,
}

#[derive(Default)]
struct SeriesCache {
    entries: HashMap<(RunId, MetricKey), CachedSeries>,
    bytes: usize,
    clock: u64,
}

/// Rows of a series, over all its files, above which a step range missing from the cache is
/// read from the pages that hold it rather than by reading the whole series.
const RANGE_READ_MIN_ROWS: u64 = 4 * parquet_io::DATA_PAGE_ROWS as u64;

pub(crate) struct Inner {
    config: StoreConfig,
    meta: Arc<MetaStore>,
    objects: Arc<dyn ObjectStore>,
    /// The store's folder when it is on the local disk: files written there are fsynced.
    local_root: Option<PathBuf>,
    wal_dir: PathBuf,
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
    counters: Counters,
    /// Metric files the catalog names but the object store no longer has, by run: reads skip
    /// them and say so, and the run's next compaction drops them from the catalog.
    missing_files: Mutex<HashMap<RunId, BTreeSet<String>>>,
    /// Points in the active and frozen generations, read by ingest to refuse what exceeds the bound.
    buffered_points: AtomicUsize,
    /// Serializes persisting and compacting, which the background task and `flush` both start.
    persist_lock: tokio::sync::Mutex<()>,
    /// Serializes writing summaries, so an older snapshot never lands after a newer one.
    summary_sync_lock: tokio::sync::Mutex<()>,
}

/// The metrics store; cheap to clone.
#[derive(Clone)]
pub struct MetricsStore {
    inner: Arc<Inner>,
}

fn catalog_row(run: &RunId, path: &ObjectPath, ord: i64, rows: u64, bytes: u64, index_json: String) -> MetricFileRow {
    MetricFileRow {
        path: path.to_string(),
        run_id: run.to_string(),
        ord,
        rows: rows as i64,
        bytes: bytes as i64,
        key_index: index_json,
    }
}

/// Whether `path` has the exact layout of a metric file, `projects/{id}/metrics/{run}/{20 digits}.parquet`.
fn is_metric_file_path(path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    matches!(parts.as_slice(), ["projects", project, "metrics", run, file]
        if project.bytes().all(|b| b.is_ascii_digit())
            && !run.is_empty()
            && file.strip_suffix(".parquet").is_some_and(|n| n.len() == 20 && n.bytes().all(|b| b.is_ascii_digit())))
}

fn project_of_path(path: &str) -> i64 {
    path.split('/').nth(1).and_then(|p| p.parse().ok()).unwrap_or(0)
}

impl MetricsStore {
    /// Opens the store: loads the file catalog, replays the write-ahead log, starts the log
    /// writer thread and the background tasks. Must be called inside a tokio runtime.
    pub async fn open(config: StoreConfig, meta: Arc<MetaStore>) -> Result<Self> {
        let opened = objects::open(config.store_url.as_deref(), &config.data_dir.join("store"))?;
        let wal_dir = config.data_dir.join("wal");
        std::fs::create_dir_all(&wal_dir).map_err(io_err("creating the write-ahead log folder"))?;
        let meta2 = meta.clone();
        let wal_dir2 = wal_dir.clone();
        let (state, summaries, segment, replay) = blocking(move || recover(&meta2, &wal_dir2)).await?;
        let replayed_points = state.frozen.iter().map(|g| g.points).sum();
        let (tx, rx) = mpsc::sync_channel(1024);
        let inner = Arc::new(Inner {
            config,
            meta,
            objects: opened.store,
            local_root: opened.local_root,
            wal_dir,
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
            counters: Counters::default(),
            buffered_points: AtomicUsize::new(replayed_points),
            missing_files: Mutex::new(HashMap::new()),
            persist_lock: tokio::sync::Mutex::new(()),
            summary_sync_lock: tokio::sync::Mutex::new(()),
        });
        let runtime = tokio::runtime::Handle::current();
        let thread_inner = inner.clone();
        let handle = std::thread::Builder::new()
            .name("trainlog-wal".into())
            .spawn(move || wal_loop(thread_inner, segment, rx, runtime))
            .map_err(io_err("starting the write-ahead log thread"))?;
        *lock(&inner.wal_thread) = Some(handle);
        let store = Self { inner };
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
                    if let Err(e) = inner.settle_stale_summaries().await {
                        bump(&inner.counters.summary_sync_failures);
                        tracing::error!("recomputing metric summaries failed, will retry: {e}");
                    }
                    if let Err(e) = inner.sync_summaries().await {
                        bump(&inner.counters.summary_sync_failures);
                        tracing::error!("writing metric summaries failed, will retry: {e}");
                    }
                    let with_summaries = tick.is_multiple_of(10);
                    if let Err(e) = inner.refresh_runs_tables(with_summaries).await {
                        bump(&inner.counters.runs_table_failures);
                        tracing::error!("writing a runs table failed, will retry: {e}");
                    }
                }
            })
        };
        lock(&self.inner.tasks).extend([sweeper, persister, maintenance]);
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
            return Err(Error::BufferFull { buffered_bytes: buffered * Series::BYTES_PER_POINT, limit });
        }
        self.inner.ensure_summaries(run, project_id).await?;
        let (done, wait) = oneshot::channel();
        let tx = lock(&self.inner.wal_tx).clone().ok_or(Error::ShuttingDown)?;
        let points = batch.points.len() as u64;
        let cmd = WalCmd::Append { run: run.clone(), project_id, batch, done };
        // A full channel means the log writer is behind: wait off the executor.
        match tx.try_send(cmd) {
            Ok(()) => {}
            Err(mpsc::TrySendError::Full(cmd)) => {
                blocking(move || tx.send(cmd).map_err(|_| Error::ShuttingDown)).await?
            }
            Err(mpsc::TrySendError::Disconnected(_)) => return Err(Error::ShuttingDown),
        }
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

    /// Current summaries of a run's series. A series with a rewritten step answers bounds until
    /// the background recomputes it (see `summaries.rs`); no read merges a series.
    pub async fn summaries(&self, run: &RunId, project_id: i64) -> Result<BTreeMap<String, MetricSummary>> {
        self.inner.ensure_summaries(run, project_id).await?;
        Ok(lock(&self.inner.summaries).current(run).unwrap_or_default())
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
        self.settle_stale_summaries().await?;
        self.sync_summaries().await?;
        self.inner.refresh_runs_tables(true).await
    }

    /// Flushes, then stops the log writer and the background tasks.
    pub async fn shutdown(&self) -> Result<()> {
        let flushed = self.flush().await;
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn read<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(|p| p.into_inner())
}

/// Reads an object whole, counting the request and its latency.
async fn get_object(objects: &Arc<dyn ObjectStore>, counters: &Counters, path: &ObjectPath) -> Result<bytes::Bytes> {
    let started = Instant::now();
    let outcome = match objects.get(path).await {
        Ok(got) => got.bytes().await,
        Err(e) => Err(e),
    };
    counters.object_store_call(started.elapsed(), &outcome);
    Ok(outcome?)
}

type Recovered = (State, Summaries, Segment, (usize, u64));

/// Start-up: load the file catalog, drop log segments already persisted, replay the others.
fn recover(meta: &MetaStore, wal_dir: &std::path::Path) -> Result<Recovered> {
    let persisted_through = meta.counter(WAL_PERSISTED_THROUGH)?.unwrap_or(0) as u64;
    let mut files: HashMap<RunId, RunFiles> = HashMap::new();
    for row in meta.metric_files()? {
        let index = key_index_from_json(&row.key_index)?;
        let entry = files.entry(RunId::from_trusted(row.run_id.clone())).or_default();
        entry.files.push(Arc::new(FileMeta {
            project_id: project_of_path(&row.path),
            path: ObjectPath::from(row.path),
            ord: row.ord,
            rows: row.rows as u64,
            bytes: row.bytes as u64,
            index,
        }));
    }
    for f in files.values_mut() {
        f.files.sort_by_key(|f| f.ord);
        f.version = 1;
    }
    let mut summaries = Summaries::default();
    let segments = wal::list_segments(wal_dir)?;
    let mut replayed = Generation::new(persisted_through);
    let (mut records, mut cut) = (0usize, 0u64);
    for &number in &segments {
        let path = wal::segment_path(wal_dir, number);
        if number <= persisted_through {
            std::fs::remove_file(&path).map_err(io_err("removing a persisted write-ahead log segment"))?;
            continue;
        }
        let r = wal::replay_segment(&path)?;
        if r.cut_bytes > 0 {
            tracing::warn!(bytes = r.cut_bytes, segment = %path.display(), "cut a torn or corrupt write-ahead log tail");
        }
        cut += r.cut_bytes;
        records += r.records.len();
        for rec in r.records {
            if !summaries.is_loaded(&rec.run) {
                let stored = meta.summaries(&rec.run)?;
                summaries.load(&rec.run, rec.project_id, stored);
            }
            summaries.apply(&rec.run, rec.project_id, &rec.batch);
            replayed.apply(&rec.run, rec.project_id, &rec.batch);
        }
        replayed.wal_segment = number;
    }
    let next_segment = segments.last().copied().unwrap_or(0).max(persisted_through) + 1;
    let segment = Segment::create(wal_dir, next_segment)?;
    let mut frozen = VecDeque::new();
    if replayed.points > 0 {
        frozen.push_back(Arc::new(replayed));
    } else if let Some(&last) = segments.last().filter(|&&n| n > persisted_through) {
        meta.commit_files(&[], &[], Some(last))?;
        for n in segments.iter().filter(|&&n| n > persisted_through) {
            let _ = std::fs::remove_file(wal::segment_path(wal_dir, *n));
        }
    }
    let state = State { active: Generation::new(next_segment), frozen, files, next_version: 1 };
    Ok((state, summaries, segment, (records, cut)))
}

/// The log writer: takes every waiting batch, writes them with one fsync, applies them to the
/// buffer and summaries, then acknowledges them all (group commit).
fn wal_loop(inner: Arc<Inner>, mut segment: Segment, rx: mpsc::Receiver<WalCmd>, runtime: tokio::runtime::Handle) {
    const MAX_GROUP_BYTES: usize = 64 << 20;
    let mut encoded = Vec::with_capacity(1 << 20);
    loop {
        let first = match rx.recv_timeout(Duration::from_millis(250)) {
            Ok(cmd) => Some(cmd),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let mut group = Vec::new();
        let mut rotate_waiters = Vec::new();
        let mut stop = false;
        let mut take = |cmd: WalCmd, encoded: &mut Vec<u8>| match cmd {
            WalCmd::Append { run, project_id, batch, done } => {
                wal::encode(encoded, &run, project_id, &batch);
                group.push((run, project_id, batch, done));
            }
            WalCmd::Rotate { done } => rotate_waiters.push(done),
            WalCmd::Stop => stop = true,
        };
        encoded.clear();
        if let Some(cmd) = first {
            take(cmd, &mut encoded);
            while encoded.len() < MAX_GROUP_BYTES {
                match rx.try_recv() {
                    Ok(cmd) => take(cmd, &mut encoded),
                    Err(_) => break,
                }
            }
        }
        if !group.is_empty() {
            // A segment that a failed write left torn takes nothing more: records after a torn
            // one would be cut at replay although they were acknowledged.
            let written = if segment.is_sound() {
                segment.append_durable(&encoded)
            } else {
                rotate(&inner, &segment).and_then(|next| {
                    segment = next;
                    segment.append_durable(&encoded)
                })
            };
            match written {
                Ok(()) => {
                    bump(&inner.counters.wal_syncs);
                    inner.counters.wal_records.fetch_add(group.len() as u64, Ordering::Relaxed);
                    {
                        let mut state = write(&inner.state);
                        for (run, project_id, batch, _) in &group {
                            state.active.apply(run, *project_id, batch);
                        }
                    }
                    let applied: usize = group.iter().map(|(_, _, batch, _)| batch.points.len()).sum();
                    inner.buffered_points.fetch_add(applied, Ordering::Relaxed);
                    {
                        let mut sums = lock(&inner.summaries);
                        for (run, project_id, batch, _) in &group {
                            sums.apply(run, *project_id, batch);
                        }
                    }
                    for (_, _, _, done) in group {
                        let _ = done.send(Ok(()));
                    }
                }
                Err(e) => {
                    bump(&inner.counters.wal_write_failures);
                    let (message, disk_full) = (e.to_string(), e.is_disk_full());
                    tracing::error!(
                        batches = group.len(),
                        disk_full,
                        "the write-ahead log could not be written: {message}"
                    );
                    for (run, _, _, done) in group {
                        tracing::warn!(run = %run, "batch refused: {message}");
                        let _ = done.send(Err(Error::LogUnavailable { message: message.clone(), disk_full }));
                    }
                    continue;
                }
            }
        }
        let due = {
            let state = read(&inner.state);
            let automatic = state.active.points >= inner.config.rotate_points
                || (state.active.points > 0 && state.active.started.elapsed() >= inner.config.rotate_after);
            // While `max_frozen` generations wait for the persister (a slow or absent object
            // store), the active one keeps growing instead: ingest never waits here, and
            // `max_buffer_bytes` bounds the memory. A flush or a finished run still rotates.
            (automatic && state.frozen.len() < inner.config.max_frozen)
                || (!rotate_waiters.is_empty() && state.active.points > 0)
        };
        if !due && read(&inner.state).frozen.len() >= inner.config.max_frozen {
            inner.persist_wanted.notify_one();
        }
        if due {
            match rotate(&inner, &segment) {
                Ok(next) => segment = next,
                Err(e) => {
                    // The current segment is sound and takes the next batches; rotation is tried
                    // again on the next round.
                    bump(&inner.counters.wal_rotate_failures);
                    tracing::error!("could not start a new write-ahead log segment: {e}");
                }
            }
            inner.persist_wanted.notify_one();
        }
        for done in rotate_waiters {
            let _ = done.send(());
        }
        if stop {
            drop(runtime);
            return;
        }
    }
}

/// Freezes the active generation and opens the next log segment.
fn rotate(inner: &Inner, current: &Segment) -> Result<Segment> {
    let next = Segment::create(&inner.wal_dir, current.number + 1)?;
    let mut state = write(&inner.state);
    let fresh = Generation::new(next.number);
    let old = std::mem::replace(&mut state.active, fresh);
    if old.points > 0 {
        state.frozen.push_back(Arc::new(old));
    }
    Ok(next)
}

impl Inner {
    /// Writes an object, counting the request and its latency.
    async fn put_object(&self, path: &ObjectPath, bytes: bytes::Bytes) -> Result<()> {
        let started = Instant::now();
        let outcome = self.objects.put(path, PutPayload::from_bytes(bytes)).await;
        self.counters.object_store_call(started.elapsed(), &outcome);
        outcome?;
        Ok(())
    }

    /// Reads a metric file of `run`. A file the object store lost while the catalog still
    /// names it is reported (counted, logged, listed by `missing_files`) and read as empty, so
    /// the rest of the series still reads; a file that compaction replaced meanwhile is
    /// `NotFound`, and the read starts again with the new file list.
    async fn metric_file(&self, run: &RunId, path: &ObjectPath) -> Result<Option<bytes::Bytes>> {
        match get_object(&self.objects, &self.counters, path).await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(Error::ObjectStore(object_store::Error::NotFound { .. })) if self.still_catalogued(run, path) => {
                let first_report = lock(&self.missing_files).entry(run.clone()).or_default().insert(path.to_string());
                if first_report {
                    bump(&self.counters.missing_files);
                    tracing::error!(run = %run, file = %path, "a metric file in the catalog is missing from the object store; its points are left out of reads");
                }
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    fn still_catalogued(&self, run: &RunId, path: &ObjectPath) -> bool {
        read(&self.state).files.get(run).is_some_and(|f| f.files.iter().any(|m| &m.path == path))
    }

    /// Makes written metric files durable before the catalog names them.
    async fn make_durable(&self, paths: Vec<ObjectPath>) -> Result<()> {
        match self.local_root.clone() {
            Some(root) => blocking(move || objects::sync_local(&root, &paths)).await,
            None => Ok(()),
        }
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
        for (key, rewrites) in stale {
            let series = self.series(run, &key, StepRange::default()).await?;
            let summary =
                blocking(move || Ok(MetricSummary::of_sorted(&series.steps, &series.timestamps, &series.values)))
                    .await?;
            bump(&self.counters.summary_recomputes);
            lock(&self.summaries).settle(run, &key, rewrites, summary);
        }
        Ok(())
    }

    async fn settle_stale_summaries(&self) -> Result<()> {
        let stale_runs = lock(&self.summaries).runs_with_stale();
        for run in stale_runs {
            self.refresh_stale(&run).await?;
        }
        Ok(())
    }

    async fn sync_summaries(&self) -> Result<()> {
        let _guard = self.summary_sync_lock.lock().await;
        let rows = lock(&self.summaries).take_dirty();
        if rows.is_empty() {
            return Ok(());
        }
        let meta = self.meta.clone();
        let upserts: Vec<(RunId, MetricKey, MetricSummary)> =
            rows.iter().map(|(r, _, k, s)| (r.clone(), k.clone(), *s)).collect();
        let result = blocking(move || Ok(meta.upsert_summaries(&upserts)?)).await;
        match result {
            Ok(()) => {
                lock(&self.projects_summary_changed).extend(rows.iter().map(|r| r.1));
                Ok(())
            }
            Err(e) => {
                lock(&self.summaries).mark_dirty(&rows);
                Err(e)
            }
        }
    }

    async fn refresh_runs_tables(&self, with_summaries: bool) -> Result<()> {
        let mut projects: HashSet<i64> = std::mem::take(&mut *lock(&self.projects_changed));
        if with_summaries {
            projects.extend(std::mem::take(&mut *lock(&self.projects_summary_changed)));
        }
        for project_id in projects {
            let meta = self.meta.clone();
            let encoded = blocking(move || runs_table::encode(&meta.export_project(project_id)?)).await;
            let put = match encoded {
                Ok(bytes) => self
                    .objects
                    .put(&objects::runs_table_path(project_id), PutPayload::from_bytes(bytes))
                    .await
                    .map(|_| ())
                    .map_err(Error::from),
                Err(e) => Err(e),
            };
            if let Err(e) = put {
                lock(&self.projects_changed).insert(project_id);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Persists the oldest frozen generations, one after the other.
    async fn persist_frozen(&self) -> Result<()> {
        let _guard = self.persist_lock.lock().await;
        loop {
            let Some(generation) = read(&self.state).frozen.front().cloned() else {
                return Ok(());
            };
            self.persist(&generation).await?;
        }
    }

    async fn persist(&self, generation: &Arc<Generation>) -> Result<()> {
        // Summaries first: once the log segment is gone, they must already hold its points,
        // including those that made a summary stale (a rewritten step).
        for run in generation.runs.keys() {
            self.refresh_stale(run).await?;
        }
        self.sync_summaries().await?;
        let meta = self.meta.clone();
        let count = generation.runs.len() as i64;
        let first = blocking(move || Ok(meta.reserve(NEXT_FILE_NUMBER, count)?)).await?;
        let mut uploaded: Vec<ObjectPath> = Vec::new();
        let outcome = self.persist_files(generation, first, &mut uploaded).await;
        if outcome.is_err() {
            // Nothing points at these yet; a retry writes new ones.
            for path in uploaded {
                let _ = self.objects.delete(&path).await;
            }
        }
        outcome
    }

    async fn persist_files(
        &self,
        generation: &Arc<Generation>,
        first: i64,
        uploaded: &mut Vec<ObjectPath>,
    ) -> Result<()> {
        let mut rows = Vec::new();
        let mut metas = Vec::new();
        let mut runs: Vec<&RunId> = generation.runs.keys().collect();
        runs.sort();
        for (i, run) in runs.into_iter().enumerate() {
            let number = first + i as i64;
            let buf = &generation.runs[run];
            let path = objects::metric_file_path(buf.project_id, run.as_str(), number);
            let gen = generation.clone();
            let run_owned = run.clone();
            let file = blocking(move || {
                let buf = &gen.runs[&run_owned];
                // Series logged in step order (the usual case) are encoded without a copy.
                let mut keys: Vec<(&MetricKey, std::borrow::Cow<'_, Series>)> = buf
                    .series
                    .iter()
                    .map(|(k, s)| {
                        if s.is_strictly_sorted() {
                            (k, std::borrow::Cow::Borrowed(s))
                        } else {
                            let mut s = s.clone();
                            s.normalize();
                            (k, std::borrow::Cow::Owned(s))
                        }
                    })
                    .collect();
                keys.sort_by(|a, b| a.0.cmp(b.0));
                let refs: Vec<(&str, &Series)> = keys.iter().map(|(k, s)| (k.as_str(), s.as_ref())).collect();
                parquet_io::encode_run(run_owned.as_str(), &refs, FLUSH_ZSTD_LEVEL)
            })
            .await?;
            let bytes = file.bytes.len() as u64;
            self.put_object(&path, file.bytes).await?;
            uploaded.push(path.clone());
            rows.push(catalog_row(run, &path, number, file.rows, bytes, key_index_to_json(&file.index)));
            metas.push((
                run.clone(),
                Arc::new(FileMeta {
                    path,
                    project_id: buf.project_id,
                    ord: number,
                    rows: file.rows,
                    bytes,
                    index: file.index,
                }),
            ));
        }
        self.make_durable(uploaded.clone()).await?;
        let meta = self.meta.clone();
        let segment = generation.wal_segment;
        blocking(move || Ok(meta.commit_files(&rows, &[], Some(segment))?)).await?;
        // From here the catalog points at the files: a later failure must not delete them.
        uploaded.clear();
        self.counters.persisted_files.fetch_add(metas.len() as u64, Ordering::Relaxed);
        self.counters.persisted_points.fetch_add(generation.points as u64, Ordering::Relaxed);
        let mut over_limit = Vec::new();
        {
            let mut state = write(&self.state);
            for (run, file) in metas {
                state.swap_files(&run, vec![file], &[]);
                if state.files.get(&run).is_some_and(|f| f.files.len() > self.config.max_files_per_run) {
                    over_limit.push(run);
                }
            }
            if state.frozen.front().is_some_and(|g| Arc::ptr_eq(g, generation)) {
                state.frozen.pop_front();
                self.buffered_points.fetch_sub(generation.points, Ordering::Relaxed);
            }
        }
        {
            let mut wanted = lock(&self.compact_wanted);
            for run in over_limit {
                wanted.entry(run).or_insert(false);
            }
        }
        for n in wal::list_segments(&self.wal_dir)?.into_iter().filter(|&n| n <= segment) {
            std::fs::remove_file(wal::segment_path(&self.wal_dir, n))
                .map_err(io_err("removing a persisted write-ahead log segment"))?;
        }
        Ok(())
    }

    async fn sweep_orphans(&self) -> Result<usize> {
        use futures::TryStreamExt;
        // Holding the persist lock: no file is between its upload and its catalog entry.
        let _guard = self.persist_lock.lock().await;
        let known: HashSet<ObjectPath> =
            read(&self.state).files.values().flat_map(|f| f.files.iter().map(|m| m.path.clone())).collect();
        let listed: Vec<object_store::ObjectMeta> =
            self.objects.list(Some(&ObjectPath::from("projects"))).try_collect().await?;
        let mut removed = 0;
        for object in listed {
            let path = object.location;
            let is_metric_file = is_metric_file_path(path.as_ref());
            if is_metric_file && !known.contains(&path) {
                self.objects.delete(&path).await?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Compacts runs asked for, once none of their points wait in the buffer.
    async fn compact_pending(&self) -> Result<()> {
        let _guard = self.persist_lock.lock().await;
        let wanted: Vec<(RunId, bool)> = lock(&self.compact_wanted).iter().map(|(r, f)| (r.clone(), *f)).collect();
        for (run, full) in wanted {
            if full && read(&self.state).buffered(&run) {
                // Still receiving points (resumed before it was compacted): keep its file count
                // down meanwhile, and merge everything once the buffer has drained.
                self.compact(&run, false).await?;
                continue;
            }
            self.compact(&run, full).await?;
            if full {
                // A finished, compacted run's summaries are in SQLite; they load again on use.
                lock(&self.summaries).evict_clean(&run);
            }
            let mut pending = lock(&self.compact_wanted);
            if pending.get(&run) == Some(&full) {
                pending.remove(&run);
            }
        }
        Ok(())
    }

    /// Merges files of a run into one, newest write winning for each (key, step): all of them
    /// (`full`), or the newest ones while each older file is at most twice the rows taken so far,
    /// so a long run's big files are not rewritten on every round.
    async fn compact(&self, run: &RunId, full: bool) -> Result<()> {
        let mut files = read(&self.state).files.get(run).cloned().unwrap_or_default();
        if !full {
            let mut taken_rows = 0u64;
            let mut start = files.files.len();
            while start > 0 && (files.files.len() - start < 2 || files.files[start - 1].rows <= 2 * taken_rows) {
                start -= 1;
                taken_rows += files.files[start].rows;
            }
            files.files.drain(..start);
        }
        if files.files.len() <= 1 {
            return Ok(());
        }
        // Compressed file bytes are held; decoded series only one key at a time.
        let mut blobs = Vec::with_capacity(files.files.len());
        for f in &files.files {
            // A lost file is left out: its catalog entry goes with the files this one replaces.
            if let Some(bytes) = self.metric_file(run, &f.path).await? {
                blobs.push((f.clone(), bytes));
            }
        }
        let keys: BTreeSet<String> = blobs.iter().flat_map(|(f, _)| f.index.keys().cloned()).collect();
        let ord = files.files.iter().map(|f| f.ord).max().unwrap_or(0);
        let project_id = files.files[0].project_id;
        let meta = self.meta.clone();
        let number = blocking(move || Ok(meta.reserve(NEXT_FILE_NUMBER, 1)?)).await?;
        let path = objects::metric_file_path(project_id, run.as_str(), number);
        let run_owned = run.clone();
        let file = blocking(move || {
            let mut writer = parquet_io::RunFileWriter::new(run_owned.as_str(), COMPACT_ZSTD_LEVEL)?;
            for key in keys {
                let layers = blobs
                    .iter()
                    .filter_map(|(f, bytes)| {
                        f.index.get(&key).map(|r| parquet_io::read_rows(bytes.clone(), r.first_row, r.rows))
                    })
                    .collect::<Result<Vec<Series>>>()?;
                writer.write_key(&key, &Series::merge(layers))?;
            }
            writer.finish()
        })
        .await?;
        let bytes = file.bytes.len() as u64;
        self.put_object(&path, file.bytes).await?;
        let removed: Vec<ObjectPath> = files.files.iter().map(|f| f.path.clone()).collect();
        let removed_text: Vec<String> = removed.iter().map(|p| p.to_string()).collect();
        self.make_durable(vec![path.clone()]).await?;
        let row = catalog_row(run, &path, ord, file.rows, bytes, key_index_to_json(&file.index));
        let meta = self.meta.clone();
        blocking(move || Ok(meta.commit_files(&[row], &removed_text, None)?)).await?;
        bump(&self.counters.compactions);
        let new_file = Arc::new(FileMeta { path, project_id, ord, rows: file.rows, bytes, index: file.index });
        write(&self.state).swap_files(run, vec![new_file], &removed);
        if let Some(missing) = lock(&self.missing_files).get_mut(run) {
            missing.retain(|m| !removed.iter().any(|p| p.as_ref() == m));
        }
        for p in removed {
            if let Err(e) = self.objects.delete(&p).await {
                // The catalog no longer lists it: the next start's orphan sweep deletes it.
                bump(&self.counters.object_store_failures);
                tracing::warn!(run = %run, "could not delete compacted file {p}: {e}");
            }
        }
        Ok(())
    }

    async fn series(&self, run: &RunId, key: &MetricKey, range: StepRange) -> Result<Series> {
        // Compaction swaps a run's file list before deleting the old files: a read that still
        // held the old list finds a file gone, and retries with the new list.
        let mut attempts = 0;
        loop {
            match self.series_once(run, key, range).await {
                Err(Error::ObjectStore(object_store::Error::NotFound { .. })) if attempts < 3 => attempts += 1,
                other => return other,
            }
        }
    }

    async fn series_once(&self, run: &RunId, key: &MetricKey, range: StepRange) -> Result<Series> {
        // Buffer and file list are captured under one lock, so a generation being persisted
        // is seen either as buffered points or as its file, never as neither.
        let (mut layers, files) = {
            let state = read(&self.state);
            let mut layers = Vec::new();
            for g in &state.frozen {
                layers.extend(g.series(run, key));
            }
            layers.extend(state.active.series(run, key));
            (layers, state.files.get(run).cloned().unwrap_or_default())
        };
        // The files' points are already restricted to `range`; buffered layers are whole.
        let from_files = self.file_series(run, key, &files, range).await?;
        if layers.is_empty() {
            return Ok(from_files);
        }
        let mut all = Vec::with_capacity(layers.len() + 1);
        all.push(from_files);
        all.append(&mut layers);
        let merged = Series::merge(all);
        Ok(if range == StepRange::default() { merged } else { merged.slice(range) })
    }

    /// The points of a run's files for one key within `range`. A whole series is read into the
    /// cache, and a step range comes out of the cached series when it is there. On a miss, a
    /// range of a long series is read from the pages that hold it, without filling the cache;
    /// a short series is read whole and cached, as later ranges of it cost no more to slice.
    async fn file_series(&self, run: &RunId, key: &MetricKey, files: &RunFiles, range: StepRange) -> Result<Series> {
        let with_key: Vec<Arc<FileMeta>> =
            files.files.iter().filter(|f| f.index.contains_key(key.as_str())).cloned().collect();
        if with_key.is_empty() {
            return Ok(Series::default());
        }
        let cache_key = (run.clone(), key.clone());
        let cached = {
            let mut cache = lock(&self.cache);
            cache.clock += 1;
            let clock = cache.clock;
            match cache.entries.get_mut(&cache_key) {
                Some(hit) if hit.version == files.version => {
                    hit.last_used = clock;
                    Some(hit.series.clone())
                }
                _ => None,
            }
        };
        if let Some(series) = cached {
            return Ok(series.slice(range));
        }
        let rows: u64 = with_key.iter().map(|f| f.index[key.as_str()].rows).sum();
        if range != StepRange::default() && rows > RANGE_READ_MIN_ROWS {
            let in_range = with_key.iter().filter_map(|f| {
                let r = *f.index.get(key.as_str())?;
                range.overlaps(r.min_step, r.max_step).then(|| (f.path.clone(), r))
            });
            let loads = in_range.map(|(path, r)| async move {
                match self.metric_file(run, &path).await? {
                    Some(bytes) => blocking(move || parquet_io::read_rows_in_range(bytes, r, range)).await,
                    None => Ok(Series::default()),
                }
            });
            return Ok(Series::merge(futures::future::try_join_all(loads).await?));
        }
        let loads = with_key.iter().map(|f| {
            let f = f.clone();
            let key = key.to_string();
            async move {
                let r = f.index[&key];
                match self.metric_file(run, &f.path).await? {
                    Some(bytes) => blocking(move || parquet_io::read_rows(bytes, r.first_row, r.rows)).await,
                    None => Ok(Series::default()),
                }
            }
        });
        let layers = futures::future::try_join_all(loads).await?;
        let series = Arc::new(Series::merge(layers));
        let size = series.heap_bytes();
        if size <= self.config.cache_bytes / 4 {
            let mut cache = lock(&self.cache);
            let clock = cache.clock;
            if let Some(old) = cache
                .entries
                .insert(cache_key, CachedSeries { version: files.version, series: series.clone(), last_used: clock })
            {
                cache.bytes -= old.series.heap_bytes();
            }
            cache.bytes += size;
            while cache.bytes > self.config.cache_bytes {
                let Some(victim) = cache.entries.iter().min_by_key(|(_, e)| e.last_used).map(|(k, _)| k.clone()) else {
                    break;
                };
                if let Some(e) = cache.entries.remove(&victim) {
                    cache.bytes -= e.series.heap_bytes();
                }
            }
        }
        Ok(if range == StepRange::default() { Arc::unwrap_or_clone(series) } else { series.slice(range) })
    }
}

#[cfg(test)]
mod tests {
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
