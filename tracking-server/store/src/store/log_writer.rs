//! The log writer: start-up recovery from the write-ahead log, and the thread that appends
//! batches of points and of console lines with group commit, applies them to their buffers and
//! rotates segments.

use super::*;
use crate::console::{self, ConsoleBatch, ConsoleRecord, ConsoleStore};

pub(super) enum WalCmd {
    Append { run: RunId, project_id: i64, batch: PointBatch, done: oneshot::Sender<Result<()>> },
    Lines { run: RunId, project_id: i64, batch: ConsoleBatch, done: oneshot::Sender<Result<()>> },
    Rotate { done: oneshot::Sender<()> },
    Stop,
}

/// What start-up found in the log.
pub(super) struct Recovered {
    pub state: State,
    pub summaries: Summaries,
    /// The segment to append to next.
    pub segment: Segment,
    /// Records replayed and bytes cut from torn tails.
    pub replay: (usize, u64),
    /// Console lines, by the segment that holds them.
    pub lines: Vec<(u64, Vec<ConsoleRecord>)>,
    /// The lowest segment holding points that no file has.
    pub points_low: u64,
}

/// A record of the log, of either kind.
enum Logged {
    Points(wal::WalRecord),
    Lines(ConsoleRecord),
}

fn decode_logged(payload: &[u8]) -> Option<Logged> {
    match *payload.first()? {
        wal::KIND_POINTS => wal::decode_points(payload).map(Logged::Points),
        console::KIND_CONSOLE => console::decode(payload).map(Logged::Lines),
        _ => None,
    }
}

/// Start-up: load the file catalog and replay the log: the points of segments not yet
/// persisted, and the console lines of every segment left (a segment stays until both its
/// points and its lines are in files). Records of runs deleted for good (`purged`) are dropped.
pub(super) fn recover(
    meta: &MetaStore,
    wal_dir: &std::path::Path,
    folder_id: &str,
    purged: &HashSet<RunId>,
) -> Result<Recovered> {
    let wal_counter = &trainlog_meta::wal_counter(folder_id);
    let persisted_through = meta.counter(wal_counter)?.unwrap_or(0) as u64;
    let mut files: HashMap<RunId, RunFiles> = HashMap::new();
    for row in meta.metric_files()? {
        let file = file_meta(&row)?;
        files.entry(RunId::from_trusted(row.run_id)).or_default().files.push(file);
    }
    for f in files.values_mut() {
        f.files.sort_by_key(|f| f.ord);
        f.version = 1;
    }
    let mut summaries = Summaries::default();
    let segments = wal::list_segments(wal_dir)?;
    let mut replayed = Generation::new(persisted_through);
    let (mut records, mut cut) = (0usize, 0u64);
    let mut lines = Vec::new();
    for &number in &segments {
        let path = wal::segment_path(wal_dir, number);
        let (found, cut_bytes) = wal::replay_with(&path, decode_logged)?;
        if cut_bytes > 0 {
            tracing::warn!(bytes = cut_bytes, segment = %path.display(), "cut a torn or corrupt write-ahead log tail");
        }
        cut += cut_bytes;
        let mut segment_lines = Vec::new();
        for logged in found {
            let rec = match logged {
                Logged::Lines(l) => {
                    records += 1;
                    segment_lines.push(l);
                    continue;
                }
                Logged::Points(rec) if number > persisted_through => rec,
                Logged::Points(_) => continue,
            };
            records += 1;
            if purged.contains(&rec.run) {
                continue;
            }
            if !summaries.is_loaded(&rec.run) {
                let stored = meta.summaries(&rec.run)?;
                summaries.load(&rec.run, rec.project_id, stored);
            }
            summaries.apply(&rec.run, rec.project_id, &rec.batch);
            replayed.apply(&rec.run, rec.project_id, &rec.batch);
        }
        if !segment_lines.is_empty() {
            lines.push((number, segment_lines));
        }
        if number > persisted_through {
            replayed.wal_segment = number;
        }
    }
    let next_segment = segments.last().copied().unwrap_or(0).max(persisted_through) + 1;
    let segment = Segment::create(wal_dir, next_segment)?;
    let mut frozen = VecDeque::new();
    let points_low = if replayed.points > 0 {
        frozen.push_back(Arc::new(replayed));
        persisted_through + 1
    } else {
        if let Some(&last) = segments.last().filter(|&&n| n > persisted_through) {
            meta.commit_files(&[], &[], Some((wal_counter, last)), None)?;
        }
        next_segment
    };
    // Holds of runs this folder no longer buffers (a crash came between persisting them and
    // recording that) would keep other servers from recomputing their summaries.
    let released: Vec<String> = meta
        .held_runs(folder_id)?
        .into_iter()
        .filter(|run| !frozen.iter().any(|g: &Arc<Generation>| g.runs.contains_key(&RunId::from_trusted(run.clone()))))
        .collect();
    if !released.is_empty() {
        meta.commit_files(&[], &[], None, Some((folder_id, &released)))?;
    }
    let state = State { active: Generation::new(next_segment), frozen, files, next_version: 1 };
    Ok(Recovered { state, summaries, segment, replay: (records, cut), lines, points_low })
}

