//! Archiving, restoring and deleting runs through the native API against the real binary:
//! archived runs leave lists and searches unless asked for, stay readable with `archived: true`,
//! refuse changes until restored, and need write on their project; an archived run deleted for
//! good leaves no row, point or object behind, even after a crash, and needs admin.

use trainlog_tests::{json, TestServer, Value};

fn send(s: &TestServer, method: &str, path: &str, key: Option<&str>, body: Option<&Value>) -> (u16, Value) {
    let client = reqwest::blocking::Client::new();
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
    let mut request = match key {
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

fn ids(list: &Value) -> Vec<String> {
    let mut ids: Vec<String> =
        list["runs"].as_array().expect("runs").iter().map(|r| r["id"].as_str().unwrap().to_owned()).collect();
    ids.sort();
    ids
}

fn field(body: &Value) -> &str {
    body["error"]["field"].as_str().unwrap_or_default()
}

#[test]
fn archived_runs_leave_lists_stay_readable_and_come_back() {
    let mut s = TestServer::spawn_local();
    let [a, b, c] = ["a", "b", "c"].map(|name| {
        let (status, run) = s.post("/runs", &json!({"project": "p", "name": name, "id": format!("run-{name}")}));
        assert_eq!(status, 201, "{run}");
        assert_eq!(run["archived"], false, "{run}");
        run["id"].as_str().unwrap().to_owned()
    });
    assert_eq!(
        s.log(&a, json!([{"key": "loss", "step": 1, "value": 0.5}, {"key": "loss", "step": 2, "value": 0.25}])).0,
        200
    );
    let put = s.client.put(s.api(&format!("/runs/{a}/artifacts/notes.txt"))).body("hi").send().unwrap();
    assert_eq!(put.status().as_u16(), 201);
    // Read once so its project is cached: archiving must still take effect at once.
    assert_eq!(s.get(&format!("/runs/{a}")).0, 200);

    let (status, archived) = s.post(&format!("/runs/{a}/archive"), &json!({}));
    assert_eq!(status, 200, "{archived}");
    assert_eq!((&archived["id"], &archived["archived"], &archived["name"]), (&json!(a), &json!(true), &json!("a")));
    assert_eq!(archived["summary"]["loss"]["last"], 0.25, "the answer is a whole run: {archived}");
    // Again: nothing changes; an empty body is fine too (said to be JSON, as any POST must).
    let again =
        s.client.post(s.api(&format!("/runs/{a}/archive"))).header("content-type", "application/json").send().unwrap();
    assert_eq!(again.status().as_u16(), 200);

    let (status, got) = s.get(&format!("/runs/{a}"));
    assert_eq!((status, &got["archived"]), (200, &json!(true)), "{got}");
    assert_eq!(s.get(&format!("/runs/{b}")).1["archived"], false);

    // Lists and searches: active runs unless asked.
    assert_eq!(ids(&s.get("/projects/p/runs").1), [b.clone(), c.clone()]);
    assert_eq!(ids(&s.get("/projects/p/runs?archived=false").1), [b.clone(), c.clone()]);
    let (status, only) = s.get("/projects/p/runs?archived=true");
    assert_eq!((status, ids(&only)), (200, vec![a.clone()]));
    assert_eq!(only["runs"][0]["archived"], true);
    assert_eq!(ids(&s.get("/projects/p/runs?archived=all").1), [a.clone(), b.clone(), c.clone()]);
    let (status, body) = s.get("/projects/p/runs?archived=yes");
    assert_eq!((status, field(&body)), (400, "archived"), "{body}");
    let search = |archived: Value| s.post("/runs/search", &json!({"project": "p", "archived": archived}));
    assert_eq!(ids(&s.post("/runs/search", &json!({"project": "p"})).1), [b.clone(), c.clone()]);
    assert_eq!(ids(&search(json!(false)).1), [b.clone(), c.clone()]);
    assert_eq!(ids(&search(json!(true)).1), std::slice::from_ref(&a));
    assert_eq!(ids(&search(json!("all")).1), [a.clone(), b.clone(), c.clone()]);
    let (status, all) = s.post("/runs/search", &json!({"archived": "all", "filter": "metrics.loss < 1"}));
    assert_eq!((status, ids(&all)), (200, vec![a.clone()]), "filters apply to archived runs: {all}");
    for bad in [json!("yes"), json!(1), json!(null)] {
        let (status, body) = search(bad.clone());
        if bad.is_null() {
            assert_eq!(status, 200, "null means the default");
            continue;
        }
        assert_eq!((status, field(&body)), (400, "archived"), "{bad}: {body}");
    }
    let projects = s.get("/projects").1;
    assert_eq!(projects["projects"][0]["run_count"], 2, "{projects}");

    // Reads go on.
    assert_eq!(s.series(&a, "loss").len(), 2);
    let (status, many) = s.get(&format!("/metrics?key=loss&runs={a},{b}&buckets=1"));
    assert_eq!((status, many["series"][0]["buckets"][0]["last"].clone()), (200, json!(0.25)), "{many}");
    assert_eq!(s.get(&format!("/runs/{a}/artifacts")).1["artifacts"][0]["path"], "notes.txt");
    assert_eq!(s.client.get(s.api(&format!("/runs/{a}/artifacts/notes.txt"))).send().unwrap().text().unwrap(), "hi");
    // The MLflow door sees the same run as deleted.
    let mlflow: Value =
        s.client.get(format!("{}/api/2.0/mlflow/runs/get?run_id={a}", s.url)).send().unwrap().json().unwrap();
    assert_eq!(mlflow["run"]["info"]["lifecycle_stage"], "deleted", "{mlflow}");

    // Changes wait for a restore.
    let refused: Vec<(u16, Value)> = vec![
        s.log(&a, json!([{"key": "loss", "step": 3, "value": 0.1}])),
        s.patch(&format!("/runs/{a}"), &json!({"notes": "x"})),
        s.post(&format!("/runs/{a}/tags"), &json!({"tags": {"k": "v"}})),
        s.post(&format!("/runs/{a}/finish"), &json!({})),
        send(&s, "PUT", &format!("/runs/{a}/artifacts/more.txt"), None, None),
    ];
    for (status, body) in refused {
        assert_eq!((status, field(&body)), (409, "id"), "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("restore"), "{body}");
    }
    // Known after a restart too, where no cache remembers it.
    s.restart();
    assert_eq!(s.get(&format!("/runs/{a}")).1["archived"], true);
    assert_eq!(s.log(&a, json!([{"key": "loss", "step": 3, "value": 0.1}])).0, 409);

    let (status, restored) = s.post(&format!("/runs/{a}/restore"), &json!({}));
    assert_eq!((status, &restored["archived"]), (200, &json!(false)), "{restored}");
    assert_eq!(s.post(&format!("/runs/{a}/restore"), &json!({})).0, 200, "restoring an active run changes nothing");
    assert_eq!(ids(&s.get("/projects/p/runs").1), [a.clone(), b.clone(), c.clone()]);
    assert_eq!(s.log(&a, json!([{"key": "loss", "step": 3, "value": 0.1}])).0, 200);
    assert_eq!(s.get(&format!("/runs/{a}")).1["summary"]["loss"]["last"], 0.1);

    // Unknown runs, and bodies with anything in them.
    for path in ["/runs/nope/archive", "/runs/no$pe/restore"] {
        let (status, body) = s.post(path, &json!({}));
        assert_eq!((status, body["error"]["code"].as_str()), (404, Some("not_found")), "{path}: {body}");
    }
    let (status, body) = s.post(&format!("/runs/{b}/archive"), &json!({"reason": "old"}));
    assert_eq!(status, 400, "{body}");
    assert_eq!(s.get(&format!("/runs/{b}")).1["archived"], false, "a refused request changes nothing");
}

/// `trainlog ARGS… --data DATA`; answers the last line of stdout (a new user's key).
#[test]
fn archiving_needs_write_and_archived_runs_stay_hidden_from_strangers() {
    let s = TestServer::spawn_local_with(&["--auth", "--default-permission", "none"]);
    let [owner, writer, reader, stranger] =
        ["owner", "writer", "reader", "stranger"].map(|name| s.admin_cli(&["users", "add", name]));
    let (status, run) = send(&s, "POST", "/runs", Some(&owner), Some(&json!({"project": "lab"})));
    assert_eq!(status, 201, "{run}");
    let run = run["id"].as_str().unwrap().to_owned();
    for (user, role) in [("writer", "write"), ("reader", "read")] {
        let path = format!("/projects/lab/members/{user}");
        assert_eq!(send(&s, "PUT", &path, Some(&owner), Some(&json!({"role": role}))).0, 200);
    }
    let archive = |k: &str| send(&s, "POST", &format!("/runs/{run}/archive"), Some(k), Some(&json!({})));
    let restore = |k: &str| send(&s, "POST", &format!("/runs/{run}/restore"), Some(k), Some(&json!({})));
    let read = |k: &str| send(&s, "GET", &format!("/runs/{run}"), Some(k), None);

    let (status, body) = archive(&reader);
    assert_eq!((status, field(&body)), (403, "project"), "{body}");
    assert_eq!(archive(&stranger).0, 404);
    assert_eq!(archive(&writer).0, 200);
    assert_eq!((read(&reader).0, read(&reader).1["archived"].clone()), (200, json!(true)));
    assert_eq!(read(&stranger).0, 404, "an archived run is as hidden as an active one");
    let listed = send(&s, "GET", "/projects/lab/runs?archived=true", Some(&reader), None);
    assert_eq!((listed.0, ids(&listed.1)), (200, vec![run.clone()]));
    let found = send(&s, "POST", "/runs/search", Some(&stranger), Some(&json!({"archived": "all"})));
    assert_eq!((found.0, ids(&found.1)), (200, Vec::<String>::new()));
    assert_eq!(restore(&reader).0, 403);
    assert_eq!(restore(&stranger).0, 404);
    assert_eq!(restore(&writer).1["archived"], false);

    // Deleting for good needs admin on the project: its creator has it.
    assert_eq!(archive(&writer).0, 200);
    let delete = |k: &str| send(&s, "DELETE", &format!("/runs/{run}"), Some(k), None);
    let (status, body) = delete(&writer);
    assert_eq!((status, field(&body)), (403, "project"), "{body}");
    assert_eq!(delete(&reader).0, 403);
    assert_eq!(delete(&stranger).0, 404);
    assert_eq!(read(&reader).0, 200, "a refused delete changes nothing");
    let (status, body) = delete(&owner);
    assert_eq!((status, &body["id"]), (200, &json!(run)), "{body}");
    assert_eq!(read(&owner).0, 404);
}

/// Every file under the local store's project folders whose path names `run`.
fn objects_of(s: &TestServer, run: &str) -> Vec<std::path::PathBuf> {
    fn walk(dir: &std::path::Path, run: &str, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, run, out);
            } else if path.components().any(|c| c.as_os_str() == run) {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&s.data.join("store/projects"), run, &mut out);
    out
}

#[test]
fn a_run_deleted_for_good_leaves_nothing_behind_and_stays_gone_after_a_crash() {
    let mut s = TestServer::spawn_local();
    let [gone, kept] = ["gone", "kept"].map(|name| {
        let (status, run) = s.post("/runs", &json!({"project": "p", "name": name, "id": name, "params": {"lr": 0.1}}));
        assert_eq!(status, 201, "{run}");
        let points: Vec<Value> =
            (1..=3).map(|step| json!({"key": "loss", "step": step, "value": 1.0 / step as f64})).collect();
        assert_eq!(s.log(name, json!(points)).0, 200);
        let put = s.client.put(s.api(&format!("/runs/{name}/artifacts/notes.txt"))).body("hi").send().unwrap();
        assert_eq!(put.status().as_u16(), 201);
        name.to_owned()
    });
    s.flush();
    // One more point each, acknowledged into the write-ahead log and the buffer only.
    for run in [&gone, &kept] {
        assert_eq!(s.log(run, json!([{"key": "loss", "step": 4, "value": 0.2}])).0, 200);
    }
    assert_eq!(objects_of(&s, &gone).len(), 2, "a metric file and an artifact: {:?}", objects_of(&s, &gone));

    let (status, body) = send(&s, "DELETE", &format!("/runs/{gone}"), None, None);
    assert_eq!((status, field(&body)), (409, "id"), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("archive it first"), "{body}");
    assert_eq!(s.get(&format!("/runs/{gone}")).0, 200, "a refused delete changes nothing");
    assert_eq!(s.post(&format!("/runs/{gone}/archive"), &json!({})).0, 200);
    let (status, body) = send(&s, "DELETE", &format!("/runs/{gone}"), None, None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"id": gone, "objects_deleted": 2, "objects_pending": false}));
    assert_eq!(objects_of(&s, &gone), Vec::<std::path::PathBuf>::new());

    let check_gone = |s: &TestServer| {
        for path in
            [format!("/runs/{gone}"), format!("/runs/{gone}/metrics?key=loss"), format!("/runs/{gone}/artifacts")]
        {
            let (status, body) = s.get(&path);
            assert_eq!((status, body["error"]["code"].as_str()), (404, Some("not_found")), "{path}: {body}");
        }
        assert_eq!(ids(&s.post("/runs/search", &json!({"archived": "all"})).1), std::slice::from_ref(&kept));
        let (status, body) = s.post("/runs", &json!({"project": "p", "id": gone}));
        assert_eq!((status, field(&body)), (409, "id"), "the id is not given again: {body}");
        assert_eq!(s.log(&gone, json!([{"key": "loss", "step": 5, "value": 0.1}])).0, 404);
        assert_eq!(send(s, "DELETE", &format!("/runs/{gone}"), None, None).0, 404);
        let losses: Vec<i64> = s.series(&kept, "loss").into_iter().map(|(step, _)| step).collect();
        assert_eq!(losses, [1, 2, 3, 4], "the other run keeps every point");
        assert_eq!(
            s.client.get(s.api(&format!("/runs/{kept}/artifacts/notes.txt"))).send().unwrap().text().unwrap(),
            "hi"
        );
    };
    check_gone(&s);
    // A crash: the log still holds the deleted run's last point, and replaying it must not
    // bring the run's points back into a file.
    s.kill9();
    s.restart();
    s.flush();
    check_gone(&s);
    assert_eq!(objects_of(&s, &gone), Vec::<std::path::PathBuf>::new());
    assert_eq!(objects_of(&s, &kept).len(), 3, "two metric files and the artifact: {:?}", objects_of(&s, &kept));
}
