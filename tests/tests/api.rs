//! The HTTP API against the real binary: runs, params, tags, status, search, errors, OpenAPI.

use trainlog_tests::{json, TestServer, Value};

fn error_of(body: &Value) -> (&str, &str) {
    let e = &body["error"];
    (e["code"].as_str().unwrap_or_default(), e["message"].as_str().unwrap_or_default())
}

#[test]
fn health_and_openapi_describe_every_route() {
    let s = TestServer::spawn_local();
    assert_eq!(s.get("/health"), (200, json!({"status": "ok"})));
    let (status, doc) = s.get("/openapi.json");
    assert_eq!(status, 200);
    let paths = doc["paths"].as_object().expect("paths");
    // Every resource's route table under the server's `routes/` folder (MLflow's door has its own
    // prefixes and is not in this document; the folder's own mod.rs mounts the resources).
    let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tracking-server/server/src/routes");
    let mut sources = Vec::new();
    let mut pending = vec![folder.clone()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("the routes folder") {
            let path = entry.expect("a folder entry").path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "mlflow") {
                    pending.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") && path != folder.join("mod.rs") {
                sources.push(std::fs::read_to_string(&path).expect("a route source"));
            }
        }
    }
    let routes: Vec<&str> = sources.iter().map(String::as_str).collect();
    let mut routed = std::collections::BTreeSet::new();
    for line in routes
        .iter()
        .flat_map(|r| r.lines())
        .map(|l| l.trim_start().trim_start_matches("cfg"))
        .filter(|l| l.starts_with(".route(\""))
    {
        let path = line.split('"').nth(1).expect("a quoted path").replace("{path:.*}", "{path}");
        let method = line.split("web::").nth(1).and_then(|m| m.split('(').next()).expect("a method");
        let full = format!("/api/v1{path}");
        let op = &doc["paths"][&full][method];
        assert!(
            op.is_object(),
            "openapi.json lacks {method} /api/v1{path}; it has {:?}",
            paths.keys().collect::<Vec<_>>()
        );
        routed.insert((method.to_owned(), full));
    }
    let count = routed.len();
    assert!(count >= 35, "found only {count} routes");
    assert!(doc["paths"]["/metrics"]["get"].is_object(), "the Prometheus route is described too");
    // And the document describes nothing that is not routed.
    let documented: usize = paths
        .iter()
        .filter(|(p, _)| p.starts_with("/api/v1/"))
        .map(|(_, item)| item.as_object().map_or(0, |ops| ops.keys().filter(|k| *k != "parameters").count()))
        .sum();
    assert_eq!(documented, count, "the document has operations that are not routes");
}

#[test]
fn a_method_a_route_does_not_take_gets_405_naming_the_ones_it_does() {
    let s = TestServer::spawn_local();
    for (method, path, allow) in [
        ("TRACE", "/api/v1/health", "GET"),
        ("DELETE", "/api/v1/runs/abc/finish", "POST"),
        ("PUT", "/api/v1/runs/abc", "DELETE, GET, PATCH"),
    ] {
        let response = s
            .client
            .request(reqwest::Method::from_bytes(method.as_bytes()).unwrap(), format!("{}{path}", s.url))
            .send()
            .unwrap();
        assert_eq!(response.status().as_u16(), 405, "{method} {path}");
        assert_eq!(response.headers()["allow"], allow, "{method} {path}");
        let body: Value = response.json().unwrap();
        assert_eq!(body["error"]["code"], "method_not_allowed", "{body}");
    }
    let (status, body) = s.get("/no-such-route");
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("not_found")));
}

