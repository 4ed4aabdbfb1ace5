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

#[test]
fn a_rewritten_old_step_is_answered_from_summaries_without_merging_the_series_on_reads() {
    let server = TestServer::spawn_local();
    let run = server.create_run("resumed", "r");
    let steps = 200_000;
    for first in (0..steps).step_by(50_000) {
        let points: Vec<Value> = (first..first + 50_000)
            .map(|s| json!({"key": "loss", "step": s, "value": 10.0 - s as f64 / 1e5}))
            .collect();
        assert_eq!(server.log(&run, Value::Array(points)).0, 200);
    }
    server.flush();
    let recomputes =
        |server: &TestServer| server.get("/admin/stats").1["summary_recomputes"].as_u64().expect("a count");
    let before = recomputes(&server);

    // The resume path: the old step 0 (the series' maximum) sent again lower, step 5 higher,
    // then new steps keep coming while the run is read and searched.
    let (status, body) =
        server.log(&run, json!([{"key": "loss", "step": 0, "value": 1.0}, {"key": "loss", "step": 5, "value": 20.0}]));
    assert_eq!(status, 200, "{body}");
    for i in 0..20 {
        assert_eq!(server.log(&run, json!([{"key": "loss", "step": steps + i, "value": 5.0}])).0, 200);
        let (status, got) = server.get(&format!("/runs/{run}"));
        assert_eq!(status, 200);
        let loss = &got["summary"]["loss"];
        assert_eq!(loss["last"], 5.0, "{loss}");
        assert_eq!(loss["last_step"], steps + i);
        assert_eq!(loss["max"], 20.0, "the rewritten step widens the max at once: {loss}");
        let (status, found) = server.post("/runs/search", &json!({"project": "resumed", "filter": "metrics.loss = 5"}));
        assert_eq!(status, 200, "{found}");
        assert_eq!(found["runs"].as_array().map(Vec::len), Some(1), "{found}");
    }
    // Forty reads later, the series was recomputed in the background at most a few times, not per read.
    let during = recomputes(&server) - before;
    assert!(during <= 5, "{during} recomputations for 40 reads");

    server.flush();
    let (_, got) = server.get(&format!("/runs/{run}"));
    let loss = &got["summary"]["loss"];
    let expected_max = 20.0;
    assert_eq!(loss["max"], expected_max);
    assert_eq!(loss["count"], steps + 20, "{loss}");
    // Exact after the recomputation: step 0's old 10.0 no longer counts, the new 1.0 does.
    let expected_min = 1.0_f64.min(10.0 - (steps - 1) as f64 / 1e5);
    assert_eq!(loss["min"], expected_min);
}

#[test]
fn a_lost_metric_file_leaves_the_rest_of_the_series_readable_and_compaction_moves_on() {
    let server = TestServer::spawn_local();
    let run = server.create_run("lost", "r");
    for first in [0, 100] {
        let points: Vec<Value> = (first..first + 100).map(|s| json!({"key": "loss", "step": s, "value": s})).collect();
        assert_eq!(server.log(&run, Value::Array(points)).0, 200);
        server.flush();
    }
    let folder = std::fs::read_dir(server.data.join("store/projects"))
        .expect("projects")
        .map(|e| e.expect("entry").path().join("metrics").join(&run))
        .find(|p| p.exists())
        .expect("the run's metric folder");
    let mut files: Vec<_> = std::fs::read_dir(&folder).expect("files").map(|e| e.expect("entry").path()).collect();
    files.sort();
    assert_eq!(files.len(), 2, "{files:?}");
    std::fs::remove_file(&files[0]).expect("removing the older file");

    let (status, body) = server.get(&format!("/runs/{run}/metrics?key=loss"));
    assert_eq!(status, 200, "{body}");
    let steps: Vec<i64> =
        body["points"].as_array().expect("points").iter().map(|p| p["step"].as_i64().expect("step")).collect();
    assert_eq!(steps, (100..200).collect::<Vec<_>>());
    let missing = body["missing_files"].as_array().expect("the lost file is named");
    assert_eq!(missing.len(), 1);
    assert!(missing[0].as_str().is_some_and(|m| files[0].ends_with(m)), "{missing:?}");
    assert_eq!(server.get("/admin/stats").1["missing_files"], 1);

    // Finishing compacts the run: the lost file leaves the catalog, and nothing fails again.
    assert_eq!(server.post(&format!("/runs/{run}/finish"), &json!({"status": "finished"})).0, 200);
    server.flush();
    let (_, body) = server.get(&format!("/runs/{run}/metrics?key=loss"));
    assert!(body.get("missing_files").is_none(), "{body}");
    assert_eq!(body["points"].as_array().map(Vec::len), Some(100));
    let (_, stats) = server.get("/admin/stats");
    assert_eq!(stats["compaction_failures"], 0, "{stats}");
    assert_eq!(stats["files"], 1, "{stats}");
}

#[test]
fn a_nul_in_a_text_is_refused_alike_on_every_database_never_a_server_error() {
    let s = TestServer::spawn();
    let (status, body) = s.post("/runs", &json!({"project": "nul", "name": "r", "notes": "before\u{0}after"}));
    assert_eq!((status, &body["error"]["field"]), (400, &json!("notes")), "{body}");
    assert_eq!(s.get("/projects/nul").0, 404, "nothing was written");
}
