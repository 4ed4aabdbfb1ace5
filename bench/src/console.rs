//! Metric ingest while a job's 64 ranks send their console lines: the same pre-encoded Arrow
//! batches sent by 10 clients on a fresh server, alone and with 64 ranks each sending 1,000
//! lines a second (a batch of 500 every half second, as the SDK ships them).

use crate::client::{self, ClientWork, ARROW};
use crate::data::{self, Precision};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use trainlog_tests::TestServer;

pub const RANKS: usize = 64;
pub const LINES_PER_BATCH: usize = 500;
pub const SHIP_EVERY: Duration = Duration::from_millis(500);

/// One measurement: metric points per second, and console lines acknowledged per second meanwhile.
pub struct Outcome {
    pub points_per_s: f64,
    pub lines_per_s: f64,
}

/// A batch of 500 lines of one rank, written straight as JSON text: the load generator should
/// cost little beside the server it measures.
fn lines_body(rank: usize, seq: u64) -> Vec<u8> {
    use std::fmt::Write;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    let mut body = String::with_capacity(LINES_PER_BATCH * 160);
    let _ = write!(body, r#"{{"process":"rank{rank}","rank":{rank},"node":"node-{}","attempt":1,"lines":["#, rank / 8);
    for i in 0..LINES_PER_BATCH as u64 {
        let n = seq + i;
        if i > 0 {
            body.push(',');
        }
        let _ = write!(
            body,
            r#"{{"seq":{n},"time":{now},"step":{},"stream":"stdout","text":"step {n:07} | loss 0.{n:05} | lr 3.0e-04 | tokens/s 123456 | grad_norm 1.2345 | rank {rank}"}}"#,
            n / 100
        );
    }
    body.push_str("]}");
    body.into_bytes()
}

/// Ingests `clients` × `batches` Arrow batches of `steps` steps on `server`; with `ranks`, 64
/// ranks send console lines to a run of their own from a second before until the end.
pub fn measure(
    rt: &tokio::runtime::Runtime,
    server: &TestServer,
    clients: usize,
    batches: usize,
    steps: usize,
    ranks: bool,
) -> Outcome {
    let runs: Vec<String> =
        (0..clients).map(|c| server.create_run("bench-console", &format!("client-{c:02}"))).collect();
    let work: Vec<ClientWork> = runs
        .iter()
        .enumerate()
        .map(|(c, id)| ClientWork {
            url: server.api(&format!("/runs/{id}/metrics")),
            bodies: data::client_batches(c as u64, Precision::Tensor32, batches, steps)
                .into_iter()
                .map(|rows| (rows.arrow(), rows.len()))
                .collect(),
        })
        .collect();
    let ranks = ranks.then(|| Ranks::start(server, "job of 64 ranks"));
    if ranks.is_some() {
        std::thread::sleep(Duration::from_secs(1));
    }
    let (lines0, started) = (ranks.as_ref().map_or(0, Ranks::lines), Instant::now());
    let ingested = rt.block_on(client::ingest(work, ARROW));
    let lines_sent = ranks.as_ref().map_or(0, Ranks::lines) - lines0;
    let took = started.elapsed().as_secs_f64();
    if let Some(r) = ranks {
        r.stop();
    }
    Outcome {
        points_per_s: ingested.points as f64 / ingested.elapsed.as_secs_f64(),
        lines_per_s: lines_sent as f64 / took,
    }
}

/// CPU seconds per million console lines, of the server and of the process sending them (this
/// one), and the lines per second: 64 ranks send for `seconds` on a server doing nothing else.
pub struct LinesCpu {
    pub server: f64,
    pub sender: f64,
    pub lines_per_s: f64,
}

pub fn cpu_per_million_lines(server: &TestServer, seconds: u64) -> LinesCpu {
    let (pid, own) = (server.pid().expect("the server runs").to_string(), std::process::id().to_string());
    let (server0, own0) = (crate::measure::cpu_seconds(&pid), crate::measure::cpu_seconds(&own));
    let ranks = Ranks::start(server, "lines only");
    std::thread::sleep(Duration::from_secs(seconds));
    let n = ranks.lines() as f64;
    let (server1, own1) = (crate::measure::cpu_seconds(&pid), crate::measure::cpu_seconds(&own));
    ranks.stop();
    LinesCpu { server: (server1 - server0) / n * 1e6, sender: (own1 - own0) / n * 1e6, lines_per_s: n / seconds as f64 }
}

/// Metric batches at a steady pace, alone or beside the 64 ranks: each of `clients` clients
/// sends a batch of `steps` steps every `every`; answers every batch's latency, ms.
pub fn paced_latencies(
    rt: &tokio::runtime::Runtime,
    server: &TestServer,
    clients: usize,
    batches: usize,
    steps: usize,
    every: Duration,
    ranks: bool,
) -> Vec<f64> {
    let ranks = ranks.then(|| Ranks::start(server, "job of 64 ranks"));
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let id = server.create_run("bench-console", &format!("paced-{c:02}"));
            let url = server.api(&format!("/runs/{id}/metrics"));
            let bodies: Vec<Vec<u8>> = data::client_batches(c as u64, Precision::Tensor32, batches, steps)
                .into_iter()
                .map(|rows| rows.arrow())
                .collect();
            rt.spawn(async move {
                let http = client::client();
                let mut next = tokio::time::Instant::now();
                let mut latencies = Vec::with_capacity(bodies.len());
                for body in bodies {
                    let t = Instant::now();
                    let answer = http
                        .post(&url)
                        .header("content-type", ARROW)
                        .body(body)
                        .send()
                        .await
                        .expect("the metrics POST reaches the server");
                    assert!(answer.status().is_success(), "metrics POST answered {}", answer.status());
                    latencies.push(t.elapsed().as_secs_f64() * 1e3);
                    next += every;
                    tokio::time::sleep_until(next).await;
                }
                latencies
            })
        })
        .collect();
    let latencies = tasks.into_iter().flat_map(|t| rt.block_on(t).expect("a paced client ends")).collect();
    if let Some(r) = ranks {
        r.stop();
    }
    latencies
}

