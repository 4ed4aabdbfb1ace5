//! Console capture: the process's stdout and stderr teed at the file-descriptor level (so C and
//! CUDA extensions, `print`, `logging` and child processes are caught, and the terminal still
//! shows everything), cut into lines, tagged with the process, its rank, node, attempt and the
//! last step logged, and shipped in batches through the run's sender, spool and retries.

mod lines;
#[cfg(unix)]
mod tee;

pub use lines::LineSplitter;

use crate::sender::Shared;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use trainlog_schema::console::ConsoleStream;

/// Which processes capture their console.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsoleMode {
    /// Every rank of a job (a process outside a job is rank 0).
    All,
    /// Rank 0 only.
    Rank0,
    Off,
}

impl ConsoleMode {
    pub fn parse(s: &str) -> crate::Result<Self> {
        match s {
            "all" => Ok(ConsoleMode::All),
            "rank0" => Ok(ConsoleMode::Rank0),
            "off" => Ok(ConsoleMode::Off),
            _ => Err(crate::Error::Invalid(format!("console {s:?}: use \"all\", \"rank0\" or \"off\""))),
        }
    }

    /// The mode asked, unless `TRAINLOG_CONSOLE` says otherwise.
    pub fn from_env_or(self) -> Self {
        std::env::var("TRAINLOG_CONSOLE").ok().and_then(|v| Self::parse(v.trim()).ok()).unwrap_or(self)
    }
}

/// Whether a run of this process captures its console now.
static CAPTURING: AtomicBool = AtomicBool::new(false);

/// Bytes a process ships at most by default: past it, the middle is left out (see `Cap`).
pub const DEFAULT_MAX_BYTES: u64 = 128 << 20;
/// Lines or bytes that make the shipper send a batch before its interval is over.
const BATCH_LINES: usize = 5_000;
const BATCH_BYTES: usize = 1 << 20;
const SHIP_EVERY: Duration = Duration::from_millis(500);

/// One line read from the process.
#[derive(Debug, Clone)]
struct Captured {
    seq: u64,
    time_ms: i64,
    step: Option<i64>,
    stream: ConsoleStream,
    line: String,
}

/// The byte cap: the first half of `max_bytes` is shipped as it comes, then the last lines are
/// kept in a ring of the other half, shipped at the end after a line saying what was left out.
#[derive(Debug, Default)]
struct Cap {
    max_bytes: u64,
    head_bytes: u64,
    tail: VecDeque<Captured>,
    tail_bytes: u64,
    dropped_lines: u64,
    dropped_bytes: u64,
    last_dropped: Option<(u64, i64, Option<i64>)>,
}

#[derive(Debug, Default)]
struct Queue {
    ready: Vec<Captured>,
    ready_bytes: usize,
    next_seq: u64,
    last_time: i64,
    cap: Cap,
    captured: u64,
    closed: bool,
}

impl Queue {
    fn push(&mut self, stream: ConsoleStream, line: String, step: Option<i64>) {
        // Each process's lines are in time order, whatever the clock does.
        let time_ms = crate::now_ms().max(self.last_time);
        self.last_time = time_ms;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.captured += 1;
        let len = line.len() as u64 + 1;
        let captured = Captured { seq, time_ms, step, stream, line };
        let cap = &mut self.cap;
        if cap.head_bytes + len <= cap.max_bytes / 2 {
            cap.head_bytes += len;
            self.ready_bytes += len as usize;
            self.ready.push(captured);
            return;
        }
        cap.tail_bytes += len;
        cap.tail.push_back(captured);
        while cap.tail_bytes > cap.max_bytes / 2 {
            let Some(gone) = cap.tail.pop_front() else { break };
            cap.tail_bytes -= gone.line.len() as u64 + 1;
            cap.dropped_lines += 1;
            cap.dropped_bytes += gone.line.len() as u64 + 1;
            cap.last_dropped = Some((gone.seq, gone.time_ms, gone.step));
        }
    }

    /// At the end: the line marking what the cap left out, then the kept tail.
    fn release_tail(&mut self) {
        let cap = &mut self.cap;
        if let Some((seq, time_ms, step)) = cap.last_dropped.take() {
            let line = format!(
                "[trainlog: {} lines ({} bytes) left out here: this process printed more than its console cap of {} bytes]",
                cap.dropped_lines, cap.dropped_bytes, cap.max_bytes
            );
            self.ready.push(Captured { seq, time_ms, step, stream: ConsoleStream::Stderr, line });
        }
        self.ready.extend(cap.tail.drain(..));
        cap.tail_bytes = 0;
    }
}

struct Buffer {
    queue: Mutex<Queue>,
    wake: Condvar,
}

/// What a process's capture counted, for the finish summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsoleCounts {
    /// Lines read from the process.
    pub lines: u64,
    /// Lines the byte cap left out.
    pub dropped: u64,
}

