//! Console lines of runs: acknowledged once in the write-ahead log they share with points (one
//! fsync for both), buffered where reads see them at once, and written in the background as
//! Parquet files beside the run's series. Reads merge files and buffer, in order, each line once.

mod codec;
mod files;
mod logged;
pub mod query;

pub(crate) use codec::{decode, encode, ConsoleRecord, KIND_CONSOLE};
pub use codec::{BatchLine, ConsoleBatch};
pub use files::run_prefix;
pub(crate) use logged::{own_log_records, remove_own_log, Taken};
pub use query::{facets, page, LineFacets, LineFilter, LinePage, PageStart, Search};

use crate::counters::{bump, Counters};
use crate::wal::Retention;
use crate::{blocking, lock, objects, read, write, Result};
use futures::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use trainlog_schema::console::ConsoleLine;
use trainlog_schema::RunId;

/// Bytes of buffered lines past which a batch is refused until persisting catches up.
const MAX_BUFFER_BYTES: usize = 256 << 20;
/// Bytes of decoded lines kept for reads.
const CACHE_BYTES: usize = 512 << 20;
/// How long a run's list of files is trusted before it is listed again.
const LISTING_TTL: Duration = Duration::from_secs(2);

/// Lines of one run in one generation, as the batches that brought them, in arrival order:
/// taking a batch never copies the lines before it.
#[derive(Debug, Default)]
struct RunLines {
    project_id: i64,
    batches: Vec<ConsoleBatch>,
    lines: usize,
}

/// The lines logged into one write-ahead log segment (or, replayed, into the segments up to it).
#[derive(Debug)]
struct Generation {
    segment: u64,
    runs: HashMap<RunId, RunLines>,
    bytes: usize,
    started: Instant,
}

impl Generation {
    fn new(segment: u64) -> Self {
        Self { segment, runs: HashMap::new(), bytes: 0, started: Instant::now() }
    }

    fn apply(&mut self, run: &RunId, project_id: i64, batch: ConsoleBatch) {
        self.bytes += batch.bytes();
        let entry = self.runs.entry(run.clone()).or_insert_with(|| RunLines { project_id, ..RunLines::default() });
        entry.lines += batch.lines.len();
        entry.batches.push(batch);
    }
}

#[derive(Debug)]
struct State {
    active: Generation,
    frozen: VecDeque<Arc<Generation>>,
}

/// The merged lines of a run, kept with what they were made from: its files, and how many
/// batches of each buffered generation (by its segment).
struct Merged {
    files: Vec<ObjectPath>,
    buffered: Vec<(u64, usize)>,
    lines: Arc<Vec<ConsoleLine>>,
    bytes: usize,
    used: Instant,
}

#[derive(Default)]
struct Cache {
    merged: HashMap<RunId, Merged>,
    listings: HashMap<RunId, (Instant, Vec<ObjectPath>)>,
    bytes: usize,
}

impl Cache {
    fn take(&mut self, run: &RunId) -> Option<Merged> {
        let m = self.merged.remove(run)?;
        self.bytes -= m.bytes;
        Some(m)
    }

    fn insert(&mut self, run: RunId, merged: Merged) {
        self.bytes += merged.bytes;
        if let Some(old) = self.merged.insert(run, merged) {
            self.bytes -= old.bytes;
        }
        while self.bytes > CACHE_BYTES && self.merged.len() > 1 {
            let Some(oldest) = self.merged.iter().min_by_key(|(_, m)| m.used).map(|(r, _)| r.clone()) else { break };
            if let Some(gone) = self.merged.remove(&oldest) {
                self.bytes -= gone.bytes;
            }
        }
    }
}

