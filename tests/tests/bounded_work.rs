//! The work one request may cause is bounded before it is done: run ids named twice are read
//! once, a metrics query, one run's series and MLflow's history have a budget in points, MLflow's
//! history comes in pages, uploads through the MLflow door are checked as they arrive, the door's
//! bodies, table, histogram and media bodies are limited by size and counted as they parse, table
//! parts have a budget in values, a body that trickles in is answered 408, and the points budget
//! and the body time limit are server flags.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;
use trainlog_tests::{json, TestServer, Value};

// The limits as the README documents them.
const MAX_QUERY_BODY_BYTES: usize = 4 << 20;
const MAX_HISTORY_PAGE: usize = 25_000;
const MAX_MEDIA_ITEM_BYTES: u64 = 64 << 20;
const MAX_PART_JSON_BYTES: usize = 16 << 20;
const MAX_TABLE_COLUMNS: usize = 1_000;
const MAX_TABLE_CELLS: usize = 10_000_000;
const MAX_TABLE_PAGE_VALUES: usize = 1_000_000;

fn points(key: &str, n: i64) -> Value {
    Value::Array((0..n).map(|s| json!({"key": key, "step": s, "value": s as f64})).collect())
}

fn logged_run(s: &TestServer, name: &str, n: i64) -> String {
    let run = s.create_run("bounded", name);
    let (status, body) = s.log(&run, points("loss", n));
    assert_eq!(status, 200, "{body}");
    run
}

#[test]
fn a_run_named_many_times_is_read_and_answered_once() {
    let s = TestServer::spawn_local();
    let (a, b) = (logged_run(&s, "a", 100), logged_run(&s, "b", 10));
    let mut runs = vec![a.as_str(); 10_000];
    runs.push(b.as_str());
    runs.extend(vec![a.as_str(); 9_999]);
    let (status, body) = s.post("/metrics/query", &json!({"key": "loss", "buckets": 10, "runs": runs}));
    assert_eq!(status, 200, "{body}");
    let answered: Vec<&str> =
        body["series"].as_array().expect("series").iter().filter_map(|r| r["run_id"].as_str()).collect();
    assert_eq!(answered.len(), 2, "each run once, not {} series", answered.len());
    assert_eq!(answered, [a.as_str(), b.as_str()], "each run where it was first named");
    // The body itself is limited to what 20,000 ids need.
    let mut padded = json!({"key": "loss", "buckets": 10, "runs": [a]}).to_string().into_bytes();
    padded.resize(MAX_QUERY_BODY_BYTES + 1, b' ');
    let (status, body) = s.post_raw("/metrics/query", "application/json", padded);
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["limit"], MAX_QUERY_BODY_BYTES, "{body}");
    let listed = [a.as_str(); 500].join(",") + "," + &b;
    let (status, body) = s.get(&format!("/metrics?key=loss&runs={listed}"));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["series"].as_array().map(Vec::len), Some(2), "{}", body["series"].as_array().map_or(0, Vec::len));
}

/// Asserts an `over_budget` 400 naming `field` and stating `limit`.
fn assert_over_budget(answer: (u16, Value), field: &str, limit: u64) {
    let (status, body) = answer;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "over_budget", "{body}");
    assert_eq!(body["error"]["field"], field, "{body}");
    assert_eq!(body["error"]["limit"], limit, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(&limit.to_string()), "the message should state the limit {limit}: {message}");
}

#[test]
fn a_metrics_query_past_its_points_budget_is_refused_before_any_series_is_read() {
    let s = TestServer::spawn_local_with_env(&[], &[("TRAINLOG_MAX_QUERY_POINTS", "1000")]);
    let (a, b) = (logged_run(&s, "a", 600), logged_run(&s, "b", 600));
    let query = |runs: Value| s.post("/metrics/query", &json!({"key": "loss", "buckets": 10, "runs": runs}));
    let (status, body) = query(json!([a, a, a]));
    assert_eq!(status, 200, "600 points, however often the run is named: {body}");
    assert_over_budget(query(json!([a, b])), "runs", 1000);
    let groups = json!({"key": "loss", "buckets": 10, "groups": {"x": [a], "y": [b]}});
    assert_over_budget(s.post("/metrics/query", &groups), "runs", 1000);
    assert_over_budget(s.get(&format!("/metrics?key=loss&runs={a},{b}")), "runs", 1000);
    // Another key of the same runs is within the budget.
    let (status, body) = s.post("/metrics/query", &json!({"key": "other", "buckets": 10, "runs": [a, b]}));
    assert_eq!(status, 200, "{body}");
}

