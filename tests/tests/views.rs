//! Saved views of a project against the real binary: create, replace, list, read, delete, the
//! refusals naming their field, and who may read or change them on a server run with `--auth`.

use trainlog_tests::{json, urlencode, TestServer, Value};

fn send(s: &TestServer, method: &str, path: &str, key: Option<&str>, body: Option<&Value>) -> (u16, Value) {
    let client = reqwest::blocking::Client::new();
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
    let mut request = match key {
        // The harness's client sends the admin's key, if any; this one sends only the one given.
        Some(k) => client.request(method, s.api(path)).bearer_auth(k),
        None => s.client.request(method, s.api(path)),
    };
    if let Some(b) = body {
        request = request.json(b);
    }
    let response = request.send().expect("the server answers");
    let status = response.status().as_u16();
    let text = response.text().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

fn view_path(project: &str, view: &str) -> String {
    format!("/projects/{}/views/{}", urlencode(project), urlencode(view))
}

fn field(body: &Value) -> &str {
    body["error"]["field"].as_str().unwrap_or_default()
}

#[test]
fn views_are_saved_replaced_listed_read_and_deleted() {
    let s = TestServer::spawn_local();
    assert_eq!(s.post("/projects", &json!({"name": "vision"})).0, 201);
    assert_eq!(s.get("/projects/vision/views"), (200, json!({"views": []})));

    let state = json!({"filter": "params.lr > 0.01", "sort": ["metrics.loss asc"], "columns": ["name", "loss"],
                       "charts": [{"key": "loss", "smoothing": 0.6, "log": true}]});
    let (status, made) = send(&s, "PUT", &view_path("vision", "best runs"), None, Some(&json!({"state": state})));
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["name"], "best runs");
    assert_eq!(made["user"], Value::Null, "no user without --auth");
    assert_eq!(made["state"], state);
    let first_time = made["updated_time"].as_i64().expect("updated_time");
    assert!(first_time > 1_600_000_000_000);

    // Replacing answers 200 with the new state; a name with unicode and inner slashes' cousins works.
    std::thread::sleep(std::time::Duration::from_millis(5));
    let newer = json!({"filter": "", "columns": []});
    let (status, replaced) = send(&s, "PUT", &view_path("vision", "best runs"), None, Some(&json!({"state": newer})));
    assert_eq!((status, &replaced["state"]), (200, &newer), "{replaced}");
    assert!(replaced["updated_time"].as_i64().unwrap() >= first_time);
    let (status, _) = send(&s, "PUT", &view_path("vision", " Ünïcode view "), None, Some(&json!({"state": {}})));
    assert_eq!(status, 201);
    assert_eq!(send(&s, "PUT", &view_path("vision", "alpha"), None, Some(&json!({"state": {"a": 1}}))).0, 201);

    let (status, listed) = s.get("/projects/vision/views");
    assert_eq!(status, 200);
    let names: Vec<&str> = listed["views"].as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap()).collect();
    assert_eq!(names, [" Ünïcode view ", "alpha", "best runs"], "sorted by name");
    for v in listed["views"].as_array().unwrap() {
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 3, "name, user and updated_time, no state: {v}");
        assert!(v["updated_time"].is_i64() && v.get("user").is_some());
    }
    let (status, got) = s.get(&view_path("vision", "best runs"));
    assert_eq!(status, 200);
    assert_eq!(got, replaced);

    assert_eq!(send(&s, "DELETE", &view_path("vision", "best runs"), None, None), (200, json!({"status": "ok"})));
    let (status, body) = send(&s, "DELETE", &view_path("vision", "best runs"), None, None);
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("not_found")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("best runs"), "{body}");
    assert_eq!(s.get(&view_path("vision", "best runs")).0, 404);
    assert_eq!(s.get("/projects/vision/views").1["views"].as_array().unwrap().len(), 2);
    // Views survive a restart.
    let mut s = s;
    s.restart();
    assert_eq!(s.get(&view_path("vision", "alpha")).1["state"], json!({"a": 1}));
}