#[test]
fn run_lifecycle_with_typed_params_tags_and_status() {
    let s = TestServer::spawn_local();
    let (status, run) = s.post(
        "/runs",
        &json!({"project": "resnet", "name": "lr-3e-4", "params": {"lr": 3e-4, "model": {"depth": 50, "act": "relu"}, "amp": true},
                 "tags": {"team": "vision"}, "user": "ada", "host": "gpu-1", "group": "sweep-1", "notes": "first"}),
    );
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().unwrap().to_owned();
    assert_eq!(run["status"], "running");
    assert_eq!(run["params"], json!({"lr": 3e-4, "model.depth": 50, "model.act": "relu", "amp": true}));
    assert_eq!(
        (run["user"].as_str(), run["host"].as_str(), run["group"].as_str()),
        (Some("ada"), Some("gpu-1"), Some("sweep-1"))
    );

    // Same value again is accepted; a different one is refused naming the key; overwrite replaces it.
    assert_eq!(s.post(&format!("/runs/{id}/params"), &json!({"params": {"lr": 3e-4}})).0, 200);
    let (status, body) = s.post(&format!("/runs/{id}/params"), &json!({"params": {"batch": 64, "lr": 1e-3}}));
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["field"], "params.lr");
    let (_, run_now) = s.get(&format!("/runs/{id}"));
    assert!(run_now["params"].get("batch").is_none(), "a refused request writes nothing: {run_now}");
    let (status, body) = s.post(&format!("/runs/{id}/params"), &json!({"params": {"lr": 1e-3}, "overwrite": true}));
    assert_eq!((status, &body["params"]["lr"]), (200, &json!(1e-3)));

    // Tags are mutable; null deletes.
    let (status, body) = s.post(&format!("/runs/{id}/tags"), &json!({"tags": {"stage": "dev", "team": null}}));
    assert_eq!((status, &body["tags"]), (200, &json!({"stage": "dev"})));
    let (status, run) = s.patch(&format!("/runs/{id}"), &json!({"notes": "second", "name": "renamed"}));
    assert_eq!((status, run["notes"].as_str(), run["name"].as_str()), (200, Some("second"), Some("renamed")));

    let (status, run) = s.post(&format!("/runs/{id}/finish"), &json!({"status": "preempted"}));
    assert_eq!((status, run["status"].as_str()), (200, Some("preempted")));
    assert!(run["end_time"].as_i64().is_some());
    let (status, body) = s.post(&format!("/runs/{id}/finish"), &json!({"status": "done"}));
    assert_eq!((status, &body["error"]["field"]), (400, &json!("status")));
}

#[test]
fn client_chosen_ids_resume_only_when_asked() {
    let s = TestServer::spawn_local();
    let body = json!({"project": "p", "id": "job-42_restart", "params": {"lr": 0.1}});
    assert_eq!(s.post("/runs", &body).0, 201);
    let (status, err) = s.post("/runs", &body);
    assert_eq!((status, &err["error"]["field"]), (409, &json!("id")));
    s.post("/runs/job-42_restart/finish", &json!({"status": "preempted"}));
    let (status, run) =
        s.post("/runs", &json!({"project": "p", "id": "job-42_restart", "params": {"lr": 0.1}, "resume": true}));
    assert_eq!((status, run["status"].as_str(), run["end_time"].is_null()), (200, Some("running"), true));
    let (status, err) = s.post("/runs", &json!({"id": "job-42_restart", "params": {"lr": 0.2}, "resume": true}));
    assert_eq!((status, &err["error"]["field"]), (409, &json!("params.lr")));
    let (status, err) = s.post("/runs", &json!({"project": "p", "id": "../etc"}));
    assert_eq!((status, &err["error"]["field"]), (400, &json!("id")));
}