#[test]
fn mlflow_history_comes_in_pages_of_at_most_25000_points_whatever_max_results_asks() {
    let s = TestServer::spawn_local();
    let run = logged_run(&s, "history", MAX_HISTORY_PAGE as i64 + 1);
    let history = |query: &str| {
        let url = format!("{}/api/2.0/mlflow/metrics/get-history?run_id={run}&metric_key=loss{query}", s.url);
        let r = s.client.get(url).send().expect("GET reaches the server");
        let status = r.status().as_u16();
        (status, r.json::<Value>().expect("a JSON answer"))
    };
    let mut steps = Vec::new();
    let (status, first) = history("&max_results=1000000000");
    assert_eq!(status, 200, "{first}");
    let page = first["metrics"].as_array().expect("metrics");
    assert_eq!(page.len(), MAX_HISTORY_PAGE);
    steps.extend(page.iter().filter_map(|m| m["step"].as_i64()));
    let token = first["next_page_token"].as_str().expect("a token for the rest");
    let (status, rest) = history(&format!("&max_results=1000000000&page_token={token}"));
    assert_eq!(status, 200, "{rest}");
    steps.extend(rest["metrics"].as_array().expect("metrics").iter().filter_map(|m| m["step"].as_i64()));
    assert!(rest.get("next_page_token").is_none(), "{}", rest["next_page_token"]);
    assert_eq!(steps, (0..=MAX_HISTORY_PAGE as i64).collect::<Vec<_>>());
    let (status, unasked) = history("");
    assert_eq!(status, 200);
    assert_eq!(unasked["metrics"].as_array().map(Vec::len), Some(MAX_HISTORY_PAGE));
}

/// Sends a request head and then `chunks` as a chunked body from a thread of its own, stopping
/// at the first write the server no longer takes; answers the status, the JSON body and the
/// bytes of the body the socket took.
fn chunked_upload(
    s: &TestServer,
    method: &str,
    path: &str,
    chunks: Vec<Vec<u8>>,
    pause: Duration,
) -> (u16, Value, u64) {
    let authority = s.url.trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(&authority).expect("a connection");
    stream.set_read_timeout(Some(Duration::from_secs(120))).expect("a read timeout");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).expect("the request head");
    let mut writer = stream.try_clone().expect("a second handle");
    let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = sent.clone();
    let sender = std::thread::spawn(move || {
        for chunk in chunks {
            let framed = [format!("{:x}\r\n", chunk.len()).into_bytes(), chunk, b"\r\n".to_vec()].concat();
            if writer.write_all(&framed).is_err() {
                return;
            }
            counted.fetch_add(framed.len() as u64, std::sync::atomic::Ordering::Relaxed);
            std::thread::sleep(pause);
        }
        let _ = writer.write_all(b"0\r\n\r\n");
    });
    let (status, body) = read_answer(&mut stream);
    let taken = sent.load(std::sync::atomic::Ordering::Relaxed);
    let _ = stream.shutdown(std::net::Shutdown::Both);
    let _ = sender.join();
    (status, body, taken)
}

/// Reads one HTTP/1.1 answer with a Content-Length body.
fn read_answer(stream: &mut TcpStream) -> (u16, Value) {
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = stream.read(&mut buf).expect("an answer before the read timeout");
        assert!(n > 0, "the server closed the connection without an answer");
        got.extend_from_slice(&buf[..n]);
        let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
        let head = String::from_utf8_lossy(&got[..end]).to_string();
        let status: u16 = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("a status line");
        let length: usize = head
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0)))
            .unwrap_or(0);
        while got.len() < end + 4 + length {
            let n = stream.read(&mut buf).expect("the answer's body");
            assert!(n > 0, "the answer's body was cut short");
            got.extend_from_slice(&buf[..n]);
        }
        let body = serde_json::from_slice(&got[end + 4..end + 4 + length]).unwrap_or(Value::Null);
        return (status, body);
    }
}

