//! The background sender: takes what `Run::log` enqueued, sends it in batches, and when the
//! server cannot be reached switches to the spool until the server is back.

use crate::http::Http;
use crate::spool::Spool;
use crate::{Error, Result};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use trainlog_schema::json_f64;

/// Marks a key refused by validation, so it is reported once and then skipped.
const SKIPPED_KEY: u32 = u32::MAX;

/// Points per request.
pub const BATCH_POINTS: usize = 10_000;
/// Points per chunk of the pending queue.
const CHUNK_POINTS: usize = 16_384;
/// Points waiting in memory past which the sender writes them to the spool instead.
pub const MAX_PENDING_POINTS: usize = 2_000_000;

#[derive(Clone, Copy)]
pub struct PendingPoint {
    pub key: u32,
    pub step: i64,
    pub timestamp_ms: i64,
    pub value: f64,
}

/// What `Run` hands the sender, behind one mutex.
#[derive(Default)]
pub struct Pending {
    /// The chunk being filled; full chunks move to `full`, so `log` never copies earlier points.
    pub points: Vec<PendingPoint>,
    pub full: Vec<Vec<PendingPoint>>,
    /// Emptied chunks given back by the sender: reusing them keeps `log` off fresh memory pages.
    pub spare: Vec<Vec<PendingPoint>>,
    pub ops: Vec<Value>,
    pub flushes: Vec<SyncSender<()>>,
    /// Set by `finish`: send everything, then the finish request, then stop; after `deadline`,
    /// spool whatever is left instead of waiting for the server.
    pub finish: Option<(Value, Instant)>,
    /// Set when the sender took its last points: later points are refused, never stranded.
    pub closed: bool,
}

/// Interned metric keys: `Run::log` maps a key to a number once.
#[derive(Default)]
pub struct Keys {
    pub ids: HashMap<Box<str>, u32>,
    pub names: Vec<Arc<str>>,
}

pub struct Shared {
    pub run_id: String,
    pub pending: Mutex<Pending>,
    pub keys: Mutex<Keys>,
    pub wake: Condvar,
    pub flush_interval: Duration,
    pub offline: bool,
    pub spooling: AtomicBool,
    pub waiting: AtomicU64,
    pub warned: AtomicBool,
}

impl Shared {
    pub fn new(run_id: String, offline: bool) -> Self {
        Self {
            run_id,
            pending: Mutex::new(Pending::default()),
            keys: Mutex::new(Keys::default()),
            wake: Condvar::new(),
            flush_interval: Duration::from_millis(500),
            offline,
            spooling: AtomicBool::new(offline),
            waiting: AtomicU64::new(0),
            warned: AtomicBool::new(false),
        }
    }

    /// Enqueues points; interns each key once. Never blocks on the network.
    pub fn enqueue(&self, step: i64, timestamp_ms: i64, values: &[(&str, f64)]) {
        if values.is_empty() {
            return;
        }
        let mut ids: Vec<u32> = Vec::with_capacity(values.len());
        {
            let mut keys = lock(&self.keys);
            for (key, _) in values {
                let id = match keys.ids.get(*key) {
                    Some(&id) => id,
                    None => match trainlog_schema::MetricKey::parse("key", key) {
                        Ok(_) => {
                            let id = keys.names.len() as u32;
                            keys.names.push(Arc::from(*key));
                            keys.ids.insert((*key).into(), id);
                            id
                        }
                        Err(e) => {
                            eprintln!("trainlog: skipping metric {key:?}: {e}");
                            keys.ids.insert((*key).into(), SKIPPED_KEY);
                            SKIPPED_KEY
                        }
                    },
                };
                ids.push(id);
            }
        }
        let mut pending = lock(&self.pending);
        if pending.closed {
            return;
        }
        if pending.points.len() + values.len() > pending.points.capacity() {
            let fresh = match pending.spare.pop() {
                Some(chunk) if chunk.capacity() >= values.len() => chunk,
                _ => Vec::with_capacity(CHUNK_POINTS.max(values.len())),
            };
            let full = std::mem::replace(&mut pending.points, fresh);
            if !full.is_empty() {
                pending.full.push(full);
            }
        }
        let before = pending.points.len();
        for (&key, (_, value)) in ids.iter().zip(values) {
            if key != SKIPPED_KEY {
                pending.points.push(PendingPoint { key, step, timestamp_ms, value: *value });
            }
        }
        let added = pending.points.len() - before;
        let wake = !pending.full.is_empty() || pending.points.len() >= BATCH_POINTS;
        drop(pending);
        self.waiting.fetch_add(added as u64, Ordering::Relaxed);
        if wake {
            self.wake.notify_one();
        }
    }

