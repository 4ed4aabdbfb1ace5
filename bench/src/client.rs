//! Async HTTP drivers for the benchmarks: concurrent ingest of pre-encoded bodies, sequential
//! latency sampling of GET requests, and bulk creation of runs for the search benchmark.

use std::time::{Duration, Instant};

pub const ARROW: &str = "application/vnd.apache.arrow.stream";
pub const JSON: &str = "application/json";

/// The key clients send, for a server run with `--auth` (`TRAINLOG_BENCH_AUTH=1`).
static API_KEY: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Clients made from now on send `key`.
pub fn use_api_key(key: Option<String>) {
    *API_KEY.lock().unwrap_or_else(|p| p.into_inner()) = key;
}

pub fn client() -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(key) = API_KEY.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
        headers.insert(
            reqwest::header::AUTHORIZATION,
            reqwest::header::HeaderValue::from_str(&format!("Bearer {key}")).expect("a key fits a header"),
        );
    }
    reqwest::Client::builder()
        .default_headers(headers)
        .timeout(Duration::from_secs(120))
        .pool_max_idle_per_host(4)
        .build()
        .expect("an async HTTP client")
}

/// Result of a concurrent ingest.
pub struct Ingest {
    pub points: u64,
    pub requests: u64,
    pub body_bytes: u64,
    pub elapsed: Duration,
    /// Per-request latency (send to ack, retries included), milliseconds, all clients.
    pub latencies_ms: Vec<f64>,
    /// Sends answered 503 (the server's buffer at its bound) and sent again.
    pub refused: u64,
}

/// One client's work: its run's metrics URL and its pre-encoded bodies with their point counts.
pub struct ClientWork {
    pub url: String,
    pub bodies: Vec<(Vec<u8>, usize)>,
}

/// Sends every client's bodies in order, one request in flight per client, all clients at
/// once; times from the first send to the last acknowledgement.
pub async fn ingest(work: Vec<ClientWork>, content_type: &'static str) -> Ingest {
    let clients: Vec<reqwest::Client> = work.iter().map(|_| client()).collect();
    let body_bytes: u64 = work.iter().flat_map(|w| w.bodies.iter()).map(|(b, _)| b.len() as u64).sum();
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(work.len());
    for (w, http) in work.into_iter().zip(clients) {
        tasks.push(tokio::spawn(async move {
            let mut points = 0u64;
            let mut lat = Vec::with_capacity(w.bodies.len());
            let mut refused = 0u64;
            for (body, n) in w.bodies {
                let body = bytes::Bytes::from(body);
                let t = Instant::now();
                // A 503 says the server's buffer is at its bound: send the same batch again soon,
                // as the SDKs do (they wait for Retry-After; a load generator waits less).
                let bound = 10_000;
                for attempt in 0..=bound {
                    let resp = http
                        .post(&w.url)
                        .header("content-type", content_type)
                        .body(body.clone())
                        .send()
                        .await
                        .expect("the metrics POST reaches the server");
                    let status = resp.status();
                    let text = resp.text().await.expect("the metrics POST answers");
                    if status == reqwest::StatusCode::SERVICE_UNAVAILABLE && attempt < bound {
                        refused += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                    assert!(status.is_success(), "POST {} answered {status}: {text}", w.url);
                    break;
                }
                lat.push(t.elapsed().as_secs_f64() * 1e3);
                points += n as u64;
            }
            (points, lat, refused)
        }));
    }
    let mut points = 0;
    let mut latencies_ms = Vec::new();
    let mut refused = 0;
    for t in tasks {
        let (p, l, r) = t.await.expect("an ingest task finishes");
        points += p;
        latencies_ms.extend(l);
        refused += r;
    }
    let elapsed = started.elapsed();
    Ingest { points, requests: latencies_ms.len() as u64, body_bytes, elapsed, latencies_ms, refused }
}

/// One timed GET: milliseconds to the last byte of the body, and the body.
pub async fn timed_get(http: &reqwest::Client, url: &str) -> (f64, Vec<u8>) {
    let t = Instant::now();
    let resp = http.get(url).send().await.expect("the GET reaches the server");
    let status = resp.status();
    let body = resp.bytes().await.expect("the GET answers a body");
    let ms = t.elapsed().as_secs_f64() * 1e3;
    assert!(status.is_success(), "GET {url} answered {status}: {}", String::from_utf8_lossy(&body));
    (ms, body.to_vec())
}

/// A timed GET that reports failure (including a timeout) instead of panicking.
pub async fn try_timed_get(http: &reqwest::Client, url: &str, timeout: Duration) -> Result<(f64, usize), String> {
    let t = Instant::now();
    let resp = http
        .get(url)
        .timeout(timeout)
        .send()
        .await
        .map_err(|e| format!("{e} after {:.1} s", t.elapsed().as_secs_f64()))?;
    let status = resp.status();
    let body = resp.bytes().await.map_err(|e| format!("{e} after {:.1} s", t.elapsed().as_secs_f64()))?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    if !status.is_success() {
        return Err(format!("answered {status}: {}", String::from_utf8_lossy(&body)));
    }
    Ok((ms, body.len()))
}

/// `reps` sequential timed GETs after the caller's warm-up; answers the latencies in ms.
pub async fn sample(http: &reqwest::Client, url: &str, reps: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(reps);
    for _ in 0..reps {
        out.push(timed_get(http, url).await.0);
    }
    out
}

pub async fn post_json(http: &reqwest::Client, url: &str, body: String) -> serde_json::Value {
    let resp =
        http.post(url).header("content-type", JSON).body(body).send().await.expect("the POST reaches the server");
    let status = resp.status();
    let text = resp.text().await.expect("the POST answers");
    assert!(status.is_success(), "POST {url} answered {status}: {text}");
    serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text))
}