fn png_head() -> Vec<u8> {
    let mut head = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    head.extend_from_slice(&4u32.to_be_bytes());
    head.extend_from_slice(&4u32.to_be_bytes());
    head
}

#[test]
fn mlflow_image_uploads_are_checked_as_their_bytes_arrive() {
    let s = TestServer::spawn_local();
    let run = s.create_run("bounded", "images");
    let image = |name: &str| {
        format!("/api/2.0/mlflow-artifacts/artifacts/0/{run}/artifacts/images/{name}+step+1+timestamp+2+u.png")
    };
    // Past the media cap: refused once the cap is passed, naming it, with most of the body unsent.
    let mut chunks = vec![png_head()];
    let total_chunks = 200;
    chunks.extend((0..total_chunks).map(|_| vec![0u8; 1 << 20]));
    let total: u64 = chunks.iter().map(|c| c.len() as u64).sum();
    let (status, body, sent) = chunked_upload(&s, "PUT", &image("big"), chunks, Duration::ZERO);
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["limit"], MAX_MEDIA_ITEM_BYTES, "{body}");
    assert!(sent < total, "the server read all {total} bytes before answering");
    // Not a PNG: refused from its first bytes.
    let (status, body, _) =
        chunked_upload(&s, "PUT", &image("fake"), vec![b"GIF89a not a png at all".to_vec(); 4], Duration::ZERO);
    assert_eq!(status, 400, "{body}");
    assert!(body["message"].as_str().unwrap_or_default().contains("PNG"), "{body}");
    // Neither was kept, as an artifact or as media.
    let (status, listed) = s.get(&format!("/runs/{run}/artifacts"));
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["artifacts"].as_array().map(Vec::len), Some(0), "{listed}");
    let (status, media) = s.get(&format!("/runs/{run}/media/keys"));
    assert!(status == 200 || status == 404, "{media}");
    assert!(!media.to_string().contains("\"big\"") && !media.to_string().contains("\"fake\""), "{media}");
    // A PNG within the cap is recorded as before.
    let mut small = png_head();
    small.extend_from_slice(&[0u8; 100]);
    let url = format!("{}{}", s.url, image("ok"));
    let r = s.client.put(url).body(small).send().expect("PUT reaches the server");
    assert_eq!(r.status().as_u16(), 200);
}

fn post_table(s: &TestServer, run: &str, query: &str, content_type: &str, body: Vec<u8>) -> (u16, Value) {
    s.post_raw(&format!("/runs/{run}/tables?key=t&{query}"), content_type, body)
}

#[test]
fn table_bodies_are_limited_by_size_before_parsing_and_counted_while_they_parse() {
    let s = TestServer::spawn_local();
    let run = s.create_run("bounded", "json-tables");
    // Over the size a JSON part may have, however little it holds.
    let mut padded = br#"{"columns": ["a"], "rows": [[1]]}"#.to_vec();
    padded.resize(MAX_PART_JSON_BYTES + 1, b' ');
    let (status, body) = post_table(&s, &run, "step=0", "application/json", padded);
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["limit"], MAX_PART_JSON_BYTES, "{body}");
    // Too many column names, or values in a row: the parse stops there, naming the limit.
    let names: Vec<String> = (0..=MAX_TABLE_COLUMNS).map(|i| format!("c{i}")).collect();
    let (status, body) = post_table(
        &s,
        &run,
        "step=0",
        "application/json",
        json!({"columns": names, "rows": []}).to_string().into_bytes(),
    );
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "columns", "{body}");
    assert!(body["error"]["message"].as_str().unwrap_or_default().contains("at most 1000 columns"), "{body}");
    let wide = json!({"columns": ["a"], "rows": [vec![0; MAX_TABLE_COLUMNS + 1]]}).to_string().into_bytes();
    let (status, body) = post_table(&s, &run, "step=0", "application/json", wide);
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap_or_default().contains("at most 1000 values"), "{body}");
}

/// An Arrow IPC stream of `columns` boolean columns of `rows` nulls: small to send, many values.
fn null_columns(columns: usize, rows: usize) -> Vec<u8> {
    named_null_columns("c", columns, rows)
}