pub(crate) struct Inner {
    objects: Arc<dyn ObjectStore>,
    local_root: Option<PathBuf>,
    retention: Arc<Retention>,
    /// Encodes files at a low priority: nobody waits on them, and ingest goes first.
    encoder: crate::background::Background,
    /// Parses posted lines at a low priority: metric batches go first.
    parser: crate::background::Background,
    folder_id: String,
    state: RwLock<State>,
    buffered_bytes: AtomicUsize,
    persist_wanted: Notify,
    persist_lock: tokio::sync::Mutex<()>,
    stopping: AtomicBool,
    cache: Mutex<Cache>,
    counters: Arc<Counters>,
    rotate_after: Duration,
    /// Runs deleted for good: their lines are neither kept, nor written, nor read.
    purged: RwLock<HashSet<RunId>>,
}

/// What the shared log holds for the console at start-up.
pub(crate) struct Replayed {
    /// Lines not yet in files, by the segment that holds them.
    pub lines: Vec<(u64, Vec<ConsoleRecord>)>,
    /// The segment the log appends to next.
    pub current: u64,
    /// Runs deleted for good.
    pub purged: HashSet<RunId>,
}

/// The console store; cheap to clone.
#[derive(Clone)]
pub struct ConsoleStore {
    inner: Arc<Inner>,
}

