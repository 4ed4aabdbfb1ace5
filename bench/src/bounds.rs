//! The worst reads the server's budgets allow (`trainlog-bench --bounds`): a metrics query of
//! as many points as one query may read, a page of MLflow's metric history from the longest
//! series, a page of a table at its budget in values (JSON, and whole as Arrow), and a media
//! blob at its size cap; one run's series at the points a read answers one by one; the largest
//! bodies the MLflow door, histograms and media items take, and bodies refused as they parse. Each
//! prints its time, the server's peak resident memory during it (the peak is reset before each),
//! and the health check's latency, polled throughout on a connection of its own. The reported
//! attack (one run named 5,000 times) is timed beside them.

use crate::measure::{hwm_mib, percentile, rss_mib};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use trainlog_tests::{arrow_stream, json, TestServer, Value};

/// The budgets the server is run with.
pub struct Budgets {
    /// Points one metrics query may read (`TRAINLOG_MAX_QUERY_POINTS`; the server's own is 50,000,000).
    pub query_points: u64,
    /// Points in each run of the metrics query.
    pub points_per_run: u64,
}

impl Budgets {
    pub fn new(quick: bool) -> Self {
        if quick {
            Self { query_points: 5_000_000, points_per_run: 500_000 }
        } else {
            Self { query_points: 50_000_000, points_per_run: 1_000_000 }
        }
    }
}

/// One worst read's figures.
pub struct Worst {
    pub name: String,
    pub seconds: f64,
    pub peak_rss_mib: f64,
    pub rss_before_mib: f64,
    pub health_p99_ms: f64,
    pub health_max_ms: f64,
    pub health_samples: usize,
    pub status: u16,
}