#[test]
fn table_parts_past_the_budget_in_values_are_refused_when_written_and_when_read() {
    let s = TestServer::spawn_local();
    let run = s.create_run("bounded", "arrow-tables");
    let arrow = "application/vnd.apache.arrow.stream";
    let rows = MAX_TABLE_CELLS / MAX_TABLE_COLUMNS;
    let (status, body) = post_table(&s, &run, "step=0", arrow, null_columns(MAX_TABLE_COLUMNS, rows + 1));
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "rows", "{body}");
    assert!(body["error"]["message"].as_str().unwrap_or_default().contains(&MAX_TABLE_CELLS.to_string()), "{body}");
    // Two halves make a table at the budget: it reads.
    for (step, mode) in [(0, "replace"), (1, "append")] {
        let (status, body) =
            post_table(&s, &run, &format!("step={step}&mode={mode}"), arrow, null_columns(MAX_TABLE_COLUMNS, rows / 2));
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = s.get(&format!("/runs/{run}/tables?key=t&limit=1"));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["total_rows"], rows, "{}", body["total_rows"]);
    // One more row past it: the read is refused before any part is decoded.
    let (status, body) = post_table(&s, &run, "step=2&mode=append", arrow, null_columns(MAX_TABLE_COLUMNS, 1));
    assert_eq!(status, 200, "{body}");
    let (status, body) = s.get(&format!("/runs/{run}/tables?key=t&limit=1"));
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap_or_default().contains(&MAX_TABLE_CELLS.to_string()), "{body}");
    let (status, body) = s.get(&format!("/runs/{run}/tables?key=t&step=1&limit=1"));
    assert_eq!(status, 200, "as of the step before, the table is within the budget: {body}");
}

/// An Arrow IPC stream of boolean columns named `{prefix}{c}` of `rows` nulls.
fn named_null_columns(prefix: &str, columns: usize, rows: usize) -> Vec<u8> {
    use arrow_array::{ArrayRef, BooleanArray, RecordBatch};
    let nulls: ArrayRef = Arc::new(BooleanArray::from(vec![None::<bool>; rows]));
    let batch =
        RecordBatch::try_from_iter((0..columns).map(|c| (format!("{prefix}{c}"), nulls.clone()))).expect("a batch");
    let mut body = Vec::new();
    let mut writer = arrow_ipc::writer::StreamWriter::try_new(&mut body, &batch.schema()).expect("a writer");
    writer.write(&batch).expect("write");
    writer.finish().expect("finish");
    drop(writer);
    body
}

#[test]
fn parts_with_other_columns_count_every_column_of_the_joined_table() {
    let s = TestServer::spawn_local();
    let run = s.create_run("bounded", "disjoint");
    let arrow = "application/vnd.apache.arrow.stream";
    // A part appended at step 10 to the table of step 0, then a replacing part at step 5 that
    // arrived after it with other columns: as of step 10 the two join, 6,000 rows × 2,000
    // columns, 12,000,000 values, though each part holds 3,000,000.
    let rows = 3_000;
    for (query, prefix) in [("step=0&mode=replace", "a"), ("step=10&mode=append", "a"), ("step=5&mode=replace", "b")] {
        let (status, answer) = post_table(&s, &run, query, arrow, named_null_columns(prefix, MAX_TABLE_COLUMNS, rows));
        assert_eq!(status, 200, "{}", answer["error"]["code"]);
    }
    let (status, body) = s.get(&format!("/runs/{run}/tables?key=t&limit=1"));
    assert_eq!(status, 400, "{}", body["error"]);
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("12000000") && message.contains(&MAX_TABLE_CELLS.to_string()), "{message}");
}

