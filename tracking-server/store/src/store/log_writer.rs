//! The log writer: start-up recovery from the write-ahead log, and the thread that appends
//! batches with group commit, applies them to the buffer and rotates segments.

use super::*;

pub(super) enum WalCmd {
    Append { run: RunId, project_id: i64, batch: PointBatch, done: oneshot::Sender<Result<()>> },
    Rotate { done: oneshot::Sender<()> },
    Stop,
}

pub(super) type Recovered = (State, Summaries, Segment, (usize, u64));

/// Start-up: load the file catalog, drop log segments already persisted, replay the others.
/// Records of runs deleted for good (`purged`) are dropped.
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
        for rec in r.records.into_iter().filter(|rec| !purged.contains(&rec.run)) {
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
        meta.commit_files(&[], &[], Some((wal_counter, last)), None)?;
        for n in segments.iter().filter(|&&n| n > persisted_through) {
            let _ = std::fs::remove_file(wal::segment_path(wal_dir, *n));
        }
    }
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
    Ok((state, summaries, segment, (records, cut)))
}

/// The log writer: takes every waiting batch, writes them with one fsync, applies them to the
/// buffer and summaries, then acknowledges them all (group commit).
pub(super) fn wal_loop(
    inner: Arc<Inner>,
    mut segment: Segment,
    rx: mpsc::Receiver<WalCmd>,
    runtime: tokio::runtime::Handle,
) {
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
                group.push((run, project_id, batch, Some(done)));
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
            let written = wal::append_group(&mut segment, &encoded, |torn| rotate(&inner, torn));
            match written {
                Ok(()) => {
                    bump(&inner.counters.wal_syncs);
                    inner.counters.wal_records.fetch_add(group.len() as u64, Ordering::Relaxed);
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
pub(super) fn rotate(inner: &Inner, current: &Segment) -> Result<Segment> {
    let next = Segment::create(&inner.wal_dir, current.number + 1)?;
    let mut state = write(&inner.state);
    let fresh = Generation::new(next.number);
    let old = std::mem::replace(&mut state.active, fresh);
    if old.points > 0 {
        state.frozen.push_back(Arc::new(old));
    }
    Ok(next)
}