    /// Whether the run's sender has taken its last points (the run finished).
    pub(crate) fn is_closed(&self) -> bool {
        let pending = lock(&self.pending);
        pending.closed || pending.finish.is_some()
    }

    pub(crate) fn warn_once(&self, why: &str) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            let waiting = self.waiting.load(Ordering::Relaxed);
            eprintln!(
                "trainlog: {why}; run {} keeps logging to its local spool ({waiting} points waiting) and sends them when the server is back",
                self.run_id
            );
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Encodes points as an Arrow IPC stream (key dictionary, step, timestamp, value), the
/// cheapest body for both ends.
fn points_arrow(points: &[PendingPoint], names: &[Arc<str>]) -> Result<Vec<u8>> {
    use arrow_array::types::Int32Type;
    use arrow_array::{ArrayRef, DictionaryArray, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray};
    // A dictionary of just the keys in this batch.
    let mut remap = vec![u32::MAX; names.len()];
    let mut used: Vec<&str> = Vec::new();
    let mut key_ids = Vec::with_capacity(points.len());
    for p in points {
        let slot = &mut remap[p.key as usize];
        if *slot == u32::MAX {
            *slot = used.len() as u32;
            used.push(&names[p.key as usize]);
        }
        key_ids.push(*slot as i32);
    }
    let arrow_err = |e: arrow_schema::ArrowError| Error::Invalid(format!("encoding a batch: {e}"));
    let keys = DictionaryArray::<Int32Type>::try_new(Int32Array::from(key_ids), Arc::new(StringArray::from(used)))
        .map_err(arrow_err)?;
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("key", Arc::new(keys)),
        ("step", Arc::new(points.iter().map(|p| p.step).collect::<Int64Array>())),
        ("timestamp", Arc::new(points.iter().map(|p| p.timestamp_ms).collect::<Int64Array>())),
        ("value", Arc::new(points.iter().map(|p| p.value).collect::<Float64Array>())),
    ];
    let batch = RecordBatch::try_from_iter(columns).map_err(arrow_err)?;
    let mut out = Vec::with_capacity(points.len() * 28 + 1024);
    let mut writer = arrow_ipc::writer::StreamWriter::try_new(&mut out, &batch.schema()).map_err(arrow_err)?;
    writer.write(&batch).map_err(arrow_err)?;
    writer.finish().map_err(arrow_err)?;
    drop(writer);
    Ok(out)
}

/// A spool record holding points, as `[key, step, timestamp, value]` rows.
fn points_op(points: &[PendingPoint], names: &[Arc<str>]) -> Value {
    let rows: Vec<Value> =
        points.iter().map(|p| json!([&*names[p.key as usize], p.step, p.timestamp_ms, json_f64(p.value)])).collect();
    json!({"op": "points", "points": rows})
}

fn op_request(http: &Http, run_id: &str, op: &Value) -> Result<Value> {
    match op["op"].as_str() {
        Some("metadata") => {
            http.put(&format!("/runs/{run_id}/metadata/{}", op["section"].as_str().unwrap_or("other")), &op["body"])
        }
        Some("params") => http.post(&format!("/runs/{run_id}/params"), &op["body"]),
        Some("finish") => http.post(&format!("/runs/{run_id}/finish"), &op["body"]),
        _ => Ok(Value::Null),
    }
}

pub struct Sender {
    pub shared: Arc<Shared>,
    pub http: Http,
    pub spool: Spool,
    retry_at: Instant,
    backoff: Duration,
}

impl Sender {
    pub fn new(shared: Arc<Shared>, http: Http, spool: Spool) -> Self {
        Self { shared, http, spool, retry_at: Instant::now(), backoff: Duration::from_millis(250) }
    }

    fn spool_points(&mut self, points: &[PendingPoint], names: &[Arc<str>]) {
        for chunk in points.chunks(BATCH_POINTS) {
            if let Err(e) = self.spool.append(&points_op(chunk, names)) {
                eprintln!("trainlog: could not write the spool of run {}: {e}", self.shared.run_id);
            }
        }
    }