#[test]
fn a_body_that_pauses_or_trickles_is_answered_408() {
    let s = TestServer::spawn_local_with_env(&[], &[("TRAINLOG_BODY_TIMEOUT_S", "1")]);
    let run = s.create_run("bounded", "slow");
    let authority = s.url.trim_start_matches("http://").to_owned();
    // A JSON body that stops halfway.
    let mut stream = TcpStream::connect(&authority).expect("a connection");
    stream.set_read_timeout(Some(Duration::from_secs(60))).expect("a read timeout");
    let head = format!(
        "POST /api/v1/runs/{run}/metrics HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"points\": ["
    );
    stream.write_all(head.as_bytes()).expect("the request");
    let (status, body) = read_answer(&mut stream);
    assert_eq!(status, 408, "{body}");
    assert_eq!(body["error"]["code"], "request_timeout", "{body}");
    // A streamed upload whose bytes trickle in, a few a time: it never pauses for long, but
    // falls behind the least rate a body must keep.
    let chunks = vec![b"0123456789".to_vec(); 200];
    let (status, body, _) = chunked_upload(
        &s,
        "PUT",
        &format!("/api/v1/runs/{run}/artifacts/slow.bin"),
        chunks,
        Duration::from_millis(100),
    );
    assert_eq!(status, 408, "{body}");
    // Through MLflow's artifact proxy, in MLflow's shape.
    let chunks = vec![b"0123456789".to_vec(); 200];
    let path = format!("/api/2.0/mlflow-artifacts/artifacts/0/{run}/artifacts/slow.txt");
    let (status, body, _) = chunked_upload(&s, "PUT", &path, chunks, Duration::from_millis(100));
    assert_eq!(status, 408, "{body}");
    assert_eq!(body["error_code"], "REQUEST_LIMIT_EXCEEDED", "{body}");
    let (status, listed) = s.get(&format!("/runs/{run}/artifacts"));
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["artifacts"].as_array().map(Vec::len), Some(0), "{listed}");
}

#[test]
fn a_json_page_of_a_wide_table_is_bounded_in_values() {
    let s = TestServer::spawn_local();
    let run = s.create_run("bounded", "wide");
    let arrow = "application/vnd.apache.arrow.stream";
    let (status, body) = post_table(&s, &run, "step=0", arrow, null_columns(MAX_TABLE_COLUMNS, 2_000));
    assert_eq!(status, 200, "{body}");
    let rows = MAX_TABLE_PAGE_VALUES / MAX_TABLE_COLUMNS;
    let (status, body) = s.get(&format!("/runs/{run}/tables?key=t&limit={rows}"));
    assert_eq!(status, 200, "{}", body["error"]);
    assert_eq!(body["rows"].as_array().map(Vec::len), Some(rows));
    let (status, body) = s.get(&format!("/runs/{run}/tables?key=t&limit={}", rows + 1));
    assert_over_budget((status, body), "limit", MAX_TABLE_PAGE_VALUES as u64);
    // As Arrow, the same rows are one stream.
    let r =
        s.client.get(s.api(&format!("/runs/{run}/tables?key=t&format=arrow&limit={}", rows + 1))).send().expect("GET");
    assert_eq!(r.status().as_u16(), 200);
}

// The limits of the MLflow door's bodies and of the media bodies, as the README documents them.
const MAX_LOG_BATCH_BYTES: usize = 10 << 20;
const MAX_DOOR_BODY_BYTES: usize = 8 << 20;
const MAX_DOOR_BODY_VALUES: usize = 200_000;
const MAX_RECORD_MEDIA_BYTES: usize = 16 << 20;
const MAX_RECORD_HISTOGRAMS_BYTES: usize = 26 << 20;

/// POSTs `body` as JSON to the MLflow door; the status and MLflow's error body.
fn door_post(s: &TestServer, path: &str, body: Vec<u8>) -> (u16, Value) {
    let r = s
        .client
        .post(format!("{}/api/2.0/mlflow{path}", s.url))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .expect("POST reaches the server");
    let status = r.status().as_u16();
    (status, r.json::<Value>().unwrap_or(Value::Null))
}

/// `body` as JSON text, padded with spaces to `len` bytes: as little to parse as before.
fn padded(body: Value, len: usize) -> Vec<u8> {
    let mut bytes = body.to_string().into_bytes();
    bytes.resize(len, b' ');
    bytes
}

/// Asserts MLflow's refusal of a body: 400 `INVALID_PARAMETER_VALUE` naming `field` and `limit`.
fn assert_door_refusal(answer: (u16, Value), field: &str, limit: u64) {
    let (status, body) = answer;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error_code"], "INVALID_PARAMETER_VALUE", "{body}");
    assert_eq!(body["field"], field, "{body}");
    assert_eq!(body["limit"], limit, "{body}");
}