/// A running capture; `stop` ends it.
pub struct Capture {
    inner: Arc<Buffer>,
    shipper: Option<std::thread::JoinHandle<()>>,
    #[cfg(unix)]
    streams: Vec<(tee::Redirected, std::sync::mpsc::Receiver<()>)>,
}

/// What the shipper needs to label and send lines.
pub(crate) struct Labels {
    pub process: String,
    pub rank: u32,
    pub node: String,
    /// The job's attempt this process is in now (the server may answer it after the start).
    pub attempt: Arc<dyn Fn() -> i64 + Send + Sync>,
    pub step: Arc<AtomicI64>,
}

impl Capture {
    /// Starts teeing stdout and stderr; a stream that cannot be redirected is left alone and
    /// reported. None while another run of this process captures them: a process has one
    /// stdout, and its lines go to the run that took it first.
    pub(crate) fn start(shared: Arc<Shared>, labels: Labels, max_bytes: u64) -> Option<Capture> {
        if CAPTURING.swap(true, Ordering::SeqCst) {
            return None;
        }
        let inner = Arc::new(Buffer {
            queue: Mutex::new(Queue { cap: Cap { max_bytes, ..Cap::default() }, ..Queue::default() }),
            wake: Condvar::new(),
        });
        #[cfg(unix)]
        let streams = {
            let mut streams = Vec::new();
            for (fd, stream) in [(1, ConsoleStream::Stdout), (2, ConsoleStream::Stderr)] {
                match start_reader(fd, stream, inner.clone(), labels.step.clone()) {
                    Ok(s) => streams.push(s),
                    Err(e) => shared.report_problem(format!("the console's {} is not captured: {e}", stream.as_str())),
                }
            }
            streams
        };
        let ship = inner.clone();
        let shipper = std::thread::Builder::new()
            .name("trainlog-console".into())
            .spawn(move || ship_loop(&ship, &shared, &labels))
            .ok();
        Some(Capture {
            inner,
            shipper,
            #[cfg(unix)]
            streams,
        })
    }

    /// Points stdout and stderr back where they went, waits (at most `wait`) for the lines
    /// still in the pipes, then ships everything left, the cap's tail included. A child process
    /// that still holds the pipe keeps printing to the terminal through the reader thread.
    pub fn stop(mut self, wait: Duration) -> ConsoleCounts {
        #[cfg(unix)]
        {
            for (r, _) in &self.streams {
                tee::restore(r);
            }
            let until = Instant::now() + wait;
            for (_, done) in &self.streams {
                let _ = done.recv_timeout(until.saturating_duration_since(Instant::now()));
            }
        }
        let counts = {
            let mut q = lock(&self.inner.queue);
            q.release_tail();
            q.closed = true;
            ConsoleCounts { lines: q.captured, dropped: q.cap.dropped_lines }
        };
        self.inner.wake.notify_all();
        if let Some(t) = self.shipper.take() {
            let _ = t.join();
        }
        CAPTURING.store(false, Ordering::SeqCst);
        counts
    }
}

#[cfg(unix)]
fn start_reader(
    fd: i32,
    stream: ConsoleStream,
    inner: Arc<Buffer>,
    step: Arc<AtomicI64>,
) -> std::io::Result<(tee::Redirected, std::sync::mpsc::Receiver<()>)> {
    use std::os::fd::AsRawFd;
    let redirected = tee::redirect(fd)?;
    let (read_end, saved) = (redirected.read_end.try_clone()?, redirected.saved.try_clone()?);
    let (done_tx, done) = std::sync::mpsc::channel();
    let started = std::thread::Builder::new().name(format!("trainlog-{}", stream.as_str())).spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        let mut splitter = LineSplitter::default();
        let mut terminal = true;
        let current_step = || Some(step.load(Ordering::Relaxed)).filter(|&s| s != i64::MIN);
        loop {
            let n = tee::read(read_end.as_raw_fd(), &mut buf);
            if n == 0 {
                break;
            }
            terminal = terminal && tee::write_all(saved.as_raw_fd(), &buf[..n]);
            let mut lines = Vec::new();
            splitter.feed(&buf[..n], |l| lines.push(l));
            if !lines.is_empty() {
                let step = current_step();
                let mut q = lock(&inner.queue);
                if q.closed {
                    continue;
                }
                for l in lines {
                    q.push(stream, l, step);
                }
                let full = q.ready.len() >= BATCH_LINES || q.ready_bytes >= BATCH_BYTES;
                drop(q);
                if full {
                    inner.wake.notify_one();
                }
            }
        }
        if let Some(l) = splitter.finish() {
            let mut q = lock(&inner.queue);
            if !q.closed {
                q.push(stream, l, current_step());
            }
        }
        let _ = done_tx.send(());
    });
    if let Err(e) = started {
        tee::restore(&redirected);
        return Err(e);
    }
    Ok((redirected, done))
}