/// Lines the console once logged in a folder of its own (`DATA/wal-console/`) are written into
/// the shared log, as a segment of their own, before that folder is removed; `recovered` then
/// holds them and appends to the segment after theirs.
pub(super) fn take_own_console_log(
    data_dir: &std::path::Path,
    wal_dir: &std::path::Path,
    recovered: &mut Recovered,
) -> Result<()> {
    let own = data_dir.join("wal-console");
    let records = console::own_log_records(&own)?;
    if !records.is_empty() {
        let mut encoded = Vec::new();
        for r in &records {
            console::encode(&mut encoded, &r.run, r.project_id, &r.batch);
        }
        recovered.segment.append_durable(&encoded)?;
        let number = recovered.segment.number;
        recovered.lines.push((number, records));
        recovered.segment = Segment::create(wal_dir, number + 1)?;
        recovered.state.active.wal_segment = number + 1;
        if recovered.points_low == number {
            recovered.points_low = number + 1;
        }
    }
    console::remove_own_log(&own)
}

impl MetricsStore {
    /// Logs a batch of a run's console lines; answers once it is durable in the write-ahead log
    /// and readable.
    pub async fn append_lines(&self, run: &RunId, project_id: i64, batch: ConsoleBatch) -> Result<()> {
        if batch.lines.is_empty() {
            return Ok(());
        }
        self.console.admit(run, batch.bytes())?;
        let (done, wait) = oneshot::channel();
        let tx = lock(&self.inner.wal_tx).clone().ok_or(Error::ShuttingDown)?;
        crate::send_to_writer(tx, WalCmd::Lines { run: run.clone(), project_id, batch, done }).await?;
        wait.await.map_err(|_| Error::ShuttingDown)?
    }
}