#[test]
fn mlflow_door_bodies_are_limited_by_size_before_parsing_and_counted_while_they_parse() {
    let s = TestServer::spawn_local();
    let run = s.create_run("bounded", "door");
    let batch = json!({"run_id": run, "metrics": [{"key": "m", "value": 1.0, "timestamp": 1, "step": 0}]});
    // A log-batch within its cap goes through; one byte past it is refused before it is parsed.
    let (status, body) = door_post(&s, "/runs/log-batch", padded(batch.clone(), MAX_LOG_BATCH_BYTES));
    assert_eq!(status, 200, "{body}");
    let refused = door_post(&s, "/runs/log-batch", padded(batch, MAX_LOG_BATCH_BYTES + 1));
    assert_door_refusal(refused, "body", MAX_LOG_BATCH_BYTES as u64);
    // Other door routes: 8 MiB.
    let tag = json!({"run_id": run, "key": "t", "value": "v"});
    let (status, body) = door_post(&s, "/runs/set-tag", padded(tag.clone(), MAX_DOOR_BODY_BYTES));
    assert_eq!(status, 200, "{body}");
    assert_door_refusal(
        door_post(&s, "/runs/set-tag", padded(tag, MAX_DOOR_BODY_BYTES + 1)),
        "body",
        MAX_DOOR_BODY_BYTES as u64,
    );
    // Many metrics are counted as they parse, past the limit without being kept: the refusal
    // says how many came, in MLflow's words, and names the limit.
    let many = format!(r#"{{"run_id": "{run}", "metrics": [{}]}}"#, vec!["{}"; 300_000].join(","));
    let (status, body) = door_post(&s, "/runs/log-batch", many.into_bytes());
    assert_door_refusal((status, body.clone()), "metrics", 1000);
    let message = body["message"].as_str().unwrap_or_default();
    assert!(message.contains("at most 1000 metrics. Got 300000 metrics"), "{message}");
    let total = json!({"run_id": run, "metrics": vec![json!({"key": "m", "value": 1, "timestamp": 1}); 900],
        "params": vec![json!({"key": "p", "value": "x"}); 100], "tags": vec![json!({"key": "t", "value": "x"}); 100]});
    let (status, body) = door_post(&s, "/runs/log-batch", total.to_string().into_bytes());
    assert_door_refusal((status, body.clone()), "metrics", 1000);
    assert!(body["message"].as_str().unwrap_or_default().contains("Got 1100 total entities"), "{body}");
    // A body of more JSON values than any MLflow request holds stops parsing there.
    let junk = format!(
        r#"{{"run_id": "{run}", "key": "t", "value": "v", "junk": [{}]}}"#,
        vec!["0"; MAX_DOOR_BODY_VALUES].join(",")
    );
    assert_door_refusal(door_post(&s, "/runs/set-tag", junk.into_bytes()), "body", MAX_DOOR_BODY_VALUES as u64);
    // Nothing of the refused batches was written.
    let (status, history) = s.get(&format!("/runs/{run}/metrics?key=m"));
    assert_eq!(status, 200, "{history}");
    assert_eq!(history["points"].as_array().map(Vec::len), Some(1), "{history}");
}

#[test]
fn media_and_histogram_bodies_are_limited_by_size_before_parsing_and_counted_while_they_parse() {
    let s = TestServer::spawn_local();
    let run = s.create_run("bounded", "media-bodies");
    let json_type = "application/json";
    let post = |path: &str, body: Vec<u8>| s.post_raw(&format!("/runs/{run}/{path}"), json_type, body);
    let histogram = json!({"key": "h", "step": 0, "edges": [0.0, 1.0], "counts": [3.0]});
    let (status, body) = post("histograms", padded(json!({"histograms": [histogram]}), MAX_RECORD_HISTOGRAMS_BYTES));
    assert_eq!(status, 200, "{body}");
    let (status, body) =
        post("histograms", padded(json!({"histograms": [histogram]}), MAX_RECORD_HISTOGRAMS_BYTES + 1));
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["limit"], MAX_RECORD_HISTOGRAMS_BYTES, "{body}");
    // Edges past a histogram's 513 are counted, not kept.
    let wide = format!(
        r#"{{"histograms": [{{"key": "h", "step": 1, "edges": [{}], "counts": [1]}}]}}"#,
        vec!["0"; 1_000_000].join(",")
    );
    let (status, body) = post("histograms", wide.into_bytes());
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "histograms[0].edges", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("at most 513 edges in a histogram, got 1000000"), "{message}");
    // Media items: 16 MiB, and an item's boxes counted as they parse.
    let item = |boxes: usize| {
        json!({"key": "img", "step": 0, "kind": "image", "blob": "0".repeat(64), "mime": "image/png",
            "boxes": vec![json!({"x_min": 0, "y_min": 0, "x_max": 1, "y_max": 1}); boxes]})
    };
    let (status, body) = post("media", padded(json!({"items": [item(0)]}), MAX_RECORD_MEDIA_BYTES + 1));
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["limit"], MAX_RECORD_MEDIA_BYTES, "{body}");
    let (status, body) = post("media", json!({"items": [item(10_001)]}).to_string().into_bytes());
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "items[0].boxes", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("at most 10000 boxes on an item, got 10001"), "{message}");
    let (status, listed) = s.get(&format!("/runs/{run}/histograms?key=h"));
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["histograms"].as_array().map(Vec::len), Some(1), "{listed}");
}

