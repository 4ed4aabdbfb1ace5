//! The background sender: takes what `Run::log` enqueued, sends it in batches, and when the
//! server cannot be reached switches to the spool until the server is back.

use crate::http::Http;
use crate::spool::{lines_in, points_in, with_retries, Rejected, Settled, Spool};
use crate::{Error, Result};
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
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
/// Points kept in memory at most when neither the server nor the spool takes them (32 bytes
/// each: 32 MiB). Past it, newer points are dropped and counted as unsaved; older ones are kept.
pub const MAX_HELD_POINTS: usize = 1_000_000;
/// Requests other than points kept in memory at most, likewise.
const MAX_HELD_REQUESTS: usize = 10_000;

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
    /// Problems met outside the sender (a sampler that did not start), for the finish summary.
    pub problems: Mutex<Vec<String>>,
    /// Marks this process's join in the spool, where an earlier process of the run may have
    /// left joins of its own.
    pub join_token: String,
    /// The server's answer to this process's join when it went through the spool (the server
    /// was down at the start, or an earlier process's spool had to go first).
    pub joined: Mutex<Option<Value>>,
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
            problems: Mutex::new(Vec::new()),
            join_token: uuid::Uuid::new_v4().simple().to_string(),
            joined: Mutex::new(None),
        }
    }

    /// Prints a problem now and keeps it for the finish summary.
    pub(crate) fn report_problem(&self, problem: String) {
        eprintln!("trainlog: {problem}");
        lock(&self.problems).push(problem);
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

    /// Queues a request other than points (console lines); dropped once the sender has closed.
    pub(crate) fn enqueue_request(&self, op: Value) {
        let mut pending = lock(&self.pending);
        if pending.closed {
            return;
        }
        pending.ops.push(op);
        drop(pending);
        self.wake.notify_one();
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
        Some("alert") => http.post(&format!("/runs/{run_id}/alerts"), &op["body"]),
        Some("logs") => http.post(&format!("/runs/{run_id}/logs"), &op["body"]),
        _ => Ok(Value::Null),
    }
}

/// How a run's points and requests ended up, as `Run::finish` answers it. Each point this
/// process logged (and each one an earlier process of the run left in its spool) is counted
/// once: acknowledged, spooled, rejected or unsaved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FinishSummary {
    /// Points the server acknowledged.
    pub acknowledged: u64,
    /// Points left in the local spool (offline, or the server could not be reached in time):
    /// `trainlog sync`, or the run resumed, sends them.
    pub spooled: u64,
    /// Points the server refused for good, kept with its answer in `rejected_file`.
    pub rejected: u64,
    /// Points lost: the server did not take them and they could not be written locally.
    pub unsaved: u64,
    /// Other requests (create, params, metadata, finish) left in the spool.
    pub requests_spooled: u64,
    /// Other requests the server refused, in `rejected_file`.
    pub requests_rejected: u64,
    /// Other requests lost.
    pub requests_unsaved: u64,
    /// The spool, when something is left in it.
    pub spool_file: Option<PathBuf>,
    /// `<spool folder>/rejected/<run id>.jsonl`, when the server refused something.
    pub rejected_file: Option<PathBuf>,
    /// What went wrong, also printed to stderr: refusals, data that could not be saved, a
    /// sampler that did not start.
    pub warnings: Vec<String>,
    /// Media items the server recorded.
    pub media_sent: u64,
    /// Media items left in the media spool (sent when the run is resumed).
    pub media_spooled: u64,
    /// Media items the server refused, or that could not be encoded.
    pub media_rejected: u64,
    /// Media items dropped: the queue was full, or they could be neither sent nor spooled.
    pub media_dropped: u64,
    /// Console lines this process printed and captured.
    pub console_lines: u64,
    /// Console lines the server acknowledged (the rest are in the spool, or counted as requests
    /// rejected or unsaved, a request per batch of lines).
    pub console_lines_acknowledged: u64,
    /// Console lines the byte cap left out (the line in their place says how many).
    pub console_lines_dropped: u64,
}