#[test]
fn errors_are_json_with_status_code_and_field() {
    let s = TestServer::spawn_local();
    let run = s.create_run("p", "n");

    let (status, body) = s.get("/runs/0123456789abcdef/metrics?key=loss");
    assert_eq!((status, error_of(&body).0), (404, "not_found"));
    let (status, body) = s.log("nope", json!([{"key": "a", "step": 0, "value": 1.0}]));
    assert_eq!((status, error_of(&body).0), (404, "not_found"));
    let (status, body) = s.get("/projects/missing/runs");
    assert_eq!((status, error_of(&body).0), (404, "not_found"));

    let (status, body) =
        s.log(&run, json!([{"key": "a", "step": 0, "value": 1.0}, {"key": "a", "step": "one", "value": 2.0}]));
    assert_eq!((status, &body["error"]["field"]), (400, &json!("points[1].step")), "{body}");
    let (status, body) = s.log(&run, json!([{"key": "a", "step": 0, "valeu": 1.0}]));
    assert_eq!((status, error_of(&body).0), (400, "invalid_argument"), "{body}");
    let (status, body) = s.post_raw(&format!("/runs/{run}/metrics"), "application/json", b"{\"points\": [".to_vec());
    assert_eq!((status, error_of(&body).0), (400, "invalid_argument"), "{body}");
    let (status, body) = s.post_raw(&format!("/runs/{run}/metrics"), "text/csv", b"a,1,2".to_vec());
    assert_eq!((status, error_of(&body).0), (415, "unsupported_media_type"));
    let (status, body) =
        s.post_raw(&format!("/runs/{run}/metrics"), "application/vnd.apache.arrow.stream", b"garbage".to_vec());
    assert_eq!((status, &body["error"]["field"]), (400, &json!("body")));
    let (status, body) = s.get(&format!("/runs/{run}/metrics"));
    assert_eq!((status, &body["error"]["field"]), (400, &json!("key")));
    let (status, body) = s.get(&format!("/runs/{run}/metrics?key=a&buckets=0"));
    assert_eq!((status, &body["error"]["field"]), (400, &json!("buckets")));
    let (status, body) = s.post("/runs", &json!({"name": "no project"}));
    assert_eq!((status, &body["error"]["field"]), (400, &json!("project")));
    let (status, body) = s.post("/runs", &json!({"project": "p", "params": {"x": null}}));
    assert_eq!((status, &body["error"]["field"]), (400, &json!("params.x")));

    let big = vec![b' '; 65 << 20];
    let (status, body) = s.post_raw(&format!("/runs/{run}/metrics"), "application/json", big);
    assert_eq!((status, error_of(&body).0), (413, "payload_too_large"));

    // None of the rejected batches wrote a point.
    assert!(s.series(&run, "a").is_empty());
    let (status, body) = s.get("/no/such/route");
    assert_eq!((status, error_of(&body).0), (404, "not_found"));
}