#[test]
fn one_run_series_and_mlflow_history_are_read_within_the_points_budget() {
    let s = TestServer::spawn_local_with_env(&[], &[("TRAINLOG_MAX_QUERY_POINTS", "1000")]);
    let (short, long) = (logged_run(&s, "short", 600), logged_run(&s, "long", 1500));
    for query in ["", "&buckets=10", "&step_min=0&step_max=10"] {
        let (status, body) = s.get(&format!("/runs/{short}/metrics?key=loss{query}"));
        assert_eq!(status, 200, "{query}: {body}");
        assert_over_budget(s.get(&format!("/runs/{long}/metrics?key=loss{query}")), "key", 1000);
    }
    // As Arrow, the same budget.
    let r = s
        .client
        .get(s.api(&format!("/runs/{long}/metrics?key=loss")))
        .header("accept", "application/vnd.apache.arrow.stream")
        .send()
        .expect("GET");
    assert_eq!(r.status().as_u16(), 400);
    // MLflow's history reads the whole series for each page: the same budget, in MLflow's shape.
    let history = |run: &str| {
        let url = format!("{}/api/2.0/mlflow/metrics/get-history?run_id={run}&metric_key=loss", s.url);
        let r = s.client.get(url).send().expect("GET reaches the server");
        (r.status().as_u16(), r.json::<Value>().unwrap_or(Value::Null))
    };
    let (status, body) = history(&short);
    assert_eq!(status, 200, "{body}");
    assert_door_refusal(history(&long), "metric_key", 1000);
}

#[test]
fn the_points_budget_and_the_body_time_limit_are_server_flags() {
    let s = TestServer::spawn_local_with(&["--max-query-points", "1000", "--body-timeout-s", "1"]);
    let (short, long) = (logged_run(&s, "short", 600), logged_run(&s, "long", 1500));
    let (status, body) = s.get(&format!("/runs/{short}/metrics?key=loss&buckets=10"));
    assert_eq!(status, 200, "{body}");
    assert_over_budget(s.get(&format!("/runs/{long}/metrics?key=loss&buckets=10")), "key", 1000);
    assert_over_budget(
        s.post("/metrics/query", &json!({"key": "loss", "buckets": 10, "runs": [short, long]})),
        "runs",
        1000,
    );
    // A body that stops halfway is answered 408 after the second the flag gives.
    let authority = s.url.trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(&authority).expect("a connection");
    stream.set_read_timeout(Some(Duration::from_secs(60))).expect("a read timeout");
    let head = format!(
        "POST /api/v1/runs/{short}/metrics HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"points\": ["
    );
    stream.write_all(head.as_bytes()).expect("the request");
    let (status, body) = read_answer(&mut stream);
    assert_eq!(status, 408, "{body}");
    assert!(body["error"]["message"].as_str().unwrap_or_default().contains("pause at most 1 s"), "{body}");
}