impl FinishSummary {
    /// The summary as a JSON object with the same field names; paths as text.
    pub fn to_json(&self) -> Value {
        let text = |path: &Option<PathBuf>| path.as_ref().map(|p| p.display().to_string());
        json!({
            "acknowledged": self.acknowledged,
            "spooled": self.spooled,
            "rejected": self.rejected,
            "unsaved": self.unsaved,
            "requests_spooled": self.requests_spooled,
            "requests_rejected": self.requests_rejected,
            "requests_unsaved": self.requests_unsaved,
            "spool_file": text(&self.spool_file),
            "rejected_file": text(&self.rejected_file),
            "warnings": self.warnings,
            "media_sent": self.media_sent,
            "media_spooled": self.media_spooled,
            "media_rejected": self.media_rejected,
            "media_dropped": self.media_dropped,
            "console_lines": self.console_lines,
            "console_lines_acknowledged": self.console_lines_acknowledged,
            "console_lines_dropped": self.console_lines_dropped,
        })
    }
}

/// A request waiting in memory because neither the server nor the spool took it.
enum Held {
    Points(Vec<PendingPoint>),
    Request(Value),
}

/// The longest wait before trying the server again, whatever its `Retry-After` says.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(60);
/// The shortest, so a `Retry-After: 0` does not spin.
const MIN_RETRY_WAIT: Duration = Duration::from_millis(100);
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long `finish` keeps trying a server that gives no answer (refused, timed out, no route)
/// once everything is in the spool: training never waits on an outage. A server that answers
/// "not now" with `Retry-After` is up, and is tried until the finish deadline.
pub const FINISH_UNANSWERED_GRACE: Duration = Duration::from_secs(3);

fn retry_after_of(error: &Error) -> Option<Duration> {
    match error {
        Error::Unreachable { retry_after, .. } => *retry_after,
        _ => None,
    }
}

pub struct Sender {
    pub shared: Arc<Shared>,
    pub http: Http,
    pub spool: Spool,
    rejected: Rejected,
    /// Oldest first; newer requests queue behind them, so the order of requests holds.
    held: VecDeque<Held>,
    held_points: usize,
    held_requests: usize,
    /// Set when a spool write failed in this pass: the rest of the pass is held without trying.
    spool_failing: bool,
    spool_warned: bool,
    memory_full_warned: bool,
    /// Why something could not be written locally, for the summary.
    save_error: Option<String>,
    points_acknowledged: u64,
    lines_acknowledged: u64,
    points_unsaved: u64,
    requests_unsaved: u64,
    retry_at: Instant,
    backoff: Duration,
    /// Whether the last failure came with the server's `Retry-After` (the server is up).
    server_said_wait: bool,
}

impl Sender {
    pub fn new(shared: Arc<Shared>, http: Http, spool: Spool) -> Self {
        let rejected = Rejected::new(spool.dir(), &shared.run_id);
        Self {
            shared,
            http,
            spool,
            rejected,
            held: VecDeque::new(),
            held_points: 0,
            held_requests: 0,
            spool_failing: false,
            spool_warned: false,
            memory_full_warned: false,
            save_error: None,
            points_acknowledged: 0,
            lines_acknowledged: 0,
            points_unsaved: 0,
            requests_unsaved: 0,
            retry_at: Instant::now(),
            backoff: FIRST_BACKOFF,
            server_said_wait: false,
        }
    }

    fn names(&self) -> Vec<Arc<str>> {
        lock(&self.shared.keys).names.clone()
    }

    fn is_spooling(&self) -> bool {
        self.shared.spooling.load(Ordering::Relaxed)
    }

    fn sends_directly(&self) -> bool {
        !self.shared.offline && !self.is_spooling()
    }

    /// The server cannot take requests now: spool them, and try again after `retry_after`
    /// (capped) when the server said, else after an exponential backoff.
    fn enter_spooling(&mut self, reason: &str, retry_after: Option<Duration>) {
        self.shared.spooling.store(true, Ordering::Relaxed);
        self.server_said_wait = retry_after.is_some();
        let wait = retry_after.unwrap_or(self.backoff).clamp(MIN_RETRY_WAIT, MAX_RETRY_WAIT);
        self.retry_at = Instant::now() + wait;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        self.shared.warn_once(reason);
    }