    fn enter_spooling(&mut self, reason: &str) {
        self.shared.spooling.store(true, Ordering::Relaxed);
        self.retry_at = Instant::now() + self.backoff;
        self.backoff = (self.backoff * 2).min(Duration::from_secs(30));
        self.shared.warn_once(reason);
    }

    /// Tries to send what the spool holds; leaves spooling mode once it is all sent.
    fn drain_spool(&mut self, force: bool, deadline: Option<Instant>) {
        if self.shared.offline || !self.shared.spooling.load(Ordering::Relaxed) {
            return;
        }
        if !force && Instant::now() < self.retry_at {
            return;
        }
        match self.spool.send(&self.http, deadline) {
            Ok(_) => {
                self.shared.spooling.store(false, Ordering::Relaxed);
                self.backoff = Duration::from_millis(250);
                if self.shared.warned.swap(false, Ordering::Relaxed) {
                    eprintln!("trainlog: the server is back; run {} sent its spooled points", self.shared.run_id);
                }
            }
            Err(e) => self.enter_spooling(&e.to_string()),
        }
    }

    fn send_points(&mut self, points: &[PendingPoint], names: &[Arc<str>], deadline: Option<Instant>) {
        let mut sent = 0;
        if !self.shared.spooling.load(Ordering::Relaxed) && points.len() <= MAX_PENDING_POINTS {
            for chunk in points.chunks(BATCH_POINTS) {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
                let path = format!("/runs/{}/metrics", self.shared.run_id);
                let sent_ok = points_arrow(chunk, names).and_then(|body| {
                    self.http.post_bytes(&path, trainlog_schema::arrow::ARROW_STREAM_MEDIA_TYPE, body)
                });
                match sent_ok {
                    Ok(_) => sent += chunk.len(),
                    Err(Error::Server { message, .. }) => {
                        eprintln!(
                            "trainlog: the server refused {} points of run {}: {message}",
                            chunk.len(),
                            self.shared.run_id
                        );
                        sent += chunk.len();
                    }
                    Err(e) => {
                        self.enter_spooling(&e.to_string());
                        break;
                    }
                }
            }
        } else if !self.shared.spooling.load(Ordering::Relaxed) {
            self.enter_spooling("points arrive faster than the server takes them");
        }
        if sent < points.len() {
            self.spool_points(&points[sent..], names);
            if deadline.is_none() {
                self.drain_spool(false, None);
            }
        }
    }

    fn send_op(&mut self, op: Value) {
        if self.shared.spooling.load(Ordering::Relaxed) {
            let _ = self.spool.append(&op);
            return;
        }
        match op_request(&self.http, &self.shared.run_id, &op) {
            Ok(_) => {}
            Err(Error::Server { message, .. }) => {
                eprintln!(
                    "trainlog: the server refused a {} request of run {}: {message}",
                    op["op"], self.shared.run_id
                )
            }
            Err(e) => {
                let _ = self.spool.append(&op);
                self.enter_spooling(&e.to_string());
            }
        }
    }

    /// Joins queued chunks into one batch and gives the emptied chunks back for reuse.
    fn join_chunks(&self, full: Vec<Vec<PendingPoint>>, mut current: Vec<PendingPoint>) -> Vec<PendingPoint> {
        const MAX_SPARE: usize = 8;
        let total = full.iter().map(Vec::len).sum::<usize>() + current.len();
        let mut all = Vec::with_capacity(total);
        let mut emptied = Vec::with_capacity(full.len() + 1);
        for mut chunk in full {
            all.extend_from_slice(&chunk);
            chunk.clear();
            emptied.push(chunk);
        }
        all.extend_from_slice(&current);
        current.clear();
        emptied.push(current);
        let mut pending = lock(&self.shared.pending);
        for chunk in emptied {
            if pending.spare.len() < MAX_SPARE && chunk.capacity() >= CHUNK_POINTS {
                pending.spare.push(chunk);
            }
        }
        all
    }