#[test]
fn search_filters_orders_and_paginates() {
    let s = TestServer::spawn_local();
    let mut ids = Vec::new();
    for i in 0..12 {
        let lr = [0.001, 0.01, 0.1][i % 3];
        let (_, run) = s.post("/runs", &json!({"project": "sweep", "name": format!("r{i}"), "params": {"lr": lr, "opt": if i % 2 == 0 {"adam"} else {"sgd"}}, "tags": {"i": i.to_string()}}));
        let id = run["id"].as_str().unwrap().to_owned();
        let loss = 1.0 - i as f64 * 0.07;
        s.log(
            &id,
            json!([{"key": "val_loss", "step": 0, "value": 2.0}, {"key": "val_loss", "step": 1, "value": loss}]),
        );
        if i < 8 {
            s.post(&format!("/runs/{id}/finish"), &json!({"status": "finished"}));
        }
        ids.push((id, loss, lr, i));
    }
    s.create_run("other", "elsewhere");

    let filter = "metrics.val_loss < 0.7 and params.lr = 0.001 and status = 'finished'";
    let (status, body) = s.get(&format!(
        "/projects/sweep/runs?filter={}&order_by=metrics.val_loss%20asc",
        trainlog_tests::urlencode(filter)
    ));
    assert_eq!(status, 200, "{body}");
    let names: Vec<&str> = body["runs"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    // lr 0.001: i in {0,3,6,9}; finished: i < 8; loss < 0.7: i > 4.28 → only 6.
    assert_eq!(names, vec!["r6"]);
    assert_eq!(body["runs"][0]["summary"]["val_loss"]["last"], json!(1.0 - 6.0 * 0.07));
    assert_eq!(body["runs"][0]["summary"]["val_loss"]["mean"], json!((2.0 + 1.0 - 6.0 * 0.07) / 2.0));
    let (status, body) = s.get(&format!(
        "/projects/sweep/runs?filter={}&order_by=metrics_mean.val_loss%20asc",
        trainlog_tests::urlencode("metrics_mean.val_loss < 1.2")
    ));
    assert_eq!(status, 200, "{body}");
    let names: Vec<&str> = body["runs"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    // mean = (2 + 1 - 0.07 i) / 2 < 1.2 → i > 8.57, lowest mean (highest i) first.
    assert_eq!(names, vec!["r11", "r10", "r9"]);

    let (status, page1) = s.post("/runs/search", &json!({"project": "sweep", "filter": "params.opt = 'adam'", "order_by": ["metrics.val_loss desc"], "limit": 4}));
    assert_eq!(status, 200, "{page1}");
    let names: Vec<&str> = page1["runs"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["r0", "r2", "r4", "r6"]);
    let token = page1["next_page_token"].as_str().expect("a next page").to_owned();
    let (_, page2) = s.post("/runs/search", &json!({"project": "sweep", "filter": "params.opt = 'adam'", "order_by": ["metrics.val_loss desc"], "limit": 4, "page_token": token}));
    let names: Vec<&str> = page2["runs"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["r8", "r10"]);
    assert!(page2["next_page_token"].is_null());
    // The count of every match comes only when asked for, on any page.
    assert!(page1.get("total").is_none(), "{page1}");
    let adam = |extra: Value| {
        let mut body = json!({"project": "sweep", "filter": "params.opt = 'adam'", "limit": 4});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        s.post("/runs/search", &body).1
    };
    assert_eq!(adam(json!({"total": true}))["total"], 6);
    assert_eq!(adam(json!({"total": true, "page_token": "4"}))["total"], 6);
    assert_eq!(adam(json!({"total": true, "page_token": "40"}))["total"], 6);
    let (_, listed) = s.get("/projects/sweep/runs?limit=5&total=true&filter=status%20%3D%20%27finished%27");
    assert_eq!((listed["runs"].as_array().unwrap().len(), &listed["total"]), (5, &json!(8)), "{listed}");
    let (status, body) = s.get("/projects/sweep/runs?total=yes");
    assert_eq!((status, &body["error"]["field"]), (400, &json!("total")), "{body}");

    let (status, body) =
        s.get(&format!("/projects/sweep/runs?filter={}", trainlog_tests::urlencode("metrics.val_loss <")));
    assert_eq!((status, &body["error"]["field"]), (400, &json!("filter")), "{body}");
    let (status, body) = s.get("/projects/sweep/runs?order_by=bogus");
    assert_eq!((status, &body["error"]["field"]), (400, &json!("order_by")), "{body}");
    let (_, all) = s.post("/runs/search", &json!({"limit": 1000}));
    assert_eq!(all["runs"].as_array().unwrap().len(), 13);
}

#[test]
fn projects_are_listed_created_and_unique() {
    let s = TestServer::spawn_local();
    let (status, p) = s.post("/projects", &json!({"name": "nlp", "description": "language models"}));
    assert_eq!((status, p["name"].as_str()), (201, Some("nlp")));
    assert_eq!(s.post("/projects", &json!({"name": "nlp"})).0, 409);
    s.create_run("nlp", "a");
    s.create_run("vision", "b");
    let (_, list) = s.get("/projects");
    let summary: Vec<(String, u64)> = list["projects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap().to_owned(), p["run_count"].as_u64().unwrap()))
        .collect();
    assert_eq!(summary, vec![("nlp".to_owned(), 1), ("vision".to_owned(), 1)]);
    assert_eq!(s.get("/projects/nlp").1["description"], "language models");
}

#[test]
fn flags_are_read_from_trainlog_environment_variables() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("from-env");
    let mut child = std::process::Command::new(trainlog_tests::binary())
        .arg("server")
        .env("TRAINLOG_HOST", "127.0.0.1")
        .env("TRAINLOG_PORT", "0")
        .env("TRAINLOG_DATA", &data)
        .env_remove("TRAINLOG_STORE")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Read on a thread, so a server that never prints fails the test instead of hanging it.
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(BufReader::new(stdout).lines().next());
    });
    let first = rx.recv_timeout(std::time::Duration::from_secs(60));
    let _ = child.kill();
    let _ = child.wait();
    let line = first
        .expect("the server prints its ready line within 60 s")
        .expect("the server prints a line before exiting")
        .unwrap();
    assert!(line.contains("listening on http://127.0.0.1:"), "{line}");
    assert!(!line.contains(":7310 "), "TRAINLOG_PORT=0 picked a free port: {line}");
    assert!(data.join("trainlog.db").exists() && data.join("wal").is_dir());
}