#[test]
fn bad_views_are_refused_naming_the_field() {
    let s = TestServer::spawn_local();
    assert_eq!(s.post("/projects", &json!({"name": "p"})).0, 201);
    let put = |view: &str, body: Value| send(&s, "PUT", &view_path("p", view), None, Some(&body));
    let ok = json!({"state": {}});
    for bad_name in ["x".repeat(101), "   ".to_owned(), "a\u{1}b".to_owned(), "tab\there".to_owned()] {
        let (status, body) = put(&bad_name, ok.clone());
        assert_eq!((status, field(&body)), (400, "view"), "{bad_name:?}: {body}");
        assert_eq!(s.get(&view_path("p", &bad_name)).0, 400);
        assert_eq!(send(&s, "DELETE", &view_path("p", &bad_name), None, None).0, 400);
    }
    assert_eq!(put(&"x".repeat(100), ok.clone()).0, 201, "100 characters are fine");
    assert_eq!(put(&"é".repeat(100), ok.clone()).0, 201, "characters, not bytes");
    for (body, want) in [
        (json!({"state": [1, 2]}), "state"),
        (json!({"state": "text"}), "state"),
        (json!({"state": null}), "state"),
        (json!({}), "state"),
        (json!({"state": {}, "name": "other"}), ""),
    ] {
        let (status, answer) = put("v", body.clone());
        assert_eq!(status, 400, "{body}: {answer}");
        assert_eq!(answer["error"]["code"], "invalid_argument", "{answer}");
        if want.is_empty() {
            assert!(answer["error"]["message"].as_str().unwrap().contains("unknown field"), "{answer}");
        } else {
            assert_eq!(field(&answer), want, "{body}: {answer}");
        }
    }
    // 64 KiB of JSON text at most.
    let big = |n: usize| json!({"state": {"s": "x".repeat(n)}});
    let overhead = r#"{"s":""}"#.len();
    assert_eq!(put("big", big((64 << 10) - overhead)).0, 201);
    let (status, body) = put("big", big((64 << 10) - overhead + 1));
    assert_eq!((status, field(&body)), (400, "state"), "{body}");
    assert_eq!(s.get(&view_path("p", "big")).1["state"]["s"].as_str().map(str::len), Some((64 << 10) - overhead));
    // Not JSON at all, and another media type.
    let raw = s
        .client
        .put(s.api(&view_path("p", "v")))
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .unwrap()
        .status()
        .as_u16();
    assert_eq!(raw, 415);
    // An unknown project has no views, and saving one does not create it.
    for (method, path) in [
        ("GET", "/projects/nope/views".to_owned()),
        ("GET", view_path("nope", "v")),
        ("PUT", view_path("nope", "v")),
        ("DELETE", view_path("nope", "v")),
    ] {
        let (status, body) = send(&s, method, &path, None, Some(&ok));
        assert_eq!((status, body["error"]["code"].as_str()), (404, Some("not_found")), "{method} {path}: {body}");
    }
    assert_eq!(s.get("/projects/nope").0, 404, "PUT made no project");
}

/// `trainlog ARGS… --data DATA`; answers the last line of stdout (a new user's key).
#[test]
fn reading_views_needs_read_and_changing_them_needs_write() {
    let s = TestServer::spawn_local_with(&["--auth", "--default-permission", "none"]);
    let [owner, writer, reader, stranger] =
        ["owner", "writer", "reader", "stranger"].map(|name| s.admin_cli(&["users", "add", name]));
    assert_eq!(send(&s, "POST", "/projects", Some(&owner), Some(&json!({"name": "lab"}))).0, 201);
    for (user, role) in [("writer", "write"), ("reader", "read")] {
        let path = format!("/projects/lab/members/{user}");
        assert_eq!(send(&s, "PUT", &path, Some(&owner), Some(&json!({"role": role}))).0, 200);
    }
    let (status, made) = send(&s, "PUT", &view_path("lab", "mine"), Some(&owner), Some(&json!({"state": {"k": 1}})));
    assert_eq!((status, &made["user"]), (201, &json!("owner")), "{made}");

    let state = json!({"state": {"k": 2}});
    let list = |k: &str| send(&s, "GET", "/projects/lab/views", Some(k), None).0;
    let get = |k: &str| send(&s, "GET", &view_path("lab", "mine"), Some(k), None).0;
    let put = |k: &str| send(&s, "PUT", &view_path("lab", "mine"), Some(k), Some(&state)).0;
    let delete = |k: &str| send(&s, "DELETE", &view_path("lab", "other"), Some(k), None).0;
    let make_other = || send(&s, "PUT", &view_path("lab", "other"), Some(&owner), Some(&json!({"state": {}}))).0;

    assert_eq!((list(&reader), get(&reader), put(&reader)), (200, 200, 403));
    assert_eq!(make_other(), 201);
    let (status, body) = send(&s, "DELETE", &view_path("lab", "other"), Some(&reader), None);
    assert_eq!((status, field(&body)), (403, "project"), "{body}");
    // A stranger may not even learn that the project exists.
    assert_eq!((list(&stranger), get(&stranger), put(&stranger), delete(&stranger)), (404, 404, 404, 404));
    // A writer saves (the view is then theirs) and deletes.
    assert_eq!((list(&writer), get(&writer), put(&writer)), (200, 200, 200));
    let (_, got) = send(&s, "GET", &view_path("lab", "mine"), Some(&owner), None);
    assert_eq!((&got["user"], &got["state"]), (&json!("writer"), &json!({"k": 2})));
    assert_eq!(delete(&writer), 200);
    assert_eq!(delete(&writer), 404);
}