    /// Appends a record to the spool, retrying a failed write; false when it could not be written.
    fn spool_append(&mut self, record: &Value) -> bool {
        if self.spool_failing {
            return false;
        }
        let spool = &mut self.spool;
        match with_retries(|| spool.append(record)) {
            Ok(()) => true,
            Err(e) => {
                self.spool_failing = true;
                if !self.spool_warned {
                    self.spool_warned = true;
                    eprintln!(
                        "trainlog: could not write the spool of run {} ({e}); keeping up to {MAX_HELD_POINTS} points in memory and trying again",
                        self.shared.run_id
                    );
                }
                self.save_error = Some(format!("the spool could not be written: {e}"));
                false
            }
        }
    }

    /// Keeps a request in memory, behind those already held; past the bound it is counted as unsaved.
    fn hold(&mut self, item: Held) {
        let fits = match &item {
            Held::Points(points) => self.held_points + points.len() <= MAX_HELD_POINTS,
            Held::Request(_) => self.held_requests < MAX_HELD_REQUESTS,
        };
        if !fits {
            match &item {
                Held::Points(points) => self.points_unsaved += points.len() as u64,
                Held::Request(_) => self.requests_unsaved += 1,
            }
            if !self.memory_full_warned {
                self.memory_full_warned = true;
                eprintln!(
                    "trainlog: run {} holds {} points in memory that neither the server nor the spool took; newer ones are dropped and counted as unsaved",
                    self.shared.run_id, self.held_points
                );
            }
            return;
        }
        match &item {
            Held::Points(points) => self.held_points += points.len(),
            Held::Request(_) => self.held_requests += 1,
        }
        self.held.push_back(item);
    }

    /// Writes a refused request to the rejected file; when even that fails, it is counted as unsaved.
    fn reject(&mut self, record: &Value, refusal: &Error) {
        if let Err(e) = self.rejected.keep(record, refusal) {
            let points = points_in(record);
            if record["op"] == "points" {
                self.points_unsaved += points;
            } else {
                self.requests_unsaved += 1;
            }
            eprintln!(
                "trainlog: the server refused a {} request of run {} ({refusal}) and it could not be kept in {}: {e}",
                record["op"].as_str().unwrap_or("?"),
                self.shared.run_id,
                self.rejected.path().display()
            );
            self.save_error = Some(format!("the rejected file could not be written: {e}"));
        }
    }

    /// Sends a chunk of points, or spools it, or holds it; a refusal goes to the rejected file.
    fn deliver_points(&mut self, chunk: &[PendingPoint], names: &[Arc<str>], deadline: Option<Instant>) {
        if !self.held.is_empty() {
            return self.hold(Held::Points(chunk.to_vec()));
        }
        if self.sends_directly() && deadline.is_none_or(|d| Instant::now() < d) {
            let path = format!("/runs/{}/metrics", self.shared.run_id);
            let sent = points_arrow(chunk, names)
                .and_then(|body| self.http.post_bytes(&path, trainlog_schema::arrow::ARROW_STREAM_MEDIA_TYPE, body));
            match sent {
                Ok(_) => {
                    self.points_acknowledged += chunk.len() as u64;
                    return;
                }
                Err(e @ Error::Unreachable { .. }) => self.enter_spooling(&e.to_string(), retry_after_of(&e)),
                Err(refusal) => return self.reject(&points_op(chunk, names), &refusal),
            }
        }
        if !self.spool_append(&points_op(chunk, names)) {
            self.hold(Held::Points(chunk.to_vec()));
        }
    }

    /// Sends a request other than points, or spools it, or holds it, in the same way.
    fn deliver_request(&mut self, op: Value) {
        if !self.held.is_empty() {
            return self.hold(Held::Request(op));
        }
        if self.sends_directly() {
            match op_request(&self.http, &self.shared.run_id, &op) {
                Ok(_) => {
                    self.lines_acknowledged += lines_in(&op);
                    return;
                }
                Err(e @ Error::Unreachable { .. }) => self.enter_spooling(&e.to_string(), retry_after_of(&e)),
                Err(refusal) => return self.reject(&op, &refusal),
            }
        }
        if !self.spool_append(&op) {
            self.hold(Held::Request(op));
        }
    }

