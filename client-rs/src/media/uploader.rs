//! The media thread: takes queued items, encodes them, uploads their blobs and records them; when
//! the server cannot take them, spools them and sends the spool again once it can.

use super::encode::{prepare, Blob, Prepared, Route};
use super::spool::{Entry, MediaSpool};
use super::Media;
use crate::http::Http;
use crate::{Error, Result};
use serde_json::json;
use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bytes of logged media (before encoding) the queue holds; past it, items are dropped and counted.
pub const MAX_QUEUED_BYTES: usize = 256 << 20;
/// Items encoded and sent together.
const BATCH_ITEMS: usize = 64;
/// How long after a failure the spool is tried again.
const RETRY_EVERY: Duration = Duration::from_secs(2);

/// What became of the media a run logged.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MediaCounts {
    /// Items the server recorded.
    pub sent: u64,
    /// Items left in the media spool (sent when the run is resumed).
    pub spooled: u64,
    /// Items the server refused, or that could not be encoded (each with a warning).
    pub rejected: u64,
    /// Items dropped because the queue was full, or that could be neither sent nor spooled.
    pub dropped: u64,
    pub warnings: Vec<String>,
}

struct Queued {
    key: String,
    step: i64,
    index: usize,
    timestamp_ms: i64,
    media: Media,
    bytes: usize,
}