/// Polls `GET /api/v1/health` on a connection of its own until stopped; the latencies in ms.
struct HealthPoller {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<f64>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HealthPoller {
    fn start(url: &str) -> Self {
        let (stop, samples) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(Vec::new())));
        let (flag, into, url) = (stop.clone(), samples.clone(), format!("{url}/api/v1/health"));
        let thread = std::thread::spawn(move || {
            let client =
                reqwest::blocking::Client::builder().timeout(Duration::from_secs(120)).build().expect("an HTTP client");
            while !flag.load(Ordering::Relaxed) {
                let started = Instant::now();
                if client.get(&url).send().is_ok_and(|r| r.status().is_success()) {
                    let ms = started.elapsed().as_secs_f64() * 1000.0;
                    into.lock().unwrap_or_else(|p| p.into_inner()).push(ms);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        Self { stop, samples, thread: Some(thread) }
    }

    fn finish(mut self) -> Vec<f64> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        samples.clone()
    }
}

/// Resets the process's peak resident memory to its current value (Linux `clear_refs` 5).
fn reset_peak(pid: u32) {
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
}

/// Times `read` with the health check polled throughout and the server's peak memory reset first.
fn measure(s: &TestServer, name: &str, read: impl FnOnce() -> u16) -> Worst {
    let pid = s.pid().expect("the server's pid");
    reset_peak(pid);
    let before = rss_mib(pid);
    let poller = HealthPoller::start(&s.url);
    std::thread::sleep(Duration::from_millis(50));
    let started = Instant::now();
    let status = read();
    let seconds = started.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(50));
    let samples = poller.finish();
    let peak = hwm_mib(pid);
    println!("  {name}: {seconds:.3} s, status {status}, peak RSS {peak:.0} MiB (from {before:.0})");
    Worst {
        name: name.to_owned(),
        seconds,
        peak_rss_mib: peak,
        rss_before_mib: before,
        health_p99_ms: if samples.is_empty() { f64::NAN } else { percentile(&samples, 99.0) },
        health_max_ms: samples.iter().copied().fold(f64::NAN, f64::max),
        health_samples: samples.len(),
        status,
    }
}

fn post(s: &TestServer, path: &str, content_type: &str, body: Vec<u8>) -> (u16, Value) {
    s.post_raw(path, content_type, body)
}

/// Logs `points` points of `loss` to a new run in batches of at most 1,000,000.
fn run_with_points(s: &TestServer, name: &str, points: u64) -> String {
    let run = s.create_run("bounds", name);
    let mut from = 0u64;
    while from < points {
        let to = (from + 1_000_000).min(points);
        let steps: Vec<i64> = (from as i64..to as i64).collect();
        let values: Vec<f64> = steps.iter().map(|&s| 1.0 / (s as f64 + 1.0)).collect();
        let keys = vec!["loss"; steps.len()];
        let batch = arrow_stream(&keys, &steps, &values, None);
        // A full buffer answers 503 until the store has written it out: send the batch again.
        loop {
            let (status, body) =
                post(s, &format!("/runs/{run}/metrics"), "application/vnd.apache.arrow.stream", batch.clone());
            match status {
                200 => break,
                503 => std::thread::sleep(Duration::from_millis(200)),
                _ => panic!("logging points answered {status}: {body}"),
            }
        }
        from = to;
    }
    run
}

/// An Arrow IPC stream of `columns` float64 columns of `rows` rows.
fn float_table(columns: usize, rows: usize) -> Vec<u8> {
    use arrow_array::{ArrayRef, Float64Array, RecordBatch};
    let values: ArrayRef = Arc::new(Float64Array::from_iter_values((0..rows).map(|r| r as f64 * 0.5)));
    let batch = RecordBatch::try_from_iter((0..columns).map(|c| (format!("c{c}"), values.clone()))).expect("a batch");
    let mut body = Vec::new();
    let mut writer = arrow_ipc::writer::StreamWriter::try_new(&mut body, &batch.schema()).expect("a writer");
    writer.write(&batch).expect("write");
    writer.finish().expect("finish");
    drop(writer);
    body
}

/// Runs every worst read and answers their figures. The quick mode lowers the metrics budget
/// (through `TRAINLOG_MAX_QUERY_POINTS`) so that the query at it needs fewer points logged.
pub fn run(quick: bool) -> Vec<Worst> {
    let budgets = Budgets::new(quick);
    let budget = budgets.query_points.to_string();
    let s = TestServer::spawn_local_with_env(&[], &[("TRAINLOG_MAX_QUERY_POINTS", &budget)]);
    let runs_needed = budgets.query_points / budgets.points_per_run;
    println!(
        "worst allowed reads: a metrics query of {} points ({runs_needed} runs of {}), one MLflow history page, a table of 10,000,000 values, a 64 MiB media blob",
        budgets.query_points, budgets.points_per_run
    );
    let started = Instant::now();
    let runs: Vec<String> =
        (0..runs_needed).map(|i| run_with_points(&s, &format!("long-{i}"), budgets.points_per_run)).collect();
    s.flush();
    println!("  (set-up: {} points logged in {:.1} s)", budgets.query_points, started.elapsed().as_secs_f64());
    let mut out = Vec::new();

    // 1. The metrics query at its budget, then the same runs and one more: refused before reading.
    let body = json!({"key": "loss", "buckets": 1000, "runs": runs});
    out.push(measure(&s, "metrics query at the points budget", || s.post("/metrics/query", &body).0));
    let half = runs.len() / 2;
    let body = json!({"key": "loss", "buckets": 1000, "groups": {"a": runs[..half], "b": runs[half..]}});
    out.push(measure(&s, "grouped metrics query at the points budget (2 groups)", || {
        s.post("/metrics/query", &body).0
    }));
    let mut over = runs.clone();
    over.push(run_with_points(&s, "one-more", 1000));
    let body = json!({"key": "loss", "buckets": 1000, "runs": over});
    out.push(measure(&s, "metrics query one run past the budget (refused)", || s.post("/metrics/query", &body).0));
    // The reported attack: one long run named 5,000 times.
    let body = json!({"key": "loss", "buckets": 1000, "runs": vec![runs[0].clone(); 5_000]});
    out.push(measure(&s, "metrics query of one run named 5,000 times", || s.post("/metrics/query", &body).0));

    // 2. MLflow's history: the last page of the longest series, with max_results as large as asked.
    let last = budgets.points_per_run.saturating_sub(25_000);
    let url = format!(
        "{}/api/2.0/mlflow/metrics/get-history?run_id={}&metric_key=loss&max_results=1000000000&page_token={last}",
        s.url, runs[0]
    );
    out.push(measure(&s, "MLflow get-history page (max_results=1e9)", || {
        s.client.get(&url).send().map(|r| r.status().as_u16()).unwrap_or(0)
    }));

    // 3. A table at its budget: two parts of 5,000 rows × 1,000 float64 columns; a page of 10,000 rows.
    let table_run = s.create_run("bounds", "table");
    for (step, mode) in [(0, "replace"), (1, "append")] {
        let (status, body) = post(
            &s,
            &format!("/runs/{table_run}/tables?key=t&step={step}&mode={mode}"),
            "application/vnd.apache.arrow.stream",
            float_table(1_000, 5_000),
        );
        assert_eq!(status, 200, "{body}");
    }
    let url = s.api(&format!("/runs/{table_run}/tables?key=t&limit=1000&offset=9000"));
    out.push(measure(&s, "table JSON page of 1,000 rows × 1,000 columns (of 10,000 rows)", || {
        s.client.get(&url).send().and_then(|r| r.bytes().map(|_| 200)).unwrap_or(0)
    }));
    let url = s.api(&format!("/runs/{table_run}/tables?key=t&format=arrow"));
    out.push(measure(&s, "table read whole as Arrow (10,000,000 values)", || {
        s.client.get(&url).send().and_then(|r| r.bytes().map(|_| 200)).unwrap_or(0)
    }));

    // 4. A media blob at the size cap, uploaded through the MLflow door, then downloaded.
    let media_run = s.create_run("bounds", "media");
    let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    png.extend_from_slice(&64u32.to_be_bytes());
    png.extend_from_slice(&64u32.to_be_bytes());
    png.resize(64 << 20, 7);
    let door = format!(
        "{}/api/2.0/mlflow-artifacts/artifacts/0/{media_run}/artifacts/images/big+step+0+timestamp+1+u.png",
        s.url
    );
    let put = s.client.put(&door).body(png).send().expect("the upload reaches the server");
    assert_eq!(put.status().as_u16(), 200);
    let (status, listed) = s.get(&format!("/runs/{media_run}/media?key=big"));
    assert_eq!(status, 200, "{listed}");
    let blob = listed.to_string();
    let sha = blob
        .split('"')
        .find(|part| part.len() == 64 && part.bytes().all(|b| b.is_ascii_hexdigit()))
        .expect("the image's blob in the listing")
        .to_owned();
    let url = s.api(&format!("/runs/{media_run}/media/blobs/{sha}"));
    out.push(measure(&s, "media blob download (64 MiB)", || {
        s.client.get(&url).send().and_then(|r| r.bytes().map(|_| 200)).unwrap_or(0)
    }));

    // 5. One run's series at the points a read answers one by one, and one point past it.
    one_run_series(&s, &mut out);
    // 6. The largest bodies the MLflow door and the media routes take, and some refused as they parse.
    door_bodies(&s, &mut out);
    media_bodies(&s, &sha, &mut out);
    out
}

/// Points `GET /runs/{id}/metrics` answers one by one at most (the server's `MAX_POINTS_ANSWERED`).
const POINTS_ANSWERED: u64 = 5_000_000;

/// `GET /runs/{id}/metrics` of a run of `POINTS_ANSWERED` points: as JSON, as Arrow and in
/// buckets; then with one point more, refused before the read.
fn one_run_series(s: &TestServer, out: &mut Vec<Worst>) {
    let run = run_with_points(s, "one-run", POINTS_ANSWERED);
    s.flush();
    let get = |query: &str, arrow: bool| {
        let mut r = s.client.get(s.api(&format!("/runs/{run}/metrics?key=loss{query}")));
        if arrow {
            r = r.header("accept", "application/vnd.apache.arrow.stream");
        }
        r.send()
            .and_then(|r| {
                let status = r.status().as_u16();
                r.bytes().map(|_| status)
            })
            .unwrap_or(0)
    };
    out.push(measure(s, "one run's series, 5,000,000 points as JSON", || get("", false)));
    out.push(measure(s, "one run's series, 5,000,000 points as Arrow", || get("", true)));
    out.push(measure(s, "one run's series, 5,000,000 points in 1,000 buckets", || get("&buckets=1000", false)));
    let (status, body) = s.log(&run, json!([{"key": "loss", "step": POINTS_ANSWERED, "value": 0.0}]));
    assert_eq!(status, 200, "{body}");
    out.push(measure(s, "one run's series one point past it, as points (refused)", || get("", false)));
}

/// `n` characters past ASCII as MLflow's Python client writes them in JSON: `\u00e9` each.
fn escaped(n: usize) -> String {
    "\\u00e9".repeat(n)
}

fn door_post(s: &TestServer, path: &str, body: Vec<u8>) -> u16 {
    s.client
        .post(format!("{}/api/2.0/mlflow{path}", s.url))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

/// The largest bodies of the MLflow door: a log-batch at MLflow's limits (100 params of 6,000
/// characters, 100 tags of 8,000 and 800 metrics, keys of 250, all past ASCII and escaped), a
/// note of 1,048,576 characters, a dataset at MLflow's limits, and a log-batch of 3,000,000
/// metrics, refused as it parses.
fn door_bodies(s: &TestServer, out: &mut Vec<Worst>) {
    let run = s.create_run("bounds", "door");
    let key = |i: usize| format!("{}{i:04}", escaped(246));
    let mut entities = Vec::new();
    for i in 0..100 {
        entities.push(("params", format!(r#"{{"key": "{}", "value": "{}"}}"#, key(i), escaped(6000))));
        entities.push(("tags", format!(r#"{{"key": "{}", "value": "{}"}}"#, key(i), escaped(8000))));
    }
    for i in 0..800 {
        let metric = format!(
            r#"{{"key": "{}", "value": -1.2345678901234567e-300, "timestamp": 1700000000000, "step": {i}}}"#,
            key(i)
        );
        entities.push(("metrics", metric));
    }
    let list =
        |name: &str| entities.iter().filter(|(n, _)| *n == name).map(|(_, e)| e.as_str()).collect::<Vec<_>>().join(",");
    let batch = format!(
        r#"{{"run_id": "{run}", "metrics": [{}], "params": [{}], "tags": [{}]}}"#,
        list("metrics"),
        list("params"),
        list("tags")
    );
    let name = format!("MLflow log-batch at MLflow's limits, escaped ({:.1} MiB)", batch.len() as f64 / 1048576.0);
    out.push(measure(s, &name, || door_post(s, "/runs/log-batch", batch.into_bytes())));
    let many = format!(r#"{{"run_id": "{run}", "metrics": [{}]}}"#, vec!["{}"; 3_000_000].join(","));
    let name = format!(
        "MLflow log-batch of 3,000,000 metrics ({:.1} MiB, refused as it parses)",
        many.len() as f64 / 1048576.0
    );
    out.push(measure(s, &name, || door_post(s, "/runs/log-batch", many.into_bytes())));
    let note = format!(r#"{{"run_id": "{run}", "key": "mlflow.note.content", "value": "{}"}}"#, escaped(1 << 20));
    let name = format!("MLflow set-tag of a 1,048,576-character note ({:.1} MiB)", note.len() as f64 / 1048576.0);
    out.push(measure(s, &name, || door_post(s, "/runs/set-tag", note.into_bytes())));
    let quotes = |n: usize| "\\\"".repeat(n);
    let inputs = format!(
        r#"{{"run_id": "{run}", "datasets": [{{"dataset": {{"name": "d", "digest": "0", "source_type": "local", "source": "{}", "schema": "{}", "profile": "{}"}}}}]}}"#,
        quotes(65_535),
        quotes(1_048_575),
        quotes(16_777_215)
    );
    let name =
        format!("MLflow log-inputs of a dataset at MLflow's limits ({:.1} MiB)", inputs.len() as f64 / 1048576.0);
    out.push(measure(s, &name, || door_post(s, "/runs/log-inputs", inputs.into_bytes())));
}

/// The largest bodies recording histograms (1,000 of 512 bins, the longest numbers and keys)
/// and media items (boxes as many as 16 MiB holds), and a histogram of 1,000,000 edges, refused
/// as it parses.
fn media_bodies(s: &TestServer, blob: &str, out: &mut Vec<Worst>) {
    let run = s.create_run("bounds", "media-bodies");
    let number = |i: usize| format!("{:.16e}", -1.7976931348623157e308 + i as f64 * 1e293);
    let edges = (0..513).map(number).collect::<Vec<_>>().join(",");
    let counts = (0..512).map(|i| format!("{:.16e}", 1.2345678901234567e300 + i as f64)).collect::<Vec<_>>().join(",");
    let histograms = (0..1000)
        .map(|step| {
            format!(
                r#"{{"key": "{}", "step": {step}, "edges": [{edges}], "counts": [{counts}], "timestamp": 1700000000000}}"#,
                escaped(250)
            )
        })
        .collect::<Vec<_>>()
        .join(",");
    let body = format!(r#"{{"histograms": [{histograms}]}}"#);
    let name = format!("histograms: 1,000 of 512 bins ({:.1} MiB)", body.len() as f64 / 1048576.0);
    let path = format!("/runs/{run}/histograms");
    out.push(measure(s, &name, || post(s, &path, "application/json", body.into_bytes()).0));
    let wide = format!(
        r#"{{"histograms": [{{"key": "h", "step": 0, "edges": [{}], "counts": [1]}}]}}"#,
        vec!["0"; 1_000_000].join(",")
    );
    out.push(measure(s, "histogram of 1,000,000 edges (refused as it parses)", || {
        post(s, &path, "application/json", wide.into_bytes()).0
    }));
    let a_box = r#"{"x_min":0,"y_min":0,"x_max":1,"y_max":1}"#;
    let boxes = vec![a_box; 10_000].join(",");
    let item = |i: usize| {
        format!(r#"{{"key":"img","step":{i},"kind":"image","blob":"{blob}","mime":"image/png","boxes":[{boxes}]}}"#)
    };
    let fits = (16 << 20) / (boxes.len() + 200);
    let body = format!(r#"{{"items": [{}]}}"#, (0..fits).map(item).collect::<Vec<_>>().join(","));
    let name = format!("media items: {fits} of 10,000 boxes ({:.1} MiB)", body.len() as f64 / 1048576.0);
    let path = format!("/runs/{run}/media");
    out.push(measure(s, &name, || post(s, &path, "application/json", body.into_bytes()).0));
}

/// The figures as a markdown table.
pub fn table(worst: &[Worst]) -> String {
    let mut t = String::from(
        "| worst allowed read | status | time (s) | server RSS before (MiB) | server peak RSS during (MiB) | health p99 (ms) | health max (ms) | health samples |\n|---|---|---|---|---|---|---|---|\n",
    );
    for w in worst {
        t.push_str(&format!(
            "| {} | {} | {:.3} | {:.0} | {:.0} | {:.1} | {:.1} | {} |\n",
            w.name,
            w.status,
            w.seconds,
            w.rss_before_mib,
            w.peak_rss_mib,
            w.health_p99_ms,
            w.health_max_ms,
            w.health_samples
        ));
    }
    t
}
