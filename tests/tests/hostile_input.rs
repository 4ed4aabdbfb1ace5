//! Hostile and unlucky input from outside, against the real binary: runs with very many keys,
//! requests another web page could make a browser send, and the counters an operator reads.

use trainlog_tests::{json, TestServer, Value};

/// Peak resident memory of a process so far, in MiB (`VmHWM` in `/proc/PID/status`).
fn peak_rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the server's /proc status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc status");
    kib / 1024
}

/// What the server may hold at peak while it stores a run with 100,000 metric keys and 100,000
/// params. Before the runs table scaled with entries rather than columns, 5,000 keys took 2.5 GB.
const MAX_PEAK_RSS_MIB: u64 = 512;

#[test]
fn a_run_with_100k_metric_keys_and_100k_params_is_stored_within_bounded_memory() {
    let server = TestServer::spawn_local();
    let run = server.create_run("wide", "many-keys");
    let keys = 100_000;
    let points: Vec<Value> =
        (0..keys).map(|k| json!({"key": format!("layer{k}/grad_norm"), "step": 0, "value": k})).collect();
    let (status, body) = server.log(&run, Value::Array(points));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["accepted"], keys);
    let params: serde_json::Map<String, Value> = (0..keys).map(|k| (format!("p{k}"), json!(k))).collect();
    let (status, body) = server.post(&format!("/runs/{run}/params"), &json!({ "params": params }));
    assert_eq!(status, 200, "{body}");
    // Persists the points and rewrites the project's runs table, which once had a column per key.
    server.flush();
    server.flush();

    let (status, got) = server.get(&format!("/runs/{run}"));
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["params"].as_object().map(|p| p.len()), Some(keys));
    assert_eq!(got["params"]["p99999"], 99_999);
    assert_eq!(server.series(&run, "layer77777/grad_norm"), vec![(0, json!(77_777.0))]);
    let table = server.data.join("store/projects");
    let runs_tables: Vec<_> = std::fs::read_dir(&table)
        .expect("projects folder")
        .map(|e| e.expect("entry").path().join("runs.parquet"))
        .filter(|p| p.exists())
        .collect();
    assert_eq!(runs_tables.len(), 1, "the runs table was written");

    let peak = peak_rss_mib(server.pid().expect("a running server"));
    println!("peak RSS with {keys} metric keys and {keys} params: {peak} MiB");
    assert!(peak < MAX_PEAK_RSS_MIB, "peak RSS {peak} MiB, bound {MAX_PEAK_RSS_MIB} MiB");
}

fn send(
    server: &TestServer,
    method: reqwest::Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (u16, Value, reqwest::header::HeaderMap) {
    let mut request = server.client.request(method, server.api(path));
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().expect("the server answers");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().expect("a body");
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)), headers)
}

#[test]
fn requests_another_site_could_make_a_browser_send_change_nothing() {
    let server = TestServer::spawn_local();
    let run = server.create_run("guarded", "r");
    let params = format!("/runs/{run}/params");
    let own = server.url.trim_end_matches('/').to_owned();

    // DNS rebinding: a page on evil.example resolved to 127.0.0.1 sends its own Host.
    let port = own.rsplit(':').next().expect("a port");
    let evil_host = format!("evil.example:{port}");
    for method in [reqwest::Method::GET, reqwest::Method::POST] {
        let body = (method == reqwest::Method::POST).then(|| json!({"params": {"lr": 1}}));
        let (status, body, _) = send(&server, method, &params, &[("host", &evil_host)], body);
        assert_eq!(status, 421, "{body}");
        assert_eq!(body["error"]["code"], "misdirected_request");
        assert_eq!(body["error"]["field"], "Host");
    }

    // A page of another origin posting to the API.
    for origin in ["http://evil.example", "http://127.0.0.1:1", "null"] {
        let (status, body, _) =
            send(&server, reqwest::Method::POST, &params, &[("origin", origin)], Some(json!({"params": {"lr": 2}})));
        assert_eq!(status, 403, "{origin}: {body}");
        assert_eq!(body["error"]["field"], "Origin");
    }
    let (status, body, _) = send(
        &server,
        reqwest::Method::PATCH,
        &format!("/runs/{run}"),
        &[("sec-fetch-site", "cross-site")],
        Some(json!({"name": "owned"})),
    );
    assert_eq!(status, 403, "{body}");
    let (_, stored) = server.get(&format!("/runs/{run}"));
    assert_eq!(stored["params"], json!({}), "a refused request wrote params");
    assert_eq!(stored["name"], "r");

    // The UI's own page, and clients that send no Origin, still work.
    let (status, body, _) =
        send(&server, reqwest::Method::POST, &params, &[("origin", &own)], Some(json!({"params": {"lr": 3}})));
    assert_eq!(status, 200, "{body}");
    let (status, _, _) = send(&server, reqwest::Method::POST, &params, &[], Some(json!({"params": {"wd": 4}})));
    assert_eq!(status, 200);
    let (_, stored) = server.get(&format!("/runs/{run}"));
    assert_eq!(stored["params"], json!({"lr": 3, "wd": 4}));

    // The UI may not be framed and loads scripts only from the server.
    let page = server.client.get(format!("{own}/")).send().expect("the UI");
    assert_eq!(page.status().as_u16(), 200);
    let csp = page.headers()["content-security-policy"].to_str().expect("ascii");
    assert!(csp.contains("frame-ancestors 'none'") && csp.contains("script-src 'self'"), "{csp}");
    assert_eq!(page.headers()["x-frame-options"], "DENY");
}

#[test]
fn failures_and_work_are_counted_where_an_operator_sees_them() {
    let server = TestServer::spawn_local();
    let run = server.create_run("counted", "r");
    let points: Vec<Value> = (0..10).map(|s| json!({"key": "loss", "step": s, "value": 1.0})).collect();
    assert_eq!(server.log(&run, Value::Array(points)).0, 200);
    assert_eq!(server.log(&run, json!([{"key": "", "step": 0, "value": 1}])).0, 400);
    assert_eq!(server.get("/runs/no-such-run").0, 404);
    server.flush();

    let (status, stats) = server.get("/admin/stats");
    assert_eq!(status, 200);
    assert_eq!(stats["ingest_batches"], 1, "{stats}");
    assert_eq!(stats["ingest_points"], 10);
    assert_eq!(stats["persisted_points"], 10);
    assert_eq!(stats["persist_failures"], 0);
    assert_eq!(stats["wal_write_failures"], 0);
    assert_eq!(stats["errors"]["invalid_argument"], 1);
    assert_eq!(stats["errors"]["not_found"], 1);
    assert!(stats["object_store_requests"].as_u64().is_some_and(|n| n >= 1), "{stats}");

    let text = server.client.get(format!("{}/metrics", server.url)).send().expect("metrics").text().expect("text");
    for line in [
        "trainlog_ingest_points_total 10",
        "trainlog_persisted_points_total 10",
        "trainlog_wal_write_failures_total 0",
        "trainlog_http_errors_total{code=\"invalid_argument\"} 1",
        "trainlog_frozen_generations 0",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
    }
    assert!(text.contains("# TYPE trainlog_object_store_latency_seconds counter"), "{text}");
}