/// Creates `n` runs in `project`, each with 10 params (`p0`…`p9`) and 5 metrics (`m0`…`m4`, one
/// point each), over `tasks` concurrent tasks: the answer a runs table or `Api().runs()` reads.
pub async fn create_wide_runs(api: String, project: &'static str, n: usize, tasks: usize) -> Duration {
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let api = api.clone();
            tokio::spawn(async move {
                let http = client();
                for i in (t..n).step_by(tasks) {
                    let params: Vec<String> = (0..10)
                        .map(|k| {
                            if k % 2 == 0 {
                                format!(r#""p{k}":{}"#, i * 10 + k)
                            } else {
                                format!(r#""p{k}":"v{}""#, (i + k) % 7)
                            }
                        })
                        .collect();
                    let body =
                        format!(r#"{{"project":"{project}","name":"wide-{i:05}","params":{{{}}}}}"#, params.join(","));
                    let run = post_json(&http, &format!("{api}/runs"), body).await;
                    let id = run["id"].as_str().expect("the created run has an id").to_owned();
                    let points: Vec<String> = (0..5)
                        .map(|k| format!(r#"{{"key":"m{k}","step":0,"value":{:?}}}"#, (i * 5 + k) as f64 / 7.0))
                        .collect();
                    post_json(
                        &http,
                        &format!("{api}/runs/{id}/metrics"),
                        format!(r#"{{"points":[{}]}}"#, points.join(",")),
                    )
                    .await;
                }
            })
        })
        .collect();
    for h in handles {
        h.await.expect("a run-creating task panicked");
    }
    started.elapsed()
}

/// A timed GET with an `Accept` header, answering the time and the body's size.
pub async fn timed_get_accept(http: &reqwest::Client, url: &str, accept: &str) -> (f64, usize) {
    let t = Instant::now();
    let resp = http.get(url).header("accept", accept).send().await.expect("the GET reaches the server");
    let status = resp.status();
    let body = resp.bytes().await.expect("the GET answers a body");
    let ms = t.elapsed().as_secs_f64() * 1e3;
    assert!(status.is_success(), "GET {url} answered {status}: {}", String::from_utf8_lossy(&body));
    (ms, body.len())
}

/// `timed_get_accept`, with the server's own time from its `Server-Timing: app;dur=MS` header:
/// (client ms, server ms, body bytes).
pub async fn timed_get_server(http: &reqwest::Client, url: &str, accept: &str) -> (f64, f64, usize) {
    let t = Instant::now();
    let resp = http.get(url).header("accept", accept).send().await.expect("the GET reaches the server");
    let status = resp.status();
    let server_ms = resp
        .headers()
        .get("server-timing")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split("dur=").nth(1))
        .and_then(|v| v.split([',', ';']).next())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .expect("the answer says the server's time in Server-Timing");
    let body = resp.bytes().await.expect("the GET answers a body");
    let ms = t.elapsed().as_secs_f64() * 1e3;
    assert!(status.is_success(), "GET {url} answered {status}: {}", String::from_utf8_lossy(&body));
    (ms, server_ms, body.len())
}

/// Learning rates the search runs are spread over.
pub const LRS: [f64; 4] = [0.1, 0.01, 0.001, 0.0001];

/// Creates `n` runs in `project` over `tasks` concurrent tasks, each with params (lr, batch
/// size, optimizer) and `points` val_loss points whose last value lies between 0.1 and 0.6.
/// Answers the elapsed time and how many runs have lr = 0.001 and a last val_loss < 0.3.
pub async fn create_search_runs(
    api: String,
    project: &'static str,
    n: usize,
    tasks: usize,
    points: usize,
) -> (Duration, usize) {
    let started = Instant::now();
    let mut handles = Vec::with_capacity(tasks);
    for t in 0..tasks {
        let api = api.clone();
        handles.push(tokio::spawn(async move {
            let http = client();
            let mut matching = 0usize;
            let mut rng = crate::data::XorShift::new(1_000 + t as u64);
            for i in (t..n).step_by(tasks) {
                let lr = LRS[i % LRS.len()];
                let batch = [32, 64, 128][i % 3];
                let body = format!(
                    r#"{{"project":"{project}","name":"sweep-{i:05}","params":{{"lr":{lr},"batch_size":{batch},"optimizer":"adamw","model":{{"layers":{},"dropout":0.1}}}},"tags":{{"sweep":"s1"}}}}"#,
                    4 + i % 8
                );
                let run = post_json(&http, &format!("{api}/runs"), body).await;
                let id = run["id"].as_str().expect("the created run has an id").to_owned();
                let last = 0.1 + 0.5 * rng.unit();
                let mut pts = String::from(r#"{"points":["#);
                for s in 0..points {
                    let v = last + 0.3 * (points - 1 - s) as f64 / points as f64;
                    if s > 0 {
                        pts.push(',');
                    }
                    pts.push_str(&format!(r#"{{"key":"val_loss","step":{},"value":{v:?}}}"#, s * 1000));
                }
                pts.push_str("]}");
                post_json(&http, &format!("{api}/runs/{id}/metrics"), pts).await;
                if lr == 0.001 && last < 0.3 {
                    matching += 1;
                }
            }
            matching
        }));
    }
    let mut matching = 0;
    for h in handles {
        matching += h.await.expect("a run-creating task finishes");
    }
    (started.elapsed(), matching)
}