#[test]
fn metadata_sections_are_stored_replaced_and_returned_with_the_run() {
    let s = TestServer::spawn_local();
    let run = s.create_run("p", "meta");
    let put = |section: &str, body: &Value| {
        let r = s.client.put(s.api(&format!("/runs/{run}/metadata/{section}"))).json(body).send().unwrap();
        let status = r.status().as_u16();
        (status, r.json::<Value>().unwrap_or(Value::Null))
    };
    assert_eq!(put("environment", &json!({"os": "linux", "gpus": []})).0, 200);
    assert_eq!(put("code", &json!({"commit": "abc", "dirty": true})).0, 200);
    assert_eq!(put("code", &json!({"commit": "def", "dirty": false})).0, 200);
    let (_, body) = s.get(&format!("/runs/{run}"));
    assert_eq!(
        body["metadata"],
        json!({"code": {"commit": "def", "dirty": false}, "environment": {"os": "linux", "gpus": []}})
    );
    assert_eq!(put("bad section", &json!({})).1["error"]["field"], "section");
    assert_eq!(put("code", &json!([1, 2])).1["error"]["field"], "body");
    let r = s.client.put(s.api("/runs/missing/metadata/code")).json(&json!({})).send().unwrap();
    assert_eq!(r.status().as_u16(), 404);
}

