//! Defects a team server must not have, each found by trying it from outside: a run one may not
//! see told apart from a missing one through `parent_id` or a deleted id, NUL characters reaching
//! the database, a media type that a browser reads as HTML served inline, body-less form posts,
//! media blobs that nothing names left in the store for good, and a resumed process's table part
//! replacing an earlier process's. Each runs on SQLite, and on PostgreSQL in the test command's
//! second pass; the media ones on S3 too.

use std::collections::BTreeSet;
use trainlog_tests::{json, TestServer, Value};

fn call(s: &TestServer, method: &str, path: &str, key: &str, body: Option<&Value>) -> (u16, Value) {
    let mut request = s
        .client
        .request(reqwest::Method::from_bytes(method.as_bytes()).expect("a method"), s.api(path))
        .bearer_auth(key);
    if let Some(b) = body {
        request = request.json(b);
    }
    let response = request.send().expect("the server answers");
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

#[test]
fn a_run_one_may_not_read_is_not_told_apart_from_a_missing_one() {
    let s = TestServer::spawn_local_with(&["--auth", "--default-permission", "none"]);
    let admin = s.api_key.clone().expect("the admin's key");
    let mallory = s.admin_cli(&["users", "add", "mallory"]);
    let (status, hidden) = call(&s, "POST", "/runs", &admin, Some(&json!({"project": "secret", "name": "h"})));
    assert_eq!(status, 201, "{hidden}");
    let hidden = hidden["id"].as_str().unwrap().to_owned();
    let (status, gone) = call(&s, "POST", "/runs", &admin, Some(&json!({"project": "secret", "name": "g"})));
    assert_eq!(status, 201);
    let gone = gone["id"].as_str().unwrap().to_owned();
    assert_eq!(call(&s, "POST", &format!("/runs/{gone}/archive"), &admin, Some(&json!({}))).0, 200);

    // As a parent: a hidden run and a missing one both answer 404, and no run is made.
    let child = |parent: &str| {
        call(&s, "POST", "/runs", &mallory, Some(&json!({"project": "mine", "name": "c", "parent_id": parent})))
    };
    let (hidden_status, hidden_body) = child(&hidden);
    let (missing_status, _) = child("0123456789abcdef0123456789abcdef");
    assert_eq!((hidden_status, missing_status), (404, 404), "{hidden_body}");
    let (_, runs) = call(&s, "POST", "/runs/search", &mallory, Some(&json!({"projects": ["mine"]})));
    assert_eq!(runs["runs"].as_array().map(Vec::len).unwrap_or(0), 0, "{runs}");
    // As an id to create or resume, a deleted hidden run answers as a hidden live one, not 409.
    for id in [&hidden, &gone] {
        let (status, body) = call(&s, "POST", "/runs", &mallory, Some(&json!({"id": id, "project": "mine"})));
        assert_eq!(status, 404, "{id}: {body}");
        assert!(!body.to_string().contains("secret"), "the project's name leaks: {body}");
    }
}

#[test]
fn nul_characters_are_refused_with_a_400_naming_the_field() {
    let s = TestServer::spawn_local();
    let run = s.create_run("p", "r");
    let cases = [
        ("/runs", json!({"project": "p", "name": "a\u{0}b"}), "name"),
        ("/runs", json!({"project": "p\u{0}q"}), "project"),
        (&format!("/runs/{run}/params") as &str, json!({"params": {"lr": "0.1\u{0}"}}), "params.lr"),
        (&format!("/runs/{run}/tags"), json!({"tags": {"t": "\u{0}"}}), "tags.t"),
        ("/runs/search", json!({"filter": "params.lr = '\u{0}'"}), "filter"),
    ];
    for (path, body, field) in cases {
        let (status, answer) = s.post(path, &body);
        assert_eq!((status, answer["error"]["field"].as_str()), (400, Some(field)), "{path} {body}: {answer}");
        assert!(!answer.to_string().contains("invalid byte sequence"), "a database's text: {answer}");
    }
    let (status, answer) = s.get("/projects/p/runs?filter=name%20%3D%20%27%00%27");
    assert_eq!((status, answer["error"]["field"].as_str()), (400, Some("query")), "{answer}");
    let (_, run) = s.get(&format!("/runs/{run}"));
    assert!(!run.to_string().contains('\u{0}'), "nothing was half-written: {run}");
}

#[test]
fn a_media_type_that_names_another_type_is_refused() {
    let s = TestServer::spawn_local();
    let run = s.create_run("p", "r");
    let bytes = b"<script>alert(1)</script>".to_vec();
    let sha = {
        use ring::digest::{digest, SHA256};
        digest(&SHA256, &bytes).as_ref().iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    for mime in ["text/plain;x=1,text/html", "text/plain, text/html", "text/plain; x=\"a,b\""] {
        let put = s
            .client
            .put(s.api(&format!("/runs/{run}/media/blobs/{sha}")))
            .header("content-type", mime)
            .body(bytes.clone())
            .send()
            .expect("the server answers");
        let status = put.status().as_u16();
        let answer: Value = put.json().unwrap_or(Value::Null);
        assert_eq!((status, answer["error"]["field"].as_str()), (400, Some("Content-Type")), "{mime}: {answer}");
    }
}

#[test]
fn a_post_without_a_json_content_type_is_refused_even_without_a_body() {
    let s = TestServer::spawn_local();
    let flush = |content_type: Option<&str>| {
        let mut request = s.client.post(s.api("/admin/flush"));
        if let Some(t) = content_type {
            request = request.header("content-type", t);
        }
        request.send().expect("the server answers").status().as_u16()
    };
    assert_eq!(flush(None), 415, "no Content-Type: a page of any site could send it");
    assert_eq!(flush(Some("text/plain")), 415);
    assert_eq!(flush(Some("application/x-www-form-urlencoded")), 415);
    assert_eq!(flush(Some("multipart/form-data; boundary=x")), 415);
    assert_eq!(flush(Some("application/json")), 200);
}

#[test]
fn failed_key_checks_are_throttled_per_address_and_counted() {
    let s = TestServer::spawn_local_with(&["--auth"]);
    let admin = s.api_key.clone().expect("the admin's key");
    let wrong = format!("tl_000000000000_{}", "0".repeat(64));
    // The default limit: 20 failed checks an address a minute.
    for _ in 0..20 {
        assert_eq!(call(&s, "GET", "/projects", &wrong, None).0, 401);
    }
    let refused = s.client.get(s.api("/projects")).bearer_auth(&wrong).send().expect("the server answers");
    assert_eq!(refused.status().as_u16(), 429);
    let retry: u64 = refused.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    // Throttled, even the right key waits: the address is refused before any key is checked.
    assert_eq!(call(&s, "GET", "/projects", &admin, None).0, 429);
    let another_address = reqwest::blocking::Client::builder()
        .local_address(Some("127.0.0.2".parse().unwrap()))
        .build()
        .expect("a client on 127.0.0.2");
    let answer = another_address.get(s.api("/projects")).bearer_auth(&admin).send().expect("the server answers");
    assert_eq!(answer.status().as_u16(), 200, "another address is not throttled");
    let seen = another_address
        .get(format!("{}/metrics", s.url))
        .bearer_auth(&admin)
        .send()
        .expect("the server answers")
        .text()
        .unwrap_or_default();
    assert!(seen.contains("trainlog_auth_failures_total 20"), "{seen}");
    assert!(seen.contains("trainlog_auth_throttled_total 2"), "{seen}");
}

#[test]
fn metrics_show_projects_money_to_admins_and_the_scraper_only() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("scraper.key");
    let scraper = "0123456789abcdef0123456789abcdef0123";
    std::fs::write(&key_file, format!("{scraper}\n")).unwrap();
    let s = TestServer::spawn_local_with(&["--auth", "--metrics-key-file", key_file.to_str().unwrap()]);
    let admin = s.api_key.clone().expect("the admin's key");
    let ada = s.admin_cli(&["users", "add", "ada"]);
    assert_eq!(call(&s, "POST", "/runs", &admin, Some(&json!({"project": "secret-budget"}))).0, 201);
    let body = json!({"monthly_usd": 5000});
    assert_eq!(call(&s, "PUT", "/projects/secret-budget/budget", &admin, Some(&body)).0, 200);
    let metrics = |key: &str| {
        let answer = s.client.get(format!("{}/metrics", s.url)).bearer_auth(key).send().expect("the server answers");
        (answer.status().as_u16(), answer.text().unwrap_or_default())
    };
    let (status, seen) = metrics(&admin);
    assert_eq!(status, 200);
    assert!(seen.contains("trainlog_project_budget_usd{project=\"secret-budget\"} 5000"), "{seen}");
    assert!(seen.contains("trainlog_auth_failures_total"), "{seen}");
    let (status, seen) = metrics(&ada);
    assert_eq!(status, 200);
    assert!(!seen.contains("secret-budget") && !seen.contains("project_budget_usd"), "{seen}");
    assert!(seen.contains("trainlog_buffered_points"), "the server's own counters stay: {seen}");
    let (status, seen) = metrics(scraper);
    assert_eq!(status, 200);
    assert!(seen.contains("secret-budget"), "{seen}");
    // The scraper's key opens /metrics and nothing else.
    assert_eq!(call(&s, "GET", "/projects", scraper, None).0, 401);
}

fn sha256_hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes).as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Uploads `bytes` as a media blob of the run; answers its SHA-256.
fn put_blob(s: &TestServer, run: &str, bytes: &[u8]) -> String {
    let sha = sha256_hex(bytes);
    let answer = s
        .client
        .put(s.api(&format!("/runs/{run}/media/blobs/{sha}")))
        .header("content-type", "image/png")
        .body(bytes.to_vec())
        .send()
        .expect("the server answers");
    assert!(answer.status().is_success(), "{}", answer.status());
    sha
}

