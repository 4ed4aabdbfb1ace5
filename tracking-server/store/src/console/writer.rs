//! The console log writer: start-up replay, and the thread that appends batches with group
//! commit, applies them to the buffer and rotates segments.

use super::codec::{self, ConsoleBatch};
use super::{Generation, Inner};
use crate::counters::bump;
use crate::wal::{self, Segment};
use crate::{read, write};
use crate::{Backpressure, Result};
use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use trainlog_schema::RunId;

/// Bytes of buffered lines that make the active generation freeze and persist.
const ROTATE_BYTES: usize = 32 << 20;
const MAX_GROUP_BYTES: usize = 16 << 20;
/// How long the first batch of a group waits for others before the group is written.
const COMMIT_WINDOW: Duration = Duration::from_millis(10);

pub(super) enum Cmd {
    Append { run: RunId, project_id: i64, batch: ConsoleBatch, done: oneshot::Sender<Result<()>> },
    Rotate { done: oneshot::Sender<()> },
    Stop,
}

/// Start-up: every segment left in the folder holds lines not yet persisted (a persisted
/// segment is removed), each replayed as a generation of its own so it is written to the same
/// files as before. Answers them and the segment to append to next.
pub(super) fn recover(dir: &Path) -> Result<(VecDeque<Arc<Generation>>, Segment)> {
    let segments = wal::list_segments(dir)?;
    let mut frozen = VecDeque::new();
    for &number in &segments {
        let path = wal::segment_path(dir, number);
        let (records, cut) = wal::replay_with(&path, codec::decode)?;
        if cut > 0 {
            tracing::warn!(bytes = cut, segment = %path.display(), "cut a torn or corrupt console log tail");
        }
        let mut generation = Generation::new(number);
        for r in records {
            generation.apply(&r.run, r.project_id, r.batch);
        }
        if generation.runs.is_empty() {
            let _ = std::fs::remove_file(&path);
        } else {
            frozen.push_back(Arc::new(generation));
        }
    }
    let next = segments.last().copied().unwrap_or(0) + 1;
    Ok((frozen, Segment::create(dir, next)?))
}

/// Takes every waiting batch, writes them with one fsync, applies them to the buffer, then
/// acknowledges them all.
pub(super) fn run(inner: Arc<Inner>, mut segment: Segment, rx: mpsc::Receiver<Cmd>) {
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
        encoded.clear();
        let mut take = |cmd: Cmd, encoded: &mut Vec<u8>| match cmd {
            Cmd::Append { run, project_id, batch, done } => {
                codec::encode(encoded, &run, project_id, &batch);
                group.push((run, project_id, batch, done));
            }
            Cmd::Rotate { done } => rotate_waiters.push(done),
            Cmd::Stop => stop = true,
        };
        if let Some(cmd) = first {
            take(cmd, &mut encoded);
            // Console lines wait a little for others to share their fsync: nobody waits on
            // their answer, and the metrics' log then shares the disk with fewer syncs.
            let until = std::time::Instant::now() + COMMIT_WINDOW;
            while encoded.len() < MAX_GROUP_BYTES {
                let left = until.saturating_duration_since(std::time::Instant::now());
                match rx.recv_timeout(left) {
                    Ok(cmd) => take(cmd, &mut encoded),
                    Err(_) => break,
                }
            }
        }
        if !group.is_empty() {
            let written = wal::append_group(&mut segment, &encoded, |torn| rotate(&inner, torn));
            match written {
                Ok(()) => {
                    let mut acks = Vec::with_capacity(group.len());
                    let mut added = 0;
                    {
                        let mut state = write(&inner.state);
                        for (run, project_id, batch, done) in group {
                            added += batch.bytes();
                            state.active.apply(&run, project_id, batch);
                            acks.push(done);
                        }
                    }
                    inner.buffered_bytes.fetch_add(added, Ordering::Relaxed);
                    for done in acks {
                        let _ = done.send(Ok(()));
                    }
                }
                Err(e) => {
                    bump(&inner.counters.console_wal_failures);
                    let (message, disk_full) = (e.to_string(), e.is_disk_full());
                    tracing::error!(
                        batches = group.len(),
                        disk_full,
                        "the console log could not be written: {message}"
                    );
                    for (_, _, _, done) in group {
                        let _ =
                            done.send(Err(Backpressure::LogUnavailable { message: message.clone(), disk_full }.into()));
                    }
                }
            }
        }
        let due = {
            let state = read(&inner.state);
            let bytes = state.active.bytes;
            bytes > 0
                && (bytes >= ROTATE_BYTES
                    || state.active.started.elapsed() >= inner.rotate_after
                    || !rotate_waiters.is_empty())
        };
        if due {
            match rotate(&inner, &segment) {
                Ok(next) => segment = next,
                Err(e) => {
                    bump(&inner.counters.console_wal_failures);
                    tracing::error!("could not start a new console log segment: {e}");
                }
            }
            inner.persist_wanted.notify_one();
        }
        for done in rotate_waiters {
            let _ = done.send(());
        }
        if stop {
            return;
        }
    }
}

/// Freezes the active generation and opens the next segment.
fn rotate(inner: &Inner, current: &Segment) -> Result<Segment> {
    let next = Segment::create(&inner.wal_dir, current.number + 1)?;
    let mut state = write(&inner.state);
    let old = std::mem::replace(&mut state.active, Generation::new(next.number));
    if old.runs.is_empty() {
        drop(state);
        let _ = std::fs::remove_file(wal::segment_path(&inner.wal_dir, old.segment));
    } else {
        state.frozen.push_back(Arc::new(old));
    }
    Ok(next)
}