/// 64 ranks sending console lines to a run of their own until stopped. They stand for other
/// machines, so they run on threads of their own: a body they build never holds up a metric
/// client's task.
struct Ranks {
    rt: tokio::runtime::Runtime,
    stop: Arc<AtomicBool>,
    lines: Arc<AtomicU64>,
    senders: Vec<tokio::task::JoinHandle<()>>,
}

impl Ranks {
    fn start(server: &TestServer, name: &str) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("ranks")
            .enable_all()
            .build()
            .expect("a runtime for the ranks");
        let job = server.create_run("bench-console", name);
        let (stop, lines) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let senders = (0..RANKS)
            .map(|rank| {
                let (url, stop, lines) = (server.api(&format!("/runs/{job}/logs")), stop.clone(), lines.clone());
                rt.spawn(async move {
                    let http = client::client();
                    // Each process ships on its own clock, from its own start.
                    let phase = SHIP_EVERY * rank as u32 / RANKS as u32;
                    let (mut seq, mut next) = (0u64, tokio::time::Instant::now() + phase);
                    tokio::time::sleep_until(next).await;
                    while !stop.load(Ordering::Relaxed) {
                        let answer = http
                            .post(&url)
                            .header("content-type", "application/json")
                            .body(lines_body(rank, seq))
                            .send()
                            .await
                            .expect("the logs POST reaches the server");
                        assert!(answer.status().is_success(), "logs POST answered {}", answer.status());
                        seq += LINES_PER_BATCH as u64;
                        lines.fetch_add(LINES_PER_BATCH as u64, Ordering::Relaxed);
                        next += SHIP_EVERY;
                        tokio::time::sleep_until(next).await;
                    }
                })
            })
            .collect();
        Ranks { rt, stop, lines, senders }
    }

    fn lines(&self) -> u64 {
        self.lines.load(Ordering::Relaxed)
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for s in self.senders {
            self.rt.block_on(s).expect("a rank's sender ends");
        }
    }
}