fn record_image(s: &TestServer, run: &str, key: &str, blob: &str) {
    let item = json!({"key": key, "step": 0, "index": 0, "kind": "image", "blob": blob, "mime": "image/png"});
    let (status, body) = s.post(&format!("/runs/{run}/media"), &json!({"items": [item]}));
    assert_eq!(status, 200, "{body}");
}

/// The SHA-256 of every media blob the store holds.
fn blob_files(s: &TestServer) -> BTreeSet<String> {
    let keys = s.object_keys("projects");
    keys.iter()
        .filter(|k| k.contains("/media/sha256/"))
        .filter_map(|k| k.rsplit('/').next())
        .map(str::to_owned)
        .collect()
}

/// An Arrow IPC stream of one Int64 column.
fn arrow_column(name: &str, values: &[i64]) -> Vec<u8> {
    use std::sync::Arc;
    let column: arrow_array::ArrayRef = Arc::new(arrow_array::Int64Array::from(values.to_vec()));
    let batch = arrow_array::RecordBatch::try_from_iter([(name, column)]).expect("a batch");
    let mut bytes = Vec::new();
    let mut writer = arrow_ipc::writer::StreamWriter::try_new(&mut bytes, &batch.schema()).expect("a writer");
    writer.write(&batch).expect("written");
    writer.finish().expect("finished");
    drop(writer);
    bytes
}