    fn send_points(&mut self, points: &[PendingPoint], names: &[Arc<str>], deadline: Option<Instant>) {
        if points.len() > MAX_PENDING_POINTS && self.sends_directly() {
            self.enter_spooling("points arrive faster than the server takes them", None);
        }
        for chunk in points.chunks(BATCH_POINTS) {
            self.deliver_points(chunk, names, deadline);
        }
    }

    /// Tries what is held in memory again, oldest first; stops trying at the first that is held again.
    fn deliver_held(&mut self, deadline: Option<Instant>) {
        self.spool_failing = false;
        if self.held.is_empty() {
            return;
        }
        let names = self.names();
        let mut waiting = std::mem::take(&mut self.held).into_iter();
        (self.held_points, self.held_requests) = (0, 0);
        while let Some(item) = waiting.next() {
            match item {
                Held::Points(points) => self.deliver_points(&points, &names, deadline),
                Held::Request(op) => self.deliver_request(op),
            }
            if !self.held.is_empty() {
                for later in waiting.by_ref() {
                    self.hold(later);
                }
            }
        }
    }

    /// Keeps `waiting` equal to the points queued plus the points held, once `taken` points
    /// left the queue or the held list.
    fn settle_waiting(&self, taken: usize) {
        self.shared.waiting.fetch_add(self.held_points as u64, Ordering::Relaxed);
        self.shared.waiting.fetch_sub(taken as u64, Ordering::Relaxed);
    }

    /// Sends what the spool holds once the wait after the last failure is over (or at once when
    /// `force`); leaves spooling mode once it is all sent.
    fn retry_server(&mut self, force: bool, deadline: Option<Instant>) {
        if self.shared.offline || !self.is_spooling() {
            return;
        }
        if !force && Instant::now() < self.retry_at {
            return;
        }
        if self.spool.has_unsent() {
            let mut settled = Settled::default();
            let sent = self.spool.send(&self.http, deadline, &mut self.rejected, &mut settled);
            self.points_acknowledged += settled.points_acknowledged;
            self.lines_acknowledged += settled.lines_acknowledged;
            if let Some((_, answer)) = settled.joins.into_iter().rfind(|(token, _)| *token == self.shared.join_token) {
                *lock(&self.shared.joined) = Some(answer);
            }
            if let Err(e) = sent {
                return self.enter_spooling(&e.to_string(), retry_after_of(&e));
            }
        }
        self.shared.spooling.store(false, Ordering::Relaxed);
        self.backoff = FIRST_BACKOFF;
    }

    fn announce_recovery(&self) {
        if !self.is_spooling() && self.held.is_empty() && self.shared.warned.swap(false, Ordering::Relaxed) {
            eprintln!("trainlog: the server is back; run {} sent its spooled points", self.shared.run_id);
        }
    }