#[derive(Default)]
struct State {
    items: VecDeque<Queued>,
    bytes: usize,
    /// Set by `finish`: send until then, spool the rest.
    deadline: Option<Instant>,
    /// Items taken from the queue and not yet sent or spooled.
    in_flight: usize,
    counts: MediaCounts,
    /// Per table key, the step of its last part and the number the next part at that step
    /// takes: this writer's own numbering, which the server maps to the part's index.
    table_parts: HashMap<String, (i64, usize)>,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub struct MediaQueue {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl MediaQueue {
    /// Starts the media thread of a run; it first sends what an earlier process left in the
    /// run's media spool. `http` is None offline: everything is spooled.
    pub fn start(http: Option<Http>, run_id: &str, spool_dir: &Path) -> Self {
        let shared = Arc::new(Shared { state: Mutex::new(State::default()), wake: Condvar::new() });
        let worker = Worker {
            shared: shared.clone(),
            http,
            run_id: run_id.to_owned(),
            writer: uuid::Uuid::new_v4().simple().to_string(),
            spool: MediaSpool::open(spool_dir, run_id),
            retry_at: Instant::now(),
            tried_at_finish: false,
        };
        let thread = std::thread::Builder::new().name("trainlog-media".into()).spawn(move || worker.run()).ok();
        Self { shared, thread: Mutex::new(thread) }
    }

    /// Queues items; never blocks on the network or the disk.
    pub fn push(&self, key: &str, step: i64, timestamp_ms: i64, items: Vec<Media>) {
        let mut state = lock(&self.shared.state);
        for (mut index, media) in items.into_iter().enumerate() {
            let bytes = media.queued_bytes();
            if state.deadline.is_some() || state.bytes + bytes > MAX_QUEUED_BYTES {
                state.counts.dropped += 1;
                if state.counts.dropped == 1 {
                    eprintln!(
                        "trainlog: media queue full ({MAX_QUEUED_BYTES} bytes waiting to be encoded and sent): \
                         dropping media items; the run's finish summary counts them"
                    );
                }
                continue;
            }
            if media.kind == trainlog_schema::MediaKind::Table {
                let at = state.table_parts.entry(key.to_owned()).or_insert((step, 0));
                if at.0 != step {
                    *at = (step, 0);
                }
                index = at.1;
                at.1 += 1;
            }
            state.bytes += bytes;
            state.items.push_back(Queued { key: key.to_owned(), step, index, timestamp_ms, media, bytes });
        }
        drop(state);
        self.shared.wake.notify_one();
    }

    /// Items queued and not yet sent or spooled.
    pub fn pending(&self) -> usize {
        let state = lock(&self.shared.state);
        state.items.len() + state.in_flight
    }

    /// Waits until every item queued so far is sent or spooled, at most `timeout`.
    pub fn flush(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.pending() > 0 {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }

    /// Sends what is queued until `deadline`, spools the rest, and answers the counts.
    pub fn finish(&self, deadline: Instant) -> MediaCounts {
        lock(&self.shared.state).deadline = Some(deadline);
        self.shared.wake.notify_one();
        if let Some(thread) = lock(&self.thread).take() {
            let _ = thread.join();
        }
        let mut state = lock(&self.shared.state);
        // A thread that never started leaves its items here.
        state.counts.dropped += state.items.len() as u64;
        state.items.clear();
        std::mem::take(&mut state.counts)
    }
}

/// Sends what a run's media spool holds (left by a process that has ended), in order, until
/// the server cannot take an entry now; answers what was sent, refused and is still waiting.
pub(crate) fn send_spool_of(http: Http, spool_dir: &Path, run_id: &str) -> MediaCounts {
    let mut worker = Worker {
        shared: Arc::new(Shared { state: Mutex::new(State::default()), wake: Condvar::new() }),
        http: Some(http),
        run_id: run_id.to_owned(),
        spool: MediaSpool::open(spool_dir, run_id),
        retry_at: Instant::now(),
        tried_at_finish: false,
        // Spooled parts carry the writer that numbered them; this one names nothing new.
        writer: uuid::Uuid::new_v4().simple().to_string(),
    };
    worker.send_spool();
    let mut counts = std::mem::take(&mut lock(&worker.shared.state).counts);
    counts.spooled = worker.spool.items();
    counts
}

struct Worker {
    shared: Arc<Shared>,
    http: Option<Http>,
    run_id: String,
    /// This process's token as a writer of the run's tables: sent with each table part and its
    /// number, so the server appends the part after those of other processes (a resumed run)
    /// and a part sent again lands where it did. A spooled part keeps it.
    writer: String,
    spool: MediaSpool,
    retry_at: Instant,
    /// Whether the spool was tried once `finish` set the deadline.
    tried_at_finish: bool,
}

enum Sent {
    Done,
    /// The server cannot be reached, or cannot take it now.
    Later,
    Refused(String),
}

impl Worker {
    fn run(mut self) {
        loop {
            let (batch, deadline) = {
                let mut state = lock(&self.shared.state);
                if state.items.is_empty() && state.deadline.is_none() {
                    state = self
                        .shared
                        .wake
                        .wait_timeout(state, Duration::from_millis(500))
                        .map(|r| r.0)
                        .unwrap_or_else(|p| p.into_inner().0);
                }
                let n = state.items.len().min(BATCH_ITEMS);
                let batch: Vec<Queued> = state.items.drain(..n).collect();
                state.bytes -= batch.iter().map(|q| q.bytes).sum::<usize>();
                state.in_flight = batch.len();
                (batch, state.deadline)
            };
            let past_deadline = deadline.is_some_and(|d| Instant::now() >= d);
            // At finish the spool is tried at once, whatever the wait after the last failure: a
            // server that came back takes it all now instead of leaving it to a resume.
            let finish_try = deadline.is_some() && !self.tried_at_finish;
            if !self.spool.is_empty() && !past_deadline && (finish_try || Instant::now() >= self.retry_at) {
                self.tried_at_finish |= finish_try;
                self.send_spool();
            }
            if batch.is_empty() {
                if deadline.is_some() {
                    break;
                }
                continue;
            }
            self.handle(batch, past_deadline);
            lock(&self.shared.state).in_flight = 0;
        }
        self.close();
    }

    /// Encodes a batch and sends it, or spools it when the server cannot take it now.
    fn handle(&mut self, batch: Vec<Queued>, past_deadline: bool) {
        let mut prepared = Vec::with_capacity(batch.len());
        for q in batch {
            match prepare(&q.key, q.step, q.index, q.timestamp_ms, q.media) {
                Ok(mut p) => {
                    if p.route == Route::Table {
                        p.item["writer"] = json!(self.writer);
                    }
                    prepared.push(p)
                }
                Err(e) => self.count(|c| {
                    c.rejected += 1;
                    c.warnings.push(format!("media {:?} at step {}: {e}", q.key, q.step));
                }),
            }
        }
        if prepared.is_empty() {
            return;
        }
        let direct = self.spool.is_empty() && !past_deadline && Instant::now() >= self.retry_at;
        let outcome = if direct { self.send(&prepared) } else { Sent::Later };
        match outcome {
            Sent::Done => self.count(|c| c.sent += prepared.len() as u64),
            Sent::Refused(why) => self.count(|c| {
                c.rejected += prepared.len() as u64;
                c.warnings.push(format!("the server refused {} media items: {why}", prepared.len()));
            }),
            Sent::Later => {
                if direct {
                    self.retry_at = Instant::now() + RETRY_EVERY;
                }
                if let Err(e) = self.spool.save(&prepared) {
                    self.count(|c| {
                        c.dropped += prepared.len() as u64;
                        c.warnings.push(format!("{} media items could not be spooled: {e}", prepared.len()));
                    });
                }
            }
        }
    }

    fn close(&mut self) {
        let spooled = self.spool.items();
        if spooled > 0 {
            eprintln!(
                "trainlog: {spooled} media items of run {} wait in {}; resuming the run sends them",
                self.run_id,
                self.spool.dir().display()
            );
        }
        self.count(|c| c.spooled = spooled);
        let counts = lock(&self.shared.state).counts.clone();
        for w in &counts.warnings {
            eprintln!("trainlog: {w}");
        }
    }

    fn count(&self, f: impl FnOnce(&mut MediaCounts)) {
        f(&mut lock(&self.shared.state).counts);
    }

    /// Uploads each blob, records the items in one request, the histograms in another, then
    /// sends each table part.
    fn send(&self, prepared: &[Prepared]) -> Sent {
        let of = |route: Route| prepared.iter().filter(move |p| p.route == route);
        let items: Vec<&serde_json::Value> = of(Route::Media).map(|p| &p.item).collect();
        let histograms: Vec<&serde_json::Value> = of(Route::Histogram).map(|p| &p.item).collect();
        let blobs: Vec<&Blob> = of(Route::Media).flat_map(|p| &p.blobs).collect();
        let tables: Vec<(&serde_json::Value, &Blob)> =
            of(Route::Table).filter_map(|p| Some((&p.item, p.blobs.first()?))).collect();
        self.send_parts(&blobs, &items, &histograms, &tables)
    }

    fn send_parts(
        &self,
        blobs: &[&Blob],
        items: &[&serde_json::Value],
        histograms: &[&serde_json::Value],
        tables: &[(&serde_json::Value, &Blob)],
    ) -> Sent {
        let Some(http) = &self.http else { return Sent::Later };
        let verdict = |e: Error| match e {
            Error::Unreachable { .. } => Sent::Later,
            other => Sent::Refused(other.to_string()),
        };
        let run = &self.run_id;
        for b in blobs {
            if let Err(e) = http.put_bytes(&format!("/runs/{run}/media/blobs/{}", b.sha256), &b.mime, b.bytes.clone()) {
                return verdict(e);
            }
        }
        if !items.is_empty() {
            if let Err(e) = http.post(&format!("/runs/{run}/media"), &json!({ "items": items })) {
                return verdict(e);
            }
        }
        if !histograms.is_empty() {
            if let Err(e) = http.post(&format!("/runs/{run}/histograms"), &json!({ "histograms": histograms })) {
                return verdict(e);
            }
        }
        for (part, body) in tables {
            let mut path = format!(
                "/runs/{run}/tables?key={}&step={}&mode={}&index={}",
                crate::api::encode(part["key"].as_str().unwrap_or_default()),
                part["step"],
                part["mode"].as_str().unwrap_or("replace"),
                part["index"]
            );
            // Parts spooled by an older version have no writer: placed by their index.
            if let Some(writer) = part["writer"].as_str() {
                path.push_str(&format!("&writer={}", crate::api::encode(writer)));
            }
            if let Err(e) = http.post_bytes(&path, &body.mime, body.bytes.clone()) {
                return verdict(e);
            }
        }
        Sent::Done
    }

    /// Sends the spool's entries in order, until one cannot be sent now.
    fn send_spool(&mut self) {
        for path in self.spool.entries() {
            let outcome = self.spool.load(&path).and_then(|entry| Ok((self.send_entry(&entry)?, entry)));
            match outcome {
                Ok((Sent::Done, entry)) => {
                    self.count(|c| c.sent += entry.len() as u64);
                    let _ = self.spool.remove(&entry);
                }
                Ok((Sent::Refused(why), entry)) => {
                    self.count(|c| {
                        c.rejected += entry.len() as u64;
                        c.warnings.push(format!("the server refused {} spooled media items: {why}", entry.len()));
                    });
                    let _ = self.spool.remove(&entry);
                }
                Ok((Sent::Later, _)) => {
                    self.retry_at = Instant::now() + RETRY_EVERY;
                    return;
                }
                Err(e) => {
                    self.count(|c| c.warnings.push(format!("a media spool entry could not be read: {e}")));
                    let _ = std::fs::rename(&path, path.with_extension("unreadable"));
                }
            }
        }
    }

    fn send_entry(&self, entry: &Entry) -> Result<Sent> {
        let blobs = entry.blobs.iter().map(|(sha, mime)| self.spool.blob(sha, mime)).collect::<Result<Vec<_>>>()?;
        let bodies =
            entry.tables.iter().map(|(_, sha, mime)| self.spool.blob(sha, mime)).collect::<Result<Vec<_>>>()?;
        let items: Vec<&serde_json::Value> = entry.items.iter().collect();
        let histograms: Vec<&serde_json::Value> = entry.histograms.iter().collect();
        let tables: Vec<(&serde_json::Value, &Blob)> = entry.tables.iter().map(|t| &t.0).zip(&bodies).collect();
        Ok(self.send_parts(&blobs.iter().collect::<Vec<_>>(), &items, &histograms, &tables))
    }
}