/// Blobs that nothing names (an image replaced at its place, a table part replaced, an upload
/// no item came for) are deleted once old enough, and a table part refused leaves none; a blob
/// another run still names, and every blob named now, stay readable.
#[test]
fn media_blobs_that_nothing_names_are_collected_and_named_ones_stay_readable() {
    let mut s = TestServer::spawn();
    let run = s.create_run("vision", "a");
    let other = s.create_run("vision", "b");
    let shared = put_blob(&s, &run, b"shared by two runs");
    record_image(&s, &run, "img", &shared);
    record_image(&s, &other, "img", &shared);
    let third = put_blob(&s, &run, b"replaces the shared one in run a");
    record_image(&s, &run, "img", &third);
    let first = put_blob(&s, &run, b"replaced");
    record_image(&s, &run, "other", &first);
    let second = put_blob(&s, &run, b"replacing");
    record_image(&s, &run, "other", &second);
    let never_named = put_blob(&s, &run, b"uploaded, no item came for it");

    let part = |query: &str, body: Value| {
        let (status, answer) = s.post(&format!("/runs/{run}/tables?key=t&{query}"), &body);
        (status, answer["blob"].as_str().unwrap_or_default().to_owned(), answer)
    };
    let (status, appended, answer) = part("step=0&mode=append", json!({"columns": ["a"], "rows": [[1], [2]]}));
    assert_eq!(status, 200, "{answer}");
    let (status, _, answer) = part("step=0&mode=append", json!({"columns": ["b"], "rows": [[3]]}));
    assert_eq!((status, answer["error"]["field"].as_str()), (409, Some("columns")), "{answer}");
    let arrow = arrow_column("b", &[4, 5]);
    let (status, answer) = s.post_raw(
        &format!("/runs/{run}/tables?key=t&step=0&mode=append"),
        "application/vnd.apache.arrow.stream",
        arrow,
    );
    assert_eq!((status, answer["error"]["field"].as_str()), (409, Some("columns")), "{answer}");
    let (status, replaced_part, _) = part("step=1&mode=replace&index=0", json!({"columns": ["a"], "rows": [[6]]}));
    assert_eq!(status, 200);
    let (status, replacing_part, _) =
        part("step=1&mode=replace&index=0", json!({"columns": ["a"], "rows": [[7], [8]]}));
    assert_eq!(status, 200);
    let named: BTreeSet<String> = [&shared, &third, &second, &appended, &replacing_part].into_iter().cloned().collect();
    let unnamed: BTreeSet<String> = [&first, &never_named, &replaced_part].into_iter().cloned().collect();
    assert_eq!(named.len() + unnamed.len(), 8);
    let before = blob_files(&s);
    assert_eq!(before, named.union(&unnamed).cloned().collect(), "a refused part stores no blob");

    // A server that collects at once: its start-up round takes what nothing names.
    s.set_env("TRAINLOG_ORPHAN_MIN_AGE_S", "0");
    s.restart();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let collected = loop {
        let (_, stats) = s.get("/admin/stats");
        let collected = stats["media_blobs_collected"].as_u64();
        if collected >= Some(unnamed.len() as u64) || std::time::Instant::now() > deadline {
            break (collected, stats);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(collected.0, Some(unnamed.len() as u64), "{}", collected.1);
    assert_eq!(collected.1["media_collection_failures"], 0, "{}", collected.1);
    assert_eq!(blob_files(&s), named, "only the blobs items name are left");
    let metrics = s.client.get(format!("{}/metrics", s.url)).send().expect("the server answers").text().unwrap();
    assert!(metrics.contains(&format!("media_blobs_collected_total {}", unnamed.len())), "{metrics}");

    let blob = |run: &str, sha: &str| {
        let answer = s.client.get(s.api(&format!("/runs/{run}/media/blobs/{sha}"))).send().expect("answers");
        (answer.status().as_u16(), answer.bytes().map(|b| b.to_vec()).unwrap_or_default())
    };
    assert_eq!(blob(&other, &shared), (200, b"shared by two runs".to_vec()), "another run still names it");
    assert_eq!(blob(&run, &third), (200, b"replaces the shared one in run a".to_vec()));
    assert_eq!(blob(&run, &second).0, 200);
    assert_eq!(blob(&run, &first).0, 404, "the run no longer names what it replaced");
    let (status, table) = s.get(&format!("/runs/{run}/tables?key=t"));
    assert_eq!(status, 200, "{table}");
    assert_eq!(table["rows"], json!([[7], [8]]), "{table}");
    let (status, table) = s.get(&format!("/runs/{run}/tables?key=t&step=0"));
    assert_eq!((status, &table["rows"]), (200, &json!([[1], [2]])), "{table}");

    // What was collected may be sent again, and is stored afresh.
    assert_eq!(put_blob(&s, &run, b"replaced"), first);
    record_image(&s, &run, "again", &first);
    assert_eq!(blob(&run, &first), (200, b"replaced".to_vec()));
}

/// A process that resumes a run (after a preemption, say) numbers its table parts from 0 as
/// the first did: its parts follow the earlier process's at the same step instead of replacing
/// them, and a part sent again (a retry after a lost answer) is not appended twice.
#[test]
fn a_resumed_process_appends_table_parts_after_an_earlier_processes_parts() {
    let s = TestServer::spawn();
    let spool = tempfile::tempdir().unwrap();
    let start = || {
        trainlog::Run::builder("tables")
            .id("resumed-tables")
            .server(&s.url)
            .spool_dir(spool.path())
            .resume(trainlog::Resume::Allow)
            .system_metrics(None)
            .capture_code(false)
            .capture_environment(false)
            .start()
            .expect("the run starts")
    };
    let rows = |values: &[i64]| {
        let rows = values.iter().map(|v| vec![json!(v)]).collect();
        vec![trainlog::Media::table_rows(vec!["n".into()], rows).append()]
    };
    let first = start();
    first.log_media("evals", 5, rows(&[1, 2]));
    first.log_media("evals", 5, rows(&[3]));
    assert!(first.flush(std::time::Duration::from_secs(30)));
    let second = start();
    second.log_media("evals", 5, rows(&[4]));
    second.log_media("evals", 5, rows(&[5, 6]));
    second.log_media("evals", 6, rows(&[7]));
    assert!(second.flush(std::time::Duration::from_secs(30)));
    let (status, table) = s.get("/runs/resumed-tables/tables?key=evals&step=5");
    assert_eq!(status, 200, "{table}");
    assert_eq!((&table["rows"], &table["parts"]), (&json!([[1], [2], [3], [4], [5], [6]]), &json!(4)), "{table}");
    let (_, table) = s.get("/runs/resumed-tables/tables?key=evals");
    assert_eq!(table["rows"], json!([[1], [2], [3], [4], [5], [6], [7]]), "{table}");
    for run in [first, second] {
        let summary = run.finish().expect("finished");
        assert_eq!((summary.media_rejected, summary.media_dropped), (0, 0), "{summary:?}");
    }

    // On the wire: a part sent again by its writer lands where it did; another writer's part
    // with the same number follows; a part without a writer is placed by its index, as before.
    let run = s.create_run("tables", "raw");
    let send = |query: &str, value: i64| {
        let path = format!("/runs/{run}/tables?key=t&step=0&mode=append&{query}");
        let (status, answer) = s.post(&path, &json!({"columns": ["n"], "rows": [[value]]}));
        assert_eq!(status, 200, "{query}: {answer}");
        answer["index"].as_u64().expect("an index")
    };
    assert_eq!(send("writer=first&index=0", 1), 0);
    assert_eq!(send("writer=second&index=0", 2), 1);
    assert_eq!(send("writer=first&index=0", 1), 0, "a retry");
    assert_eq!(send("writer=first&index=1", 3), 2);
    assert_eq!(send("index=3", 4), 3);
    let (_, table) = s.get(&format!("/runs/{run}/tables?key=t"));
    assert_eq!(table["rows"], json!([[1], [2], [3], [4]]), "{table}");
    for (query, field) in [("writer=first", "index"), ("writer=a%20b&index=0", "writer")] {
        let path = format!("/runs/{run}/tables?key=t&step=0&mode=append&{query}");
        let (status, answer) = s.post(&path, &json!({"columns": ["n"], "rows": [[0]]}));
        assert_eq!((status, answer["error"]["field"].as_str()), (400, Some(field)), "{query}: {answer}");
    }
}