    /// At finish: tries again, honouring the server's `Retry-After`, until everything is sent or
    /// `deadline` passes; a server that gives no answer is tried for
    /// [`FINISH_UNANSWERED_GRACE`] only, since what it has not taken is in the spool.
    fn settle_before(&mut self, deadline: Instant) {
        if self.shared.offline {
            return;
        }
        let give_up = deadline.min(Instant::now() + FINISH_UNANSWERED_GRACE);
        loop {
            let held_before = self.held_points;
            self.deliver_held(Some(deadline));
            self.settle_waiting(held_before);
            self.retry_server(false, Some(deadline));
            if !self.is_spooling() && self.held.is_empty() {
                return self.announce_recovery();
            }
            let now = Instant::now();
            let until = if self.server_said_wait || !self.held.is_empty() { deadline } else { give_up };
            if now >= until {
                return;
            }
            std::thread::sleep(self.retry_at.min(until).saturating_duration_since(now));
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

    /// The sender thread's loop; returns once the run is finished, with how its data ended up.
    pub fn run(mut self) -> FinishSummary {
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
            let deadline = finish.as_ref().map(|f| f.1);
            let held_before = self.held_points;
            self.deliver_held(deadline);
            if !points.is_empty() {
                let names = self.names();
                self.send_points(&points, &names, deadline);
            }
            self.settle_waiting(held_before + points.len());
            for op in ops {
                self.deliver_request(op);
            }
            let past_deadline = deadline.is_some_and(|d| Instant::now() >= d);
            if past_deadline {
                // Out of time: what is left stays in the spool for `trainlog sync` or a resumed run.
            } else if !flushes.is_empty() || finish.is_some() {
                self.retry_server(true, deadline);
            } else {
                self.retry_server(false, None);
            }
            self.announce_recovery();
            for f in flushes {
                let _ = f.send(());
            }
            if let Some((op, deadline)) = finish {
                // Points logged after `finish` was called are still sent.
                let late = {
                    let mut pending = lock(&self.shared.pending);
                    pending.closed = true;
                    (std::mem::take(&mut pending.full), std::mem::take(&mut pending.points))
                };
                let late = self.join_chunks(late.0, late.1);
                let held_before = self.held_points;
                if !late.is_empty() {
                    let names = self.names();
                    self.send_points(&late, &names, Some(deadline));
                }
                self.settle_waiting(held_before + late.len());
                self.deliver_request(op);
                self.settle_before(deadline);
                return self.close();
            }
        }
    }

    /// Ends the sender: what is still held is lost; the spool is released when something is
    /// left in it (else removed); warnings are printed.
    fn close(mut self) -> FinishSummary {
        let run_id = &self.shared.run_id;
        self.shared.waiting.fetch_sub(self.held_points as u64, Ordering::Relaxed);
        let unsaved = self.points_unsaved + self.held_points as u64;
        let requests_unsaved = self.requests_unsaved + self.held_requests as u64;
        let mut warnings = lock(&self.shared.problems).clone();
        let mut closing = Vec::new();
        let mut spool_file = None;
        let (mut spooled, mut requests_spooled) = (0, 0);
        if self.spool.has_unsent() {
            (spooled, requests_spooled) = self.spool.unsent().unwrap_or_else(|e| {
                closing.push(format!("the spool of run {run_id} could not be read back to count what it holds: {e}"));
                (0, 0)
            });
            if let Err(e) = self.spool.release(&self.http.base) {
                eprintln!("trainlog: could not release the spool of run {run_id}: {e}");
            }
            if !self.shared.offline {
                eprintln!(
                    "trainlog: run {run_id} ended with {spooled} points and {requests_spooled} other requests \
                     waiting in its spool {} for {}; `trainlog sync` sends them",
                    self.spool.path().display(),
                    self.http.base
                );
            }
            spool_file = Some(self.spool.path());
        } else {
            self.spool.remove();
        }
        if !self.rejected.is_empty() {
            closing.push(format!(
                "the server refused {} points and {} other requests of run {run_id}; they are kept with its answers in {}",
                self.rejected.points,
                self.rejected.requests,
                self.rejected.path().display()
            ));
        }
        if unsaved > 0 || requests_unsaved > 0 {
            let why = self.save_error.as_deref().unwrap_or("they could not be written locally");
            closing.push(format!(
                "{unsaved} points and {requests_unsaved} other requests of run {run_id} could not be saved: the server did not take them and {why}"
            ));
        }
        for warning in &closing {
            eprintln!("trainlog: {warning}");
        }
        warnings.extend(closing);
        FinishSummary {
            acknowledged: self.points_acknowledged,
            spooled,
            rejected: self.rejected.points,
            unsaved,
            requests_spooled,
            requests_rejected: self.rejected.requests,
            requests_unsaved,
            spool_file,
            rejected_file: (!self.rejected.is_empty()).then(|| self.rejected.path().to_owned()),
            warnings,
            console_lines_acknowledged: self.lines_acknowledged,
            ..FinishSummary::default()
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
