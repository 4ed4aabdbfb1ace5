//! The model registry over HTTP: versions from checkpoints with lineage, aliases, tags,
//! archive, search, delete, and every error case. Runs against the local store and S3.

use trainlog_tests::{json, TestServer, Value};

fn put_file(s: &TestServer, run: &str, path: &str, body: &[u8]) -> Value {
    let r = s.client.put(s.api(&format!("/runs/{run}/artifacts/{path}"))).body(body.to_vec()).send().unwrap();
    assert_eq!(r.status().as_u16(), 201);
    r.json().unwrap()
}

fn checkpoint(s: &TestServer, run: &str, step: i64, bytes: &[u8], keep_last: Option<u64>) -> Value {
    let name = format!("step-{step:012}");
    let stored = put_file(s, run, &format!("checkpoints/{name}/model.bin"), bytes);
    let mut body =
        json!({"step": step, "files": [{"path": "model.bin", "size": stored["size"], "sha256": stored["sha256"]}]});
    if let Some(n) = keep_last {
        body["keep_last"] = json!(n);
    }
    let (status, answer) = s.post(&format!("/runs/{run}/checkpoints"), &body);
    assert_eq!(status, 201, "{answer}");
    answer
}

fn request(s: &TestServer, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut r = s.client.request(method, s.api(path));
    if let Some(b) = body {
        r = r.json(&b);
    }
    let r = r.send().unwrap();
    let status = r.status().as_u16();
    (status, r.json().unwrap_or(Value::Null))
}

#[test]
fn storage_registry_lifecycle_with_lineage_aliases_and_errors() {
    let s = TestServer::spawn();
    let (_, run) =
        s.post("/runs", &json!({"project": "vision", "name": "resnet-a", "params": {"lr": 0.01, "depth": 50}}));
    let run = run["id"].as_str().unwrap().to_owned();
    s.log(&run, json!([{"key": "val/acc", "step": 10, "value": 0.91}]));
    let put = |section: &str, body: Value| {
        s.client.put(s.api(&format!("/runs/{run}/metadata/{section}"))).json(&body).send().unwrap()
    };
    put("code", json!({"commit": "abc123", "dirty": false}));
    checkpoint(&s, &run, 10, b"weights-10", None);
    checkpoint(&s, &run, 20, b"weights-20", None);

    let (status, model) =
        s.post("/models", &json!({"name": "resnet", "description": "image classifier", "tags": {"task": "vision"}}));
    assert_eq!((status, model["name"].as_str()), (201, Some("resnet")));
    assert_eq!(s.post("/models", &json!({"name": "resnet"})).0, 409, "duplicate model name");

    let (status, v1) = s.post(
        "/models/resnet/versions",
        &json!({"run_id": run, "checkpoint": 10, "alias": "staging", "tags": {"dataset": "v1"}}),
    );
    assert_eq!(status, 201, "{v1}");
    assert_eq!((v1["version"].as_i64(), v1["source"]["name"].as_str()), (Some(1), Some("step-000000000010")));
    assert_eq!(v1["lineage"]["params"], json!({"lr": 0.01, "depth": 50}));
    assert_eq!(v1["lineage"]["metrics"]["val/acc"]["last"], json!(0.91));
    assert_eq!(v1["lineage"]["code"]["commit"], "abc123");
    assert_eq!(v1["lineage"]["run"]["name"], "resnet-a");
    assert_eq!(v1["files"][0]["path"], "checkpoints/step-000000000010/model.bin");
    assert_eq!(v1["source_available"], true);
    let (_, v2) = s.post("/models/resnet/versions", &json!({"run_id": run}));
    assert_eq!(
        (v2["version"].as_i64(), v2["source"]["step"].as_i64()),
        (Some(2), Some(20)),
        "the latest checkpoint by default"
    );

    // Aliases: one version each, movable; a version is found by number or alias.
    let (status, _) = request(&s, reqwest::Method::PUT, "/models/resnet/aliases/champion", Some(json!({"version": 1})));
    assert_eq!(status, 200);
    assert_eq!(s.get("/models/resnet/versions/champion").1["version"], 1);
    request(&s, reqwest::Method::PUT, "/models/resnet/aliases/champion", Some(json!({"version": "2"})));
    assert_eq!(s.get("/models/resnet/versions/champion").1["version"], 2);
    assert_eq!(s.get("/models/resnet").1["aliases"], json!({"champion": 2, "staging": 1}));

    // Tags, description, archive.
    let (status, v1) = request(
        &s,
        reqwest::Method::PATCH,
        "/models/resnet/versions/1",
        Some(json!({"status": "archived", "description": "first try", "tags": {"dataset": null, "note": "old"}})),
    );
    assert_eq!((status, v1["status"].as_str(), v1["tags"].clone()), (200, Some("archived"), json!({"note": "old"})));
    let (_, ready) = s.get("/models/resnet/versions?status=ready");
    assert_eq!(
        ready["versions"].as_array().unwrap().iter().map(|v| v["version"].as_i64().unwrap()).collect::<Vec<_>>(),
        vec![2]
    );
    assert_eq!(
        request(&s, reqwest::Method::PATCH, "/models/resnet/versions/1", Some(json!({"status": "gone"}))).1["error"]
            ["field"],
        "status"
    );

    // Search by name or tag.
    s.post("/models", &json!({"name": "bert", "tags": {"task": "nlp"}}));
    let names = |q: &str| -> Vec<String> {
        s.get(&format!("/models?search={q}")).1["models"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names("res"), vec!["resnet"]);
    assert_eq!(names("nlp"), vec!["bert"]);
    assert_eq!(names(""), vec!["bert", "resnet"]);

    // Errors.
    assert_eq!(s.get("/models/nope").0, 404);
    assert_eq!(s.get("/models/resnet/versions/9").0, 404);
    assert_eq!(s.get("/models/resnet/versions/production").0, 404);
    assert_eq!(s.post("/models/resnet/versions", &json!({"run_id": run, "checkpoint": 99})).0, 409);
    assert_eq!(s.post("/models/resnet/versions", &json!({"run_id": "missing-run"})).0, 404);
    assert_eq!(
        request(&s, reqwest::Method::PUT, "/models/resnet/aliases/9lives", Some(json!({"version": 1}))).1["error"]
            ["field"],
        "alias"
    );

    // A version whose checkpoint fell to retention says so.
    checkpoint(&s, &run, 30, b"weights-30", Some(1));
    let (_, v1) = s.get("/models/resnet/versions/1");
    assert_eq!(v1["source_available"], false);
    assert_eq!(v1["missing_files"], json!(["checkpoints/step-000000000010/model.bin"]));

    // Deletes.
    assert_eq!(request(&s, reqwest::Method::DELETE, "/models/resnet/aliases/champion", None).0, 200);
    assert_eq!(request(&s, reqwest::Method::DELETE, "/models/resnet/aliases/champion", None).0, 404);
    assert_eq!(request(&s, reqwest::Method::DELETE, "/models/resnet/versions/1", None).0, 200);
    assert_eq!(s.get("/models/resnet/versions/staging").0, 404, "a deleted version takes its aliases");
    assert_eq!(request(&s, reqwest::Method::DELETE, "/models/resnet", None).0, 200);
    assert_eq!(s.get("/models/resnet").0, 404);
}