/// Takes ready lines every `SHIP_EVERY` (sooner when a batch is full), masks secrets, and hands
/// them to the sender as `logs` requests; returns once the capture is closed and emptied.
fn ship_loop(inner: &Buffer, shared: &Shared, labels: &Labels) {
    loop {
        let (ready, closed) = {
            let mut q = lock(&inner.queue);
            let started = Instant::now();
            while !q.closed && q.ready.len() < BATCH_LINES && q.ready_bytes < BATCH_BYTES {
                let left = SHIP_EVERY.saturating_sub(started.elapsed());
                if left.is_zero() {
                    break;
                }
                q = inner.wake.wait_timeout(q, left).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0);
            }
            q.ready_bytes = 0;
            (std::mem::take(&mut q.ready), q.closed)
        };
        for batch in chunks(ready) {
            shared.enqueue_request(request(labels, batch));
        }
        if closed {
            return;
        }
    }
}

/// Lines in batches of at most `BATCH_LINES` lines and about `BATCH_BYTES` bytes.
fn chunks(lines: Vec<Captured>) -> Vec<Vec<Captured>> {
    let mut out: Vec<Vec<Captured>> = Vec::new();
    let mut bytes = 0;
    for l in lines {
        let len = l.line.len() + 64;
        match out.last_mut() {
            Some(last) if last.len() < BATCH_LINES && bytes + len <= BATCH_BYTES => {
                bytes += len;
                last.push(l);
            }
            _ => {
                bytes = len;
                out.push(vec![l]);
            }
        }
    }
    out
}

/// A `logs` request of the sender. The lines are masked together, so a secret split over
/// lines (a private key) is masked too.
fn request(labels: &Labels, batch: Vec<Captured>) -> Value {
    let joined: String = batch.iter().map(|l| l.line.as_str()).collect::<Vec<_>>().join("\n");
    let (masked, _) = crate::collect::redact::redact_text(&joined);
    let texts: Vec<&str> = masked.split('\n').collect();
    let same_shape = texts.len() == batch.len();
    let lines: Vec<Value> = batch
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let text = if same_shape { texts[i].to_owned() } else { crate::collect::redact::redact_text(&l.line).0 };
            json!({"seq": l.seq, "time": l.time_ms, "step": l.step, "stream": l.stream.as_str(), "text": text})
        })
        .collect();
    json!({"op": "logs", "body": {
        "process": labels.process,
        "rank": labels.rank,
        "node": labels.node,
        "attempt": (labels.attempt)(),
        "lines": lines,
    }})
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_cap_the_middle_is_left_out_with_a_line_that_counts_it() {
        let mut q = Queue { cap: Cap { max_bytes: 100, ..Cap::default() }, ..Queue::default() };
        for i in 0..30 {
            q.push(ConsoleStream::Stdout, format!("line {i:02}"), Some(i));
        }
        let head: Vec<u64> = q.ready.iter().map(|l| l.seq).collect();
        assert_eq!(head, (0..6).collect::<Vec<_>>(), "8 bytes a line, 50 bytes of head");
        q.release_tail();
        let marker = &q.ready[6];
        assert!(marker.line.contains("18 lines (144 bytes) left out"), "{}", marker.line);
        let tail: Vec<u64> = q.ready[7..].iter().map(|l| l.seq).collect();
        assert_eq!(tail, (24..30).collect::<Vec<_>>());
        assert_eq!(marker.seq, 23);
        assert_eq!(q.captured, 30);
    }

    #[test]
    fn secrets_are_masked_and_lines_keep_their_places() {
        let labels = Labels {
            process: "p".into(),
            rank: 0,
            node: "n".into(),
            attempt: Arc::new(|| 2),
            step: Arc::new(AtomicI64::new(0)),
        };
        let batch = vec![
            Captured {
                seq: 0,
                time_ms: 1,
                step: None,
                stream: ConsoleStream::Stdout,
                line: "export AWS_SECRET_ACCESS_KEY=abcdefghijklmnop1234".into(),
            },
            Captured { seq: 1, time_ms: 2, step: Some(3), stream: ConsoleStream::Stderr, line: "fine".into() },
        ];
        let r = request(&labels, batch);
        let lines = r["body"]["lines"].as_array().unwrap();
        assert!(!lines[0]["text"].as_str().unwrap().contains("abcdefghijklmnop1234"), "{}", lines[0]);
        assert_eq!(lines[1]["text"], "fine");
        assert_eq!(lines[1]["step"], 3);
        assert_eq!(lines[1]["stream"], "stderr");
        assert_eq!(r["body"]["attempt"], 2);
    }
}