    /// The sender thread's loop; returns once the run is finished.
    pub fn run(mut self) {
        loop {
            let (points, ops, flushes, finish) = {
                let mut pending = lock(&self.shared.pending);
                let started = Instant::now();
                while pending.full.is_empty()
                    && pending.points.len() < BATCH_POINTS
                    && pending.ops.is_empty()
                    && pending.flushes.is_empty()
                    && pending.finish.is_none()
                {
                    let left = self.shared.flush_interval.saturating_sub(started.elapsed());
                    if left.is_zero() {
                        break;
                    }
                    pending = self
                        .shared
                        .wake
                        .wait_timeout(pending, left)
                        .map(|(g, _)| g)
                        .unwrap_or_else(|p| p.into_inner().0);
                }
                let full = std::mem::take(&mut pending.full);
                let fresh = pending.spare.pop().unwrap_or_else(|| Vec::with_capacity(CHUNK_POINTS));
                let current = std::mem::replace(&mut pending.points, fresh);
                (
                    (full, current),
                    std::mem::take(&mut pending.ops),
                    std::mem::take(&mut pending.flushes),
                    pending.finish.clone(),
                )
            };
            // Joined outside the lock, so `log` never waits for this copy.
            let points = self.join_chunks(points.0, points.1);
            let names: Vec<Arc<str>> = lock(&self.shared.keys).names.clone();
            let deadline = finish.as_ref().map(|f| f.1);
            if !points.is_empty() {
                self.send_points(&points, &names, deadline);
            }
            self.shared.waiting.fetch_sub(points.len() as u64, Ordering::Relaxed);
            for op in ops {
                self.send_op(op);
            }
            let past_deadline = deadline.is_some_and(|d| Instant::now() >= d);
            if past_deadline {
                // Out of time: what is left stays in the spool for `trainlog sync` or a resumed run.
            } else if !flushes.is_empty() || finish.is_some() {
                self.drain_spool(true, deadline);
            } else {
                self.drain_spool(false, None);
            }
            for f in flushes {
                let _ = f.send(());
            }
            if let Some((op, _)) = finish {
                // Points logged after `finish` was called are still sent.
                let late = {
                    let mut pending = lock(&self.shared.pending);
                    pending.closed = true;
                    (std::mem::take(&mut pending.full), std::mem::take(&mut pending.points))
                };
                let late = self.join_chunks(late.0, late.1);
                if !late.is_empty() {
                    let names: Vec<Arc<str>> = lock(&self.shared.keys).names.clone();
                    self.send_points(&late, &names, deadline);
                }
                self.send_op(op);
                if !self.shared.spooling.load(Ordering::Relaxed) && !self.spool.has_unsent() {
                    self.spool.remove();
                    return;
                }
                if let Err(e) = self.spool.release(&self.http.base) {
                    eprintln!("trainlog: could not release the spool of run {}: {e}", self.shared.run_id);
                }
                if !self.shared.offline {
                    eprintln!(
                        "trainlog: run {} ended with requests left in its spool {}; `trainlog sync` sends them",
                        self.shared.run_id,
                        self.spool.path().display()
                    );
                }
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_encode_as_an_arrow_stream_with_a_dictionary_of_the_batch_keys() {
        use arrow_array::cast::AsArray;
        use arrow_array::types::{Float64Type, Int64Type};
        let names: Vec<Arc<str>> = vec![Arc::from("unused"), Arc::from("train/loss"), Arc::from("acc")];
        let points = [
            PendingPoint { key: 1, step: 3, timestamp_ms: 7, value: 0.5 },
            PendingPoint { key: 2, step: 4, timestamp_ms: 8, value: f64::NAN },
            PendingPoint { key: 1, step: 5, timestamp_ms: 9, value: -1.0 },
        ];
        let bytes = points_arrow(&points, &names).unwrap();
        let mut reader = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None).unwrap();
        let batch = reader.next().unwrap().unwrap();
        let keys = batch.column_by_name("key").unwrap().as_any_dictionary();
        let dict: Vec<&str> = keys.values().as_string::<i32>().iter().map(|v| v.unwrap()).collect();
        assert_eq!(dict, vec!["train/loss", "acc"]);
        assert_eq!(keys.normalized_keys(), vec![0, 1, 0]);
        assert_eq!(batch.column_by_name("step").unwrap().as_primitive::<Int64Type>().values().to_vec(), vec![3, 4, 5]);
        let values = batch.column_by_name("value").unwrap().as_primitive::<Float64Type>();
        assert!(values.value(1).is_nan() && values.value(2) == -1.0);
    }
}