impl ConsoleStore {
    /// Takes the lines the shared log replayed and starts the persister. Must be called inside a
    /// tokio runtime.
    pub(crate) fn open(
        objects: Arc<dyn ObjectStore>,
        local_root: Option<PathBuf>,
        retention: Arc<Retention>,
        folder_id: String,
        counters: Arc<Counters>,
        rotate_after: Duration,
        Replayed { lines, current, purged }: Replayed,
    ) -> Result<Self> {
        let frozen = logged::generations(lines, &purged);
        let buffered: usize = frozen.iter().map(|g| g.bytes).sum();
        let inner = Arc::new(Inner {
            objects,
            local_root,
            retention,
            encoder: crate::background::Background::start("trainlog-console-files")?,
            parser: crate::background::Background::start("trainlog-console-parse")?,
            folder_id,
            state: RwLock::new(State { active: Generation::new(current), frozen }),
            buffered_bytes: AtomicUsize::new(buffered),
            persist_wanted: Notify::new(),
            persist_lock: tokio::sync::Mutex::new(()),
            stopping: AtomicBool::new(false),
            cache: Mutex::new(Cache::default()),
            counters,
            rotate_after,
            purged: RwLock::new(purged),
        });
        let persister = inner.clone();
        tokio::spawn(async move {
            loop {
                let _ = tokio::time::timeout(Duration::from_secs(1), persister.persist_wanted.notified()).await;
                if persister.stopping.load(Ordering::Acquire) {
                    break;
                }
                if let Err(e) = persister.persist_frozen().await {
                    bump(&persister.counters.console_persist_failures);
                    tracing::error!("persisting console lines failed, will retry: {e}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        });
        Ok(Self { inner })
    }

    /// Every line of a run, in order (time, rank, process, line number), each once.
    pub async fn lines(&self, run: &RunId, project_id: i64) -> Result<Arc<Vec<ConsoleLine>>> {
        self.inner.lines(run, project_id).await
    }

    /// Runs `parse` (of a posted batch of lines) on a thread of low priority: when the cores are
    /// busy, metric batches go first, and the lines' answer waits.
    pub async fn parse<T: Send + 'static>(&self, parse: impl FnOnce() -> T + Send + 'static) -> Result<T> {
        self.inner.parser.run(move || Ok(parse())).await
    }

    /// Writes the frozen generations to the object store.
    pub(crate) async fn persist_frozen(&self) -> Result<()> {
        self.inner.persist_frozen().await
    }

    /// Stops the persister.
    pub(crate) fn stop(&self) {
        self.inner.stopping.store(true, Ordering::Release);
        self.inner.persist_wanted.notify_one();
    }

    /// Bytes of lines waiting in memory for the object store.
    pub fn buffered_bytes(&self) -> usize {
        self.inner.buffered_bytes.load(Ordering::Relaxed)
    }

    /// A run deleted for good: its lines still buffered are never written, and a file being
    /// written now is done before this returns, so the deletion of the run's objects that
    /// follows finds it.
    pub(crate) async fn purge(&self, run: &RunId) {
        let _no_file_in_flight = self.inner.persist_lock.lock().await;
        write(&self.inner.purged).insert(run.clone());
        let mut cache = lock(&self.inner.cache);
        cache.listings.remove(run);
        if let Some(gone) = cache.merged.remove(run) {
            cache.bytes -= gone.bytes;
        }
    }
}

impl Inner {
    async fn persist_frozen(&self) -> Result<()> {
        let _guard = self.persist_lock.lock().await;
        loop {
            let Some(generation) = read(&self.state).frozen.front().cloned() else { return Ok(()) };
            self.persist(&generation).await?;
            let mut state = write(&self.state);
            if state.frozen.front().is_some_and(|g| Arc::ptr_eq(g, &generation)) {
                state.frozen.pop_front();
            }
            let low = state.frozen.front().map_or(state.active.segment, |g| g.segment);
            drop(state);
            self.buffered_bytes.fetch_sub(generation.bytes, Ordering::Relaxed);
            self.retention.lines_below(low)?;
        }
    }

    /// Writes one file per run of a generation, makes them durable, then forgets the runs'
    /// listings. The log segment is removed only after this, so a crash before it writes the
    /// same files again.
    async fn persist(&self, generation: &Arc<Generation>) -> Result<()> {
        let mut written = Vec::new();
        let purged = read(&self.purged).clone();
        for (run, lines) in generation.runs.iter().filter(|(run, _)| !purged.contains(*run)) {
            let path = files::file_path(lines.project_id, run.as_str(), &self.folder_id, generation.segment);
            let generation = generation.clone();
            let run2 = run.clone();
            let bytes = self
                .encoder
                .run(move || {
                    let batches = generation.runs.get(&run2).map(|r| r.batches.as_slice()).unwrap_or_default();
                    let mut rows: Vec<files::Row<'_>> =
                        batches.iter().flat_map(|b| b.lines.iter().map(move |l| files::Row::of_batch(b, l))).collect();
                    rows.sort_by(|a, b| a.order_key().cmp(&b.order_key()));
                    files::encode(run2.as_str(), &rows)
                })
                .await?;
            let started = Instant::now();
            let outcome = self.objects.put(&path, PutPayload::from_bytes(bytes)).await;
            self.counters.object_store_call(started.elapsed(), &outcome);
            outcome?;
            written.push(path);
        }
        if let Some(root) = self.local_root.clone() {
            let paths = written.clone();
            blocking(move || objects::sync_local(&root, &paths)).await?;
        }
        self.counters.console_files.fetch_add(written.len() as u64, Ordering::Relaxed);
        let mut cache = lock(&self.cache);
        for run in generation.runs.keys() {
            cache.listings.remove(run);
        }
        Ok(())
    }

    async fn listing(&self, run: &RunId, project_id: i64) -> Result<Vec<ObjectPath>> {
        if let Some((at, paths)) = lock(&self.cache).listings.get(run) {
            if at.elapsed() < LISTING_TTL {
                return Ok(paths.clone());
            }
        }
        let prefix = files::run_prefix(project_id, run.as_str());
        let started = Instant::now();
        let listed: std::result::Result<Vec<_>, _> = self.objects.list(Some(&prefix)).try_collect().await;
        self.counters.object_store_call(started.elapsed(), &listed);
        let mut paths: Vec<ObjectPath> =
            listed?.into_iter().map(|m| m.location).filter(|p| p.as_ref().ends_with(".parquet")).collect();
        paths.sort();
        lock(&self.cache).listings.insert(run.clone(), (Instant::now(), paths.clone()));
        Ok(paths)
    }

    async fn lines(&self, run: &RunId, project_id: i64) -> Result<Arc<Vec<ConsoleLine>>> {
        if read(&self.purged).contains(run) {
            return Ok(Arc::new(Vec::new()));
        }
        let files = self.listing(run, project_id).await?;
        let buffered: Vec<(u64, usize)> = {
            let state = read(&self.state);
            state
                .frozen
                .iter()
                .map(|g| g.as_ref())
                .chain([&state.active])
                .filter_map(|g| g.runs.get(run).map(|r| (g.segment, r.batches.len())))
                .collect()
        };
        let cached = {
            let mut cache = lock(&self.cache);
            match cache.merged.get_mut(run) {
                Some(m) if m.files == files && m.buffered == buffered => {
                    m.used = Instant::now();
                    return Ok(m.lines.clone());
                }
                Some(m) if m.files == files && grew(&m.buffered, &buffered) => cache.take(run),
                _ => None,
            }
        };
        if let Some(m) = cached {
            if let Some(lines) = self.appended(run, m, &buffered) {
                return Ok(lines);
            }
        }
        let mut all = Vec::new();
        for path in &files {
            let started = Instant::now();
            let got = self.objects.get(path).await;
            self.counters.object_store_call(started.elapsed(), &got);
            let bytes = match got {
                Ok(g) => g.bytes().await?,
                // Deleted since the listing: a purge, or another server's rewrite.
                Err(object_store::Error::NotFound { .. }) => continue,
                Err(e) => return Err(e.into()),
            };
            all.extend(blocking(move || files::decode(bytes)).await?);
        }
        {
            let state = read(&self.state);
            for g in state.frozen.iter().map(|g| g.as_ref()).chain([&state.active]) {
                if let Some(r) = g.runs.get(run) {
                    all.extend(r.batches.iter().flat_map(ConsoleBatch::lines));
                }
            }
        }
        let merged = blocking(move || {
            all.sort_by(|a, b| a.order_key().cmp(&b.order_key()));
            // A batch sent again after its answer was lost has the same lines: keep each once.
            all.dedup_by(|b, a| a.source == b.source && a.seq == b.seq && a.attempt == b.attempt);
            Ok(all)
        })
        .await?;
        let bytes = merged.iter().map(ConsoleLine::size).sum();
        let lines = Arc::new(merged);
        lock(&self.cache)
            .insert(run.clone(), Merged { files, buffered, lines: lines.clone(), bytes, used: Instant::now() });
        Ok(lines)
    }

    /// A followed run's common case: only batches taken since the cached read, every line of
    /// them after its last. They are added to the cached lines (copied only while a reader holds
    /// them) instead of merging the run again. None when the new lines fall among the old.
    fn appended(&self, run: &RunId, mut m: Merged, buffered: &[(u64, usize)]) -> Option<Arc<Vec<ConsoleLine>>> {
        let mut new: Vec<ConsoleLine> = {
            let state = read(&self.state);
            let generations = state.frozen.iter().map(|g| g.as_ref()).chain([&state.active]);
            generations
                .filter_map(|g| {
                    let &(_, upto) = buffered.iter().find(|(segment, _)| *segment == g.segment)?;
                    let before = m.buffered.iter().find(|(segment, _)| *segment == g.segment).map_or(0, |b| b.1);
                    Some(
                        g.runs
                            .get(run)?
                            .batches
                            .get(before..upto)?
                            .iter()
                            .flat_map(ConsoleBatch::lines)
                            .collect::<Vec<_>>(),
                    )
                })
                .flatten()
                .collect()
        };
        new.sort_by(|a, b| a.order_key().cmp(&b.order_key()));
        new.dedup_by(|b, a| a.source == b.source && a.seq == b.seq && a.attempt == b.attempt);
        let after = match (m.lines.last(), new.first()) {
            (Some(last), Some(first)) => first.order_key() > last.order_key(),
            _ => true,
        };
        if !after {
            return None;
        }
        m.bytes += new.iter().map(ConsoleLine::size).sum::<usize>();
        Arc::make_mut(&mut m.lines).extend(new);
        m.buffered = buffered.to_vec();
        m.used = Instant::now();
        let lines = m.lines.clone();
        lock(&self.cache).insert(run.clone(), m);
        Some(lines)
    }
}

/// Whether `now` only adds to `before`: every generation read before is still there with at
/// least as many batches (a generation written to a file changes the files instead).
fn grew(before: &[(u64, usize)], now: &[(u64, usize)]) -> bool {
    before.iter().all(|(segment, n)| now.iter().any(|(s, m)| s == segment && m >= n))
}

#[cfg(test)]
mod tests {
    use super::codec::tests::batch;
    use crate::{MetricsStore, StoreConfig};
    use std::sync::Arc;
    use trainlog_meta::MetaStore;
    use trainlog_schema::RunId;

    /// Lines are read at once, once each even when a batch came twice, from the buffer and then
    /// from files; lines acknowledged but not persisted come back from the log after a crash.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lines_are_read_once_each_from_buffer_files_and_a_replayed_log() {
        let dir = tempfile::tempdir().unwrap();
        let meta = Arc::new(MetaStore::open(&dir.path().join("meta.db")).unwrap());
        let config = StoreConfig::new(dir.path().to_owned(), None);
        let store = MetricsStore::open(config.clone(), meta.clone()).await.unwrap();
        let run = RunId::from_trusted("r1".into());
        let console = store.console().clone();
        store.append_lines(&run, 1, batch("p1", 0..10)).await.unwrap();
        store.append_lines(&run, 1, batch("p1", 5..10)).await.unwrap();
        store.append_lines(&run, 1, batch("p2", 0..3)).await.unwrap();
        let lines = console.lines(&run, 1).await.unwrap();
        assert_eq!(lines.len(), 13);
        assert!(lines.windows(2).all(|w| w[0].order_key() <= w[1].order_key()));

        store.flush().await.unwrap();
        assert_eq!(console.buffered_bytes(), 0);
        let files = std::fs::read_dir(dir.path().join("store/projects/1/console/r1")).unwrap().count();
        assert_eq!(files, 1);
        store.append_lines(&run, 1, batch("p1", 8..12)).await.unwrap();
        let lines = console.lines(&run, 1).await.unwrap();
        assert_eq!(lines.len(), 15, "lines 8 and 9 again are dropped; 10 and 11 are new");

        // New lines after the last are added to the cached read; a batch among them merges again.
        let before = console.lines(&run, 1).await.unwrap();
        let mut later = batch("p3", 0..3);
        for l in &mut later.lines {
            l.time_ms += 1_000_000;
        }
        store.append_lines(&run, 1, later).await.unwrap();
        let after = console.lines(&run, 1).await.unwrap();
        assert_eq!(after.len(), 18);
        assert_eq!(after[..15], before[..]);
        assert!(after.windows(2).all(|w| w[0].order_key() < w[1].order_key()));
        drop((before, after));
        store.append_lines(&run, 1, batch("p4", 0..2)).await.unwrap();
        let merged = console.lines(&run, 1).await.unwrap();
        assert_eq!(merged.len(), 20);
        assert!(merged.windows(2).all(|w| w[0].order_key() < w[1].order_key()), "p4's early lines merged in order");
        store.append_lines(&run, 1, batch("p4", 0..2)).await.unwrap();
        assert_eq!(console.lines(&run, 1).await.unwrap().len(), 20, "a batch sent again is kept once");
        drop(merged);

        // An unclean stop: the store is dropped without shutting down, the log stays.
        drop(console);
        drop(store);
        let store = MetricsStore::open(config, meta).await.unwrap();
        let lines = store.console().lines(&run, 1).await.unwrap();
        assert_eq!(lines.len(), 20);
        assert_eq!(lines.iter().filter(|l| &*l.source == "p1").map(|l| l.seq).max(), Some(11));
        store.shutdown().await.unwrap();
        let lines = store.console().lines(&run, 1).await.unwrap();
        assert_eq!(lines.len(), 20);
    }
}
