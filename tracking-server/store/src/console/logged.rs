//! The console's share of the write-ahead log: batches the log writer wrote, applied to the
//! buffer; generations frozen when the log starts a segment; and the lines of the log the console
//! once kept in a folder of its own, taken into the shared log at start-up.

use super::codec::{self, ConsoleBatch, ConsoleRecord};
use super::{ConsoleStore, Generation};
use crate::counters::bump;
use crate::wal;
use crate::{read, write, Backpressure, Error, Result};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::oneshot;
use trainlog_schema::RunId;

/// Bytes of buffered lines that make the log start a new segment, so they are persisted.
const ROTATE_BYTES: usize = 32 << 20;

/// A batch the log writer took, with who waits for its answer.
pub(crate) type Taken = (RunId, i64, ConsoleBatch, oneshot::Sender<Result<()>>);

impl ConsoleStore {
    /// Refuses a batch of a run deleted for good, or one the buffer has no room for.
    pub(crate) fn admit(&self, run: &RunId, bytes: usize) -> Result<()> {
        if read(&self.inner.purged).contains(run) {
            return Err(trainlog_meta::Error::NotFound { what: format!("run {run}") }.into());
        }
        let buffered = self.inner.buffered_bytes.load(Ordering::Relaxed);
        if buffered > 0 && buffered + bytes > super::MAX_BUFFER_BYTES {
            bump(&self.inner.counters.ingest_refused_buffer_full);
            return Err(Backpressure::BufferFull { buffered_bytes: buffered, limit: super::MAX_BUFFER_BYTES }.into());
        }
        Ok(())
    }

    /// Batches now durable in the log: applied to the buffer, where reads see them, then
    /// acknowledged. A run deleted for good while its batch waited takes nothing.
    pub(crate) fn written(&self, taken: Vec<Taken>) {
        let mut answers = Vec::with_capacity(taken.len());
        let (mut bytes, mut lines) = (0, 0);
        {
            let purged = read(&self.inner.purged);
            let mut state = write(&self.inner.state);
            for (run, project_id, batch, done) in taken {
                if purged.contains(&run) {
                    let gone = trainlog_meta::Error::NotFound { what: format!("run {run}") };
                    answers.push((done, Err(gone.into())));
                    continue;
                }
                bytes += batch.bytes();
                lines += batch.lines.len() as u64;
                state.active.apply(&run, project_id, batch);
                answers.push((done, Ok(())));
            }
        }
        self.inner.buffered_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.inner.counters.console_lines.fetch_add(lines, Ordering::Relaxed);
        for (done, answer) in answers {
            let _ = done.send(answer);
        }
    }

    /// Batches the log could not take: each is refused with the reason.
    pub(crate) fn refused(&self, taken: Vec<Taken>, message: &str, disk_full: bool) {
        bump(&self.inner.counters.console_wal_failures);
        for (_, _, _, done) in taken {
            let refused = Backpressure::LogUnavailable { message: message.to_owned(), disk_full };
            let _ = done.send(Err(Error::from(refused)));
        }
    }

    /// Whether the buffered lines are enough, or old enough, to be written to files.
    pub(crate) fn rotation_due(&self) -> bool {
        let state = read(&self.inner.state);
        let bytes = state.active.bytes;
        bytes > 0 && (bytes >= ROTATE_BYTES || state.active.started.elapsed() >= self.inner.rotate_after)
    }

    pub(crate) fn has_buffered_lines(&self) -> bool {
        read(&self.inner.state).active.bytes > 0
    }

    /// The log started segment `next`: the lines of the segments before it are frozen, for the
    /// persister to write.
    pub(crate) fn rotated(&self, next: u64) {
        let mut state = write(&self.inner.state);
        let old = std::mem::replace(&mut state.active, Generation::new(next));
        if !old.runs.is_empty() {
            state.frozen.push_back(Arc::new(old));
        }
        self.inner.persist_wanted.notify_one();
    }

    /// The lowest segment holding lines that no file has yet (or the active one).
    pub(crate) fn lines_low(&self) -> u64 {
        let state = read(&self.inner.state);
        state.frozen.front().map_or(state.active.segment, |g| g.segment)
    }
}

/// Groups replayed lines by the segment that holds them, one generation each, so they are
/// written to the same files as before a crash. Lines of runs deleted for good are dropped.
pub(super) fn generations(
    replayed: Vec<(u64, Vec<ConsoleRecord>)>,
    purged: &std::collections::HashSet<RunId>,
) -> std::collections::VecDeque<Arc<Generation>> {
    let mut frozen = std::collections::VecDeque::new();
    for (segment, records) in replayed {
        let mut generation = Generation::new(segment);
        for r in records.into_iter().filter(|r| !purged.contains(&r.run)) {
            generation.apply(&r.run, r.project_id, r.batch);
        }
        if !generation.runs.is_empty() {
            frozen.push_back(Arc::new(generation));
        }
    }
    frozen
}

/// The records of the log the console kept in a folder of its own (`DATA/wal-console/`), in
/// order. The caller writes them into the shared log, then removes the folder with
/// [`remove_own_log`].
pub(crate) fn own_log_records(dir: &Path) -> Result<Vec<ConsoleRecord>> {
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut records = Vec::new();
    for number in wal::list_segments(dir)? {
        let path = wal::segment_path(dir, number);
        let (found, cut) = wal::replay_with(&path, codec::decode)?;
        if cut > 0 {
            tracing::warn!(bytes = cut, segment = %path.display(), "cut a torn or corrupt console log tail");
        }
        records.extend(found);
    }
    Ok(records)
}

pub(crate) fn remove_own_log(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(crate::io_err("removing the old console log")(e)),
        _ => Ok(()),
    }
}