/// The log writer: takes every waiting batch, points and console lines alike, writes them with
/// one fsync, applies them to their buffers (and points to summaries), then acknowledges them
/// all (group commit).
pub(super) fn wal_loop(
    inner: Arc<Inner>,
    console: ConsoleStore,
    mut segment: Segment,
    rx: mpsc::Receiver<WalCmd>,
    runtime: tokio::runtime::Handle,
) {
    const MAX_GROUP_BYTES: usize = 64 << 20;
    /// How long console lines with no points to share a sync with wait for some.
    const LINES_WAIT: Duration = Duration::from_millis(10);
    let mut encoded = Vec::with_capacity(1 << 20);
    loop {
        let first = match rx.recv_timeout(Duration::from_millis(250)) {
            Ok(cmd) => Some(cmd),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let mut group = Vec::new();
        let mut lines: Vec<console::Taken> = Vec::new();
        let mut rotate_waiters = Vec::new();
        let mut stop = false;
        // Answers whether the command wants the group written at once: all but console lines.
        let mut take = |cmd: WalCmd, encoded: &mut Vec<u8>| match cmd {
            WalCmd::Append { run, project_id, batch, done } => {
                wal::encode(encoded, &run, project_id, &batch);
                group.push((run, project_id, batch, Some(done)));
                true
            }
            WalCmd::Lines { run, project_id, batch, done } => {
                console::encode(encoded, &run, project_id, &batch);
                lines.push((run, project_id, batch, done));
                false
            }
            WalCmd::Rotate { done } => {
                rotate_waiters.push(done);
                true
            }
            WalCmd::Stop => {
                stop = true;
                true
            }
        };
        encoded.clear();
        if let Some(cmd) = first {
            // Console lines alone wait a little for points to share their fsync, so a metric
            // batch arriving meanwhile never queues behind a sync of lines.
            let mut now = take(cmd, &mut encoded);
            let until = Instant::now() + LINES_WAIT;
            while encoded.len() < MAX_GROUP_BYTES {
                let next = match now {
                    true => rx.try_recv().ok(),
                    false => rx.recv_timeout(until.saturating_duration_since(Instant::now())).ok(),
                };
                match next {
                    Some(cmd) => now |= take(cmd, &mut encoded),
                    None => break,
                }
            }
        }
        if !group.is_empty() || !lines.is_empty() {
            let written = wal::append_group(&mut segment, &encoded, |torn| rotate(&inner, &console, torn, true));
            match written {
                Ok(()) => {
                    bump(&inner.counters.wal_syncs);
                    inner.counters.wal_records.fetch_add((group.len() + lines.len()) as u64, Ordering::Relaxed);
                    if !lines.is_empty() {
                        console.written(std::mem::take(&mut lines));
                    }
                    // A run deleted for good while its batch waited here takes nothing: the
                    // batch is refused, and a replay of this segment drops it too.
                    let purged = read(&inner.purged);
                    group.retain_mut(|(run, _, _, done)| {
                        let gone = purged.contains(run);
                        if gone {
                            if let Some(done) = done.take() {
                                let _ = done.send(Err(super::purged_error(run)));
                            }
                        }
                        !gone
                    });
                    {
                        let mut state = write(&inner.state);
                        for (run, project_id, batch, _) in &group {
                            state.active.apply(run, *project_id, batch);
                        }
                    }
                    drop(purged);
                    let applied: usize = group.iter().map(|(_, _, batch, _)| batch.points.len()).sum();
                    inner.buffered_points.fetch_add(applied, Ordering::Relaxed);
                    {
                        let mut sums = lock(&inner.summaries);
                        for (run, project_id, batch, _) in &group {
                            sums.apply(run, *project_id, batch);
                        }
                    }
                    for (_, _, _, done) in group {
                        if let Some(done) = done {
                            let _ = done.send(Ok(()));
                        }
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
                        let Some(done) = done else { continue };
                        let _ =
                            done.send(Err(Backpressure::LogUnavailable { message: message.clone(), disk_full }.into()));
                    }
                    if !lines.is_empty() {
                        console.refused(std::mem::take(&mut lines), &message, disk_full);
                    }
                    continue;
                }
            }
        }
        let points_due = {
            let state = read(&inner.state);
            let automatic = state.active.points >= inner.config.rotate_points
                || (state.active.points > 0 && state.active.started.elapsed() >= inner.config.rotate_after);
            // While `max_frozen` generations wait for the persister (a slow or absent object
            // store), the active one keeps growing instead: ingest never waits here, and
            // `max_buffer_bytes` bounds the memory. A flush or a finished run still rotates.
            (automatic && state.frozen.len() < inner.config.max_frozen)
                || (!rotate_waiters.is_empty() && state.active.points > 0)
        };
        let lines_due = console.rotation_due() || (!rotate_waiters.is_empty() && console.has_buffered_lines());
        if !points_due && read(&inner.state).frozen.len() >= inner.config.max_frozen {
            inner.persist_wanted.notify_one();
        }
        if points_due || lines_due {
            match rotate(&inner, &console, &segment, points_due) {
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

/// Opens the next log segment and freezes the console's lines; the active generation of points
/// is frozen too with `freeze_points`, or else goes on into the new segment.
pub(super) fn rotate(inner: &Inner, console: &ConsoleStore, current: &Segment, freeze_points: bool) -> Result<Segment> {
    let next = Segment::create(&inner.wal_dir, current.number + 1)?;
    let no_points_left = {
        let mut state = write(&inner.state);
        if freeze_points {
            let old = std::mem::replace(&mut state.active, Generation::new(next.number));
            if old.points > 0 {
                state.frozen.push_back(Arc::new(old));
            }
        } else {
            state.active.wal_segment = next.number;
        }
        state.frozen.is_empty() && state.active.points == 0
    };
    console.rotated(next.number);
    let points_low = if no_points_left { next.number } else { 0 };
    let released = inner.retention.raise_marks(points_low, console.lines_low());
    if let Err(e) = released {
        bump(&inner.counters.wal_release_failures);
        tracing::error!("could not remove a write-ahead log segment whose records are in files: {e}");
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::console::ConsoleBatch;
    use trainlog_schema::console::ConsoleStream;
    use trainlog_schema::BatchPoint;

    fn points(steps: std::ops::Range<i64>) -> PointBatch {
        PointBatch {
            keys: vec![MetricKey::parse("key", "loss").unwrap()],
            points: steps.map(|step| BatchPoint { key: 0, step, timestamp_ms: 1_000 + step, value: 0.5 }).collect(),
        }
    }

    fn lines(source: &str, seqs: std::ops::Range<u64>) -> ConsoleBatch {
        let mut batch = ConsoleBatch::new(source.into(), "node".into(), 0, 1);
        for seq in seqs {
            batch.push(seq, 1_000 + seq as i64, Some(seq as i64), ConsoleStream::Stdout, &format!("line {seq}"));
        }
        batch
    }

    fn segments(dir: &std::path::Path) -> Vec<u64> {
        wal::list_segments(&dir.join("wal")).unwrap()
    }

    /// Points and lines share a segment: once the points are in files and the lines not yet, a
    /// crash replays the lines alone, and the segment goes only once both are in files.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_segment_stays_until_its_points_and_its_lines_are_both_in_files() {
        let dir = tempfile::tempdir().unwrap();
        let meta = Arc::new(MetaStore::open(&dir.path().join("meta.db")).unwrap());
        let config = StoreConfig::new(dir.path().to_owned(), None);
        let (run, loss) = (RunId::from_trusted("r1".into()), MetricKey::parse("key", "loss").unwrap());
        let store = MetricsStore::open(config.clone(), meta.clone()).await.unwrap();
        store.console.stop();
        store.append(&run, 1, points(0..100)).await.unwrap();
        store.append_lines(&run, 1, lines("p1", 0..10)).await.unwrap();
        let first = segments(dir.path());
        assert_eq!(first.len(), 1);
        store.rotate().await.unwrap();
        store.inner.persist_frozen().await.unwrap();
        assert_eq!(segments(dir.path())[0], first[0], "its lines are in no file yet");
        drop(store);

        let store = MetricsStore::open(config.clone(), meta.clone()).await.unwrap();
        let full = StepRange::default();
        assert_eq!(store.series(&run, &loss, full).await.unwrap().steps.len(), 100, "points replayed once");
        assert_eq!(store.stats().buffered_points, 0, "the persisted points are not replayed");
        let read = store.console().lines(&run, 1).await.unwrap();
        assert_eq!(read.iter().map(|l| l.seq).collect::<Vec<_>>(), (0..10).collect::<Vec<_>>());
        store.append_lines(&run, 1, lines("p1", 10..12)).await.unwrap();
        store.flush().await.unwrap();
        assert_eq!(segments(dir.path()).len(), 1, "only the segment being written is left");
        assert!(segments(dir.path())[0] > first[0]);
        store.shutdown().await.unwrap();

        let store = MetricsStore::open(config, meta).await.unwrap();
        assert_eq!(store.console().lines(&run, 1).await.unwrap().len(), 12);
        assert_eq!(store.stats().wal_replayed_records, 0);
        store.shutdown().await.unwrap();
    }

    /// Lines acknowledged into the log the console once kept apart are taken into the shared
    /// log at start-up, and that folder is removed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lines_of_the_console_log_kept_apart_are_taken_into_the_shared_log() {
        let dir = tempfile::tempdir().unwrap();
        let meta = Arc::new(MetaStore::open(&dir.path().join("meta.db")).unwrap());
        let config = StoreConfig::new(dir.path().to_owned(), None);
        let run = RunId::from_trusted("r1".into());
        let own = dir.path().join("wal-console");
        std::fs::create_dir_all(&own).unwrap();
        for (number, seqs) in [(1, 0..5), (2, 5..8)] {
            let mut encoded = Vec::new();
            console::encode(&mut encoded, &run, 1, &lines("p1", seqs));
            Segment::create(&own, number).unwrap().append_durable(&encoded).unwrap();
        }
        let store = MetricsStore::open(config.clone(), meta.clone()).await.unwrap();
        assert!(!own.exists());
        assert_eq!(store.console().lines(&run, 1).await.unwrap().len(), 8);
        drop(store);

        let store = MetricsStore::open(config, meta).await.unwrap();
        assert_eq!(store.console().lines(&run, 1).await.unwrap().len(), 8, "replayed from the shared log");
        store.shutdown().await.unwrap();
        let files = std::fs::read_dir(dir.path().join("store/projects/1/console/r1")).unwrap().count();
        assert_eq!(files, 1);
        assert_eq!(store.console().lines(&run, 1).await.unwrap().len(), 8);
    }
}