#[test]
fn the_ui_is_served_from_the_binary() {
    let s = TestServer::spawn_local();
    let page = s.client.get(format!("{}/", s.url)).send().unwrap();
    assert_eq!(page.status().as_u16(), 200);
    assert!(page.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    let html = page.text().unwrap();
    assert!(html.contains("/ui/app.js") && html.contains("/ui/app.css"), "{html}");
    for (path, kind) in
        [("/ui/app.js", "text/javascript"), ("/ui/charts.js", "text/javascript"), ("/ui/app.css", "text/css")]
    {
        let r = s.client.get(format!("{}{path}", s.url)).send().unwrap();
        assert_eq!(r.status().as_u16(), 200, "{path}");
        assert!(r.headers()["content-type"].to_str().unwrap().starts_with(kind), "{path}");
        assert!(r.text().unwrap().len() > 100, "{path} has content");
    }
}

/// The keys of a JSON object, sorted.
fn keys_of(v: &Value) -> Vec<String> {
    let mut keys: Vec<String> = v.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default();
    keys.sort();
    keys
}

#[test]
fn a_search_answers_only_the_columns_named_and_arrow_on_request() {
    let s = TestServer::spawn_local();
    for i in 0..3 {
        let (status, run) = s.post(
            "/runs",
            &json!({"project": "cols", "name": format!("r{i}"), "params": {"lr": 0.1 * f64::from(i + 1), "depth": i},
                    "tags": {"team": "a", "k": "v"}}),
        );
        assert_eq!(status, 201, "{run}");
        let id = run["id"].as_str().unwrap();
        let points =
            json!([{"key": "loss", "step": 0, "value": 1.0 + f64::from(i)}, {"key": "acc", "step": 0, "value": 0.5}]);
        assert_eq!(s.log(id, points).0, 200);
    }
    let runs = |body: &Value| body["runs"].as_array().expect("runs").clone();

    let (status, all) = s.get("/projects/cols/runs");
    assert_eq!(status, 200, "{all}");
    for run in runs(&all) {
        assert_eq!(
            (keys_of(&run["params"]), keys_of(&run["tags"])),
            (vec!["depth".into(), "lr".into()], vec!["k".into(), "team".into()])
        );
        assert_eq!(keys_of(&run["summary"]), ["acc", "loss"]);
    }
    let (status, some) = s.get("/projects/cols/runs?columns=params.lr,metrics.loss");
    assert_eq!(status, 200, "{some}");
    assert_eq!(runs(&some).len(), 3);
    for run in runs(&some) {
        assert_eq!(
            (keys_of(&run["params"]), keys_of(&run["tags"]), keys_of(&run["summary"])),
            (vec!["lr".into()], vec![], vec!["loss".into()]),
            "{run}"
        );
        assert!(run["name"].as_str().unwrap().starts_with('r'), "attributes always come: {run}");
    }
    let (status, some) = s.post("/runs/search", &json!({"project": "cols", "columns": ["tags", "metrics.acc"]}));
    assert_eq!(status, 200, "{some}");
    for run in runs(&some) {
        assert_eq!(
            (keys_of(&run["params"]), keys_of(&run["tags"]), keys_of(&run["summary"])),
            (vec![], vec!["k".into(), "team".into()], vec!["acc".into()]),
            "{run}"
        );
    }
    for (status, body, field) in [
        {
            let (status, body) = s.get("/projects/cols/runs?columns=params.lr,colour");
            (status, body, "columns")
        },
        {
            let (status, body) = s.post("/runs/search", &json!({"project": "cols", "columns": ["params", "metrics."]}));
            (status, body, "columns[1]")
        },
    ] {
        assert_eq!((status, body["error"]["field"].as_str()), (400, Some(field)), "{body}");
    }

    // Arrow IPC in the runs table's layout; the next page and the total travel in headers.
    let arrow = |path: &str| {
        let response =
            s.client.get(s.api(path)).header("accept", "application/vnd.apache.arrow.stream").send().unwrap();
        assert_eq!(response.status().as_u16(), 200);
        assert_eq!(response.headers()["content-type"], "application/vnd.apache.arrow.stream");
        let header = |name: &str| response.headers().get(name).map(|v| v.to_str().unwrap().to_owned());
        let (next, total) = (header("x-next-page-token"), header("x-total-count"));
        let batches: Vec<arrow_array::RecordBatch> =
            arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(response.bytes().unwrap()), None)
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
        (batches, next, total)
    };
    let (batches, next, total) = arrow("/projects/cols/runs?limit=2&total=true&order_by=name");
    assert_eq!((next.as_deref(), total.as_deref()), (Some("2"), Some("3")));
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, 2);
    let batch = &batches[0];
    let names = batch.column_by_name("name").unwrap().as_any().downcast_ref::<arrow_array::StringArray>().unwrap();
    assert_eq!((names.value(0), names.value(1)), ("r0", "r1"));
    let params = batch.column_by_name("params").unwrap().as_any().downcast_ref::<arrow_array::StructArray>().unwrap();
    let lr = params.column_by_name("lr").unwrap().as_any().downcast_ref::<arrow_array::Float64Array>().unwrap();
    assert_eq!((lr.value(0), lr.value(1)), (0.1, 0.2));
    let metrics = batch.column_by_name("metrics").unwrap().as_any().downcast_ref::<arrow_array::StructArray>().unwrap();
    let loss = metrics.column_by_name("loss").unwrap().as_any().downcast_ref::<arrow_array::StructArray>().unwrap();
    let last = loss.column_by_name("last").unwrap().as_any().downcast_ref::<arrow_array::Float64Array>().unwrap();
    assert_eq!((last.value(0), last.value(1)), (1.0, 2.0));
    // The last page has no next token; the columns pick applies to Arrow too.
    let (batches, next, _) = arrow("/projects/cols/runs?limit=2&page_token=2&columns=params.depth");
    assert_eq!(next, None);
    let schema = batches[0].schema();
    let params = schema.field_with_name("params").unwrap();
    assert!(
        matches!(params.data_type(), arrow_schema::DataType::Struct(f) if f.len() == 1 && f[0].name() == "depth"),
        "{params:?}"
    );
    assert!(schema.field_with_name("tags").is_err() && schema.field_with_name("metrics").is_err(), "{schema:?}");
}
