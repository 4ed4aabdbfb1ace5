//! A server run with `--auth`, against the real binary: open binds refused without it, every
//! documented route closed without a valid key, keys made and revoked from the command line
//! while the server runs, a run's user taken from its key, and who may do what on projects and
//! models with each default permission.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use trainlog_tests::{binary, json, TestServer, Value};

fn admin_key(s: &TestServer) -> String {
    let path = s.data.join("admin.key");
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&path).expect("admin.key").permissions());
    assert_eq!(mode & 0o777, 0o600, "admin.key is readable by its owner only");
    std::fs::read_to_string(path).expect("admin.key").trim().to_owned()
}

/// A client that sends no key unless told to (the harness's own sends the admin's).
fn bare() -> &'static reqwest::blocking::Client {
    static CLIENT: std::sync::OnceLock<reqwest::blocking::Client> = std::sync::OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::blocking::Client::builder().timeout(Duration::from_secs(60)).build().expect("an HTTP client")
    })
}

fn call(s: &TestServer, method: &str, path: &str, key: Option<&str>, body: Option<&Value>) -> (u16, Value) {
    let mut request =
        bare().request(reqwest::Method::from_bytes(method.as_bytes()).expect("a method"), format!("{}{path}", s.url));
    if let Some(k) = key {
        request = request.bearer_auth(k);
    }
    match body {
        Some(b) => request = request.json(b),
        // A POST without a body still says it is JSON, as every client of the API does.
        None if method == "POST" => request = request.header("content-type", "application/json"),
        None => {}
    }
    let response = request.send().expect("the server answers");
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

/// `trainlog ARGS… --data DATA`; answers the last line of stdout.
#[test]
fn a_reachable_address_without_auth_is_refused_before_binding() {
    let out = Command::new(binary())
        .args(["server", "--host", "0.0.0.0", "--port", "0", "--data"])
        .arg(tempfile::tempdir().unwrap().path().join("data"))
        .env_remove("TRAINLOG_AUTH")
        .stdin(Stdio::null())
        .output()
        .expect("trainlog runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--auth") && stderr.contains("--insecure-no-auth"), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).is_empty(), "it never said it was listening");
}

#[test]
fn every_documented_route_needs_a_valid_key() {
    // Hundreds of failed key checks from one address: not throttled here (trust_defects.rs is).
    let s = TestServer::spawn_local_with(&["--auth", "--max-key-failures", "0"]);
    let key = admin_key(&s);
    let (status, doc) = call(&s, "GET", "/api/v1/openapi.json", Some(&key), None);
    assert_eq!(status, 200);
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in ["get", "post", "put", "patch", "delete"] {
            if item.get(method).is_none() {
                continue;
            }
            let concrete = path
                .replace("{id}", "r1")
                .replace("{name}", "n1")
                .replace("{path}", "a.txt")
                .replace("{version}", "1")
                .replace("{alias}", "champion")
                .replace("{index}", "0")
                .replace("{section}", "code")
                .replace("{user}", "u1")
                .replace("{view}", "v1");
            let m = method.to_uppercase();
            if path.starts_with("/api/v1/health") {
                assert_eq!(call(&s, &m, &concrete, None, None).0, 200, "{m} {path} is open");
                continue;
            }
            let (status, body) = call(&s, &m, &concrete, None, None);
            assert_eq!(status, 401, "{m} {path} without a key: {body}");
            assert_eq!(body["error"]["code"], "unauthenticated", "{body}");
            let wrong = format!("tl_000000000000_{}", "0".repeat(64));
            assert_eq!(call(&s, &m, &concrete, Some(&wrong), None).0, 401, "{m} {path} with a wrong key");
            assert_eq!(call(&s, &m, &concrete, Some("garbage"), None).0, 401, "{m} {path} with garbage");
            checked += 1;
        }
    }
    assert!(checked >= 45, "only {checked} operations checked");
    // The UI's page itself loads; its data needs a key.
    assert_eq!(bare().get(&s.url).send().unwrap().status().as_u16(), 200);
}

#[test]
fn keys_work_until_revoked_and_a_run_belongs_to_its_key() {
    let s = TestServer::spawn_local_with(&["--auth"]);
    let admin = admin_key(&s);
    // A user made from the command line while the server runs.
    let bob = s.admin_cli(&["users", "add", "bob"]);
    assert!(bob.starts_with("tl_"), "{bob}");
    let (status, run) =
        call(&s, "POST", "/api/v1/runs", Some(&bob), Some(&json!({"project": "p", "name": "mine", "user": "mallory"})));
    assert_eq!(status, 201, "{run}");
    assert_eq!(run["user"], "bob", "the run's user is the key's, not the one claimed");
    // Basic auth: the user's name and the key as password; another name is refused.
    let id = run["id"].as_str().unwrap().to_owned();
    let basic = |user: &str| {
        s.client
            .get(format!("{}/api/v1/runs/{id}", s.url))
            .basic_auth(user, Some(&bob))
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(basic("bob"), 200);
    assert_eq!(basic("admin"), 401);
    assert_eq!(call(&s, "GET", "/api/v1/projects", Some(&admin), None).0, 200);

    let listed = s.admin_cli_output(&["keys", "list", "bob"]);
    let key_id = bob.split('_').nth(1).unwrap().to_owned();
    assert!(listed.contains(&key_id), "{listed}");
    // A second key outlives the first one's revocation.
    let second = s.admin_cli(&["keys", "create", "bob"]);
    s.admin_cli(&["keys", "revoke", &key_id]);
    // The server notices a revocation made by another process within its poll (200 ms); this
    // waits for that, boundedly, and never for a time it asserts.
    let deadline = Instant::now() + Duration::from_secs(10);
    while call(&s, "GET", "/api/v1/projects", Some(&bob), None).0 != 401 {
        assert!(Instant::now() < deadline, "a revoked key still works after 10 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(call(&s, "GET", "/api/v1/projects", Some(&second), None).0, 200);
    s.admin_cli(&["users", "remove", "bob"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while call(&s, "GET", "/api/v1/projects", Some(&second), None).0 != 401 {
        assert!(Instant::now() < deadline, "a removed user's key still works after 10 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    // No key is stored in clear.
    for entry in std::fs::read_dir(&s.data).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() && path.file_name().is_some_and(|n| n.to_string_lossy().starts_with("trainlog.db")) {
            let bytes = std::fs::read(&path).unwrap();
            for key in [&bob, &second, &admin] {
                let secret = key.rsplit('_').next().unwrap();
                assert!(!bytes.windows(secret.len()).any(|w| w == secret.as_bytes()), "a key is in {}", path.display());
            }
        }
    }
}

#[test]
fn without_auth_a_loopback_server_needs_no_key() {
    let s = TestServer::spawn_local();
    assert!(!s.data.join("admin.key").exists());
    let (status, run) = call(&s, "POST", "/api/v1/runs", None, Some(&json!({"project": "p", "user": "ada"})));
    assert_eq!((status, run["user"].as_str()), (201, Some("ada")));
}

#[test]
fn login_checks_a_key_and_saves_it_where_every_command_finds_it() {
    let s = TestServer::spawn_local_with(&["--auth"]);
    let admin = admin_key(&s);
    let home = tempfile::tempdir().unwrap();
    let trainlog = |args: &[&str]| {
        Command::new(binary())
            .args(args)
            .env("TRAINLOG_DIR", home.path())
            .env_remove("TRAINLOG_API_KEY")
            .env_remove("TRAINLOG_SERVER")
            .stdin(Stdio::null())
            .output()
            .expect("trainlog runs")
    };
    // Before a login, a command against the server is refused and says how to fix it.
    let refused = trainlog(&["models", "list", "--server", &s.url]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("trainlog login"), "{refused:?}");
    // A wrong key is not saved.
    let bad = trainlog(&["login", &s.url, "--key", &format!("tl_000000000000_{}", "0".repeat(64))]);
    assert!(!bad.status.success(), "{bad:?}");
    assert!(!home.path().join("credentials").exists());
    let ok = trainlog(&["login", &s.url, "--key", &admin]);
    assert!(ok.status.success(), "{ok:?}");
    let path = home.path().join("credentials");
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&path).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    let saved: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(saved[s.url.as_str()], admin.as_str());
    let listed = trainlog(&["models", "list", "--server", &s.url]);
    assert!(listed.status.success(), "{listed:?}");
}

const SWEEP: &str = "command: [\"python\", \"train.py\"]\nmethod: random\nmetric: {name: loss, goal: minimize}\n\
                     parameters:\n  lr: {values: [0.1, 0.01]}\n";

/// Like `call`, with a body of raw bytes.
fn call_bytes(s: &TestServer, method: &str, path: &str, key: &str, body: &[u8]) -> u16 {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
    let request = bare().request(method, format!("{}{path}", s.url)).bearer_auth(key).body(body.to_vec());
    request.send().expect("the server answers").status().as_u16()
}

/// What each kind of user gets for each operation, with `--default-permission` `default`.
fn permission_matrix(default: &str) {
    let s = TestServer::spawn_local_with(&["--auth", "--default-permission", default]);
    let admin = admin_key(&s);
    let [owner, writer, reader, stranger] =
        ["owner", "writer", "reader", "stranger"].map(|name| s.admin_cli(&["users", "add", name]));
    // The owner makes the project (by logging its first run) and the model: they are its admin.
    let (status, run) = call(&s, "POST", "/api/v1/runs", Some(&owner), Some(&json!({"project": "vision"})));
    assert_eq!(status, 201, "{run}");
    let run = run["id"].as_str().unwrap().to_owned();
    assert_eq!(call_bytes(&s, "PUT", &format!("/api/v1/runs/{run}/artifacts/model.bin"), &owner, b"weights"), 201);
    let (status, _) = call(&s, "POST", "/api/v1/models", Some(&owner), Some(&json!({"name": "detector"})));
    assert_eq!(status, 201);
    let (status, sweep) =
        call(&s, "POST", "/api/v1/sweeps", Some(&owner), Some(&json!({"project": "vision", "config": SWEEP})));
    assert_eq!(status, 201, "{sweep}");
    let sweep = sweep["id"].as_str().unwrap().to_owned();
    // Roles given by a project admin through the API, and by the command line.
    for (user, role) in [("writer", "write"), ("reader", "read")] {
        let path = format!("/api/v1/projects/vision/members/{user}");
        assert_eq!(call(&s, "PUT", &path, Some(&owner), Some(&json!({"role": role}))).0, 200);
        s.admin_cli(&["grant", user, "detector", role, "--model"]);
    }
    let (status, members) = call(&s, "GET", "/api/v1/projects/vision/members", Some(&owner), None);
    assert_eq!(status, 200);
    assert_eq!(
        members["members"],
        json!([{"user": "owner", "role": "admin"}, {"user": "reader", "role": "read"}, {"user": "writer", "role": "write"}])
    );
    // Each answer about a project or model says what its caller may do there, so a UI offers
    // only that.
    let get = |key: &str, path: &str| call(&s, "GET", path, Some(key), None).1;
    let listed = |key: &str, path: &str, list: &str, name: &str| {
        let answer = get(key, path);
        answer[list].as_array().and_then(|items| items.iter().find(|i| i["name"] == name).cloned()).unwrap_or_default()
    };
    for (key, want) in [(&admin, "admin"), (&owner, "admin"), (&writer, "write"), (&reader, "read")] {
        assert_eq!(get(key, "/api/v1/projects/vision")["your_role"], want);
        assert_eq!(get(key, "/api/v1/models/detector")["your_role"], want);
        assert_eq!(listed(key, "/api/v1/projects", "projects", "vision")["your_role"], want);
        assert_eq!(listed(key, "/api/v1/models", "models", "detector")["your_role"], want);
    }
    let stranger_role = if default == "none" { Value::Null } else { json!(default) };
    assert_eq!(get(&stranger, "/api/v1/projects/vision")["your_role"], stranger_role);
    assert_eq!(listed(&stranger, "/api/v1/models", "models", "detector")["your_role"], stranger_role);
    // A writer may not hand out roles; a project admin may not touch other projects' members.
    let grant = json!({"role": "admin"});
    assert_eq!(call(&s, "PUT", "/api/v1/projects/vision/members/writer", Some(&writer), Some(&grant)).0, 403);

    type Call<'a> = Box<dyn Fn(&str) -> u16 + 'a>;
    let ops: Vec<(&str, Call)> = vec![
        ("create run", Box::new(|k| call(&s, "POST", "/api/v1/runs", Some(k), Some(&json!({"project": "vision"}))).0)),
        (
            "log metrics",
            Box::new(|k| {
                let points = json!({"points": [{"key": "loss", "step": 1, "value": 0.5}]});
                call(&s, "POST", &format!("/api/v1/runs/{run}/metrics"), Some(k), Some(&points)).0
            }),
        ),
        ("read run", Box::new(|k| call(&s, "GET", &format!("/api/v1/runs/{run}"), Some(k), None).0)),
        (
            "upload artifact",
            Box::new(|k| call_bytes(&s, "PUT", &format!("/api/v1/runs/{run}/artifacts/notes.txt"), k, b"x")),
        ),
        (
            "download artifact",
            Box::new(|k| call(&s, "GET", &format!("/api/v1/runs/{run}/artifacts/model.bin"), Some(k), None).0),
        ),
        (
            "register version",
            Box::new(|k| {
                let body = json!({"run_id": run, "artifact": "model.bin"});
                call(&s, "POST", "/api/v1/models/detector/versions", Some(k), Some(&body)).0
            }),
        ),
        (
            "set alias",
            Box::new(|k| {
                let body = json!({"version": 1});
                call(&s, "PUT", "/api/v1/models/detector/aliases/champion", Some(k), Some(&body)).0
            }),
        ),
        (
            "create sweep",
            Box::new(|k| {
                call(&s, "POST", "/api/v1/sweeps", Some(k), Some(&json!({"project": "vision", "config": SWEEP}))).0
            }),
        ),
        ("stop sweep", Box::new(|k| call(&s, "POST", &format!("/api/v1/sweeps/{sweep}/stop"), Some(k), None).0)),
        (
            "search finds the run",
            Box::new(|k| {
                let (status, found) = call(&s, "POST", "/api/v1/runs/search", Some(k), Some(&json!({})));
                assert_eq!(status, 200);
                let ids: Vec<&str> =
                    found["runs"].as_array().unwrap().iter().filter_map(|r| r["id"].as_str()).collect();
                if ids.contains(&run.as_str()) {
                    200
                } else {
                    404
                }
            }),
        ),
    ];
    // Every writing operation, then every reading one, in `ops` order.
    let all_ok = [201, 200, 200, 201, 200, 201, 200, 201, 200, 200];
    let read_only = [403, 403, 200, 403, 200, 403, 403, 403, 403, 200];
    let hidden = [404; 10];
    let expected: [(&str, &str, [u16; 10]); 5] = [
        ("admin", &admin, all_ok),
        ("owner", &owner, all_ok),
        ("writer", &writer, all_ok),
        ("reader", &reader, read_only),
        ("stranger", &stranger, if default == "none" { hidden } else { read_only }),
    ];
    let mut wrong = Vec::new();
    for (who, key, statuses) in expected {
        for ((op, run_op), want) in ops.iter().zip(statuses) {
            let got = run_op(key);
            if got != want {
                wrong.push(format!("{who} × {op}: {got}, expected {want}"));
            }
        }
    }
    assert!(wrong.is_empty(), "with --default-permission {default}:\n{}", wrong.join("\n"));

    // A refusal says what is missing; a hidden project is not found, under any name.
    let (status, body) = call(&s, "POST", "/api/v1/runs", Some(&reader), Some(&json!({"project": "vision"})));
    assert_eq!((status, body["error"]["code"].as_str()), (403, Some("forbidden")), "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("read") && message.contains("write"), "{message}");
    let listed = call(&s, "GET", "/api/v1/projects", Some(&stranger), None).1;
    let names: Vec<&str> = listed["projects"].as_array().unwrap().iter().filter_map(|p| p["name"].as_str()).collect();
    assert_eq!(names.contains(&"vision"), default != "none", "{names:?}");
    let models = call(&s, "GET", "/api/v1/models", Some(&stranger), None).1;
    assert_eq!(models["models"].as_array().unwrap().is_empty(), default == "none", "{models}");
    // A project a stranger makes is theirs; the others see it as the default permission says.
    let (status, _) = call(&s, "POST", "/api/v1/runs", Some(&stranger), Some(&json!({"project": "mine"})));
    assert_eq!(status, 201);
    let (status, mine) = call(&s, "GET", "/api/v1/projects/mine/members", Some(&stranger), None);
    assert_eq!((status, &mine["members"]), (200, &json!([{"user": "stranger", "role": "admin"}])));
    let expected_for_owner = if default == "none" { 404 } else { 200 };
    assert_eq!(call(&s, "GET", "/api/v1/projects/mine", Some(&owner), None).0, expected_for_owner);
    // `none` keeps one user out even where everyone may read; it holds at once.
    let path = "/api/v1/projects/vision/members/stranger";
    assert_eq!(call(&s, "PUT", path, Some(&owner), Some(&json!({"role": "none"}))).0, 200);
    assert_eq!(call(&s, "GET", &format!("/api/v1/runs/{run}"), Some(&stranger), None).0, 404);
    assert_eq!(call(&s, "PUT", path, Some(&owner), Some(&json!({"role": "write"}))).0, 200);
    let points = json!({"points": [{"key": "loss", "step": 2, "value": 0.4}]});
    assert_eq!(call(&s, "POST", &format!("/api/v1/runs/{run}/metrics"), Some(&stranger), Some(&points)).0, 200);
    // Server counters and users are for server admins.
    assert_eq!(call(&s, "GET", "/api/v1/admin/stats", Some(&owner), None).0, 403);
    assert_eq!(call(&s, "GET", "/api/v1/users", Some(&owner), None).0, 403);
    assert_eq!(call(&s, "GET", "/api/v1/users", Some(&admin), None).0, 200);
}

#[test]
fn permissions_with_default_none() {
    permission_matrix("none");
}

#[test]
fn permissions_with_default_read() {
    permission_matrix("read");
}

#[test]
fn users_and_keys_through_the_api_hold_at_once() {
    let s = TestServer::spawn_local_with(&["--auth"]);
    let admin = admin_key(&s);
    let (status, made) = call(&s, "POST", "/api/v1/users", Some(&admin), Some(&json!({"name": "cy"})));
    assert_eq!(status, 201, "{made}");
    let cy = made["key"].as_str().unwrap().to_owned();
    let (status, me) = call(&s, "GET", "/api/v1/whoami", Some(&cy), None);
    assert_eq!((status, &me["user"], &me["admin"]), (200, &json!("cy"), &json!(false)));
    // A user makes and lists their own keys, not others'.
    let (status, second) = call(&s, "POST", "/api/v1/users/cy/keys", Some(&cy), None);
    assert_eq!(status, 201);
    assert_eq!(call(&s, "POST", "/api/v1/users/admin/keys", Some(&cy), None).0, 403);
    let (status, keys) = call(&s, "GET", "/api/v1/users/cy/keys", Some(&cy), None);
    assert_eq!((status, keys["keys"].as_array().map(Vec::len)), (200, Some(2)));
    assert!(!keys.to_string().contains(&cy[20..]), "a listing never shows a secret");
    // Revoked through the API: refused on the very next request, no poll to wait for.
    let id = made["key_id"].as_str().unwrap();
    assert_eq!(call(&s, "DELETE", &format!("/api/v1/keys/{id}"), Some(&admin), None).0, 200);
    assert_eq!(call(&s, "GET", "/api/v1/whoami", Some(&cy), None).0, 401);
    let second = second["key"].as_str().unwrap().to_owned();
    assert_eq!(call(&s, "GET", "/api/v1/whoami", Some(&second), None).0, 200);
    assert_eq!(call(&s, "DELETE", "/api/v1/users/cy", Some(&admin), None).0, 200);
    assert_eq!(call(&s, "GET", "/api/v1/whoami", Some(&second), None).0, 401);
    // The last admin stays.
    let (status, body) = call(&s, "DELETE", "/api/v1/users/admin", Some(&admin), None);
    assert_eq!(status, 409, "{body}");
}

#[test]
fn an_agent_needs_write_on_the_sweeps_project_and_says_so() {
    let s = TestServer::spawn_local_with(&["--auth"]);
    let owner = s.admin_cli(&["users", "add", "owner"]);
    let helper = s.admin_cli(&["users", "add", "helper"]);
    let config = "project: lab\ncommand: [\"true\"]\nmethod: random\nmetric: {name: loss, goal: minimize}\n\
                  parameters:\n  lr: {values: [0.1, 0.01]}\nrun_cap: 1\n";
    let (status, sweep) = call(&s, "POST", "/api/v1/sweeps", Some(&owner), Some(&json!({"config": config})));
    assert_eq!(status, 201, "{sweep}");
    let id = sweep["id"].as_str().unwrap().to_owned();
    let agent = |key: &str| {
        Command::new(binary())
            .args(["agent", &id, "--cpu-slots", "1", "--server", &s.url])
            .env("TRAINLOG_API_KEY", key)
            .env("TRAINLOG_DIR", s.data.join("agent-home"))
            .stdin(Stdio::null())
            .output()
            .expect("the agent runs")
    };
    // The helper may read the project (the default role) but not run its trials.
    let refused = agent(&helper);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(stderr.contains("helper has the read role") && stderr.contains("this needs write"), "{stderr}");
    assert!(stderr.contains("trainlog grant"), "it says how to get the role: {stderr}");
    let (_, trials) = call(&s, "GET", &format!("/api/v1/sweeps/{id}/trials"), Some(&owner), None);
    assert_eq!(trials["trials"], json!([]), "a refused agent started nothing");
    // Granted write, the same agent runs the sweep to its end; its trial's run is the helper's.
    let grant = json!({"role": "write"});
    assert_eq!(call(&s, "PUT", "/api/v1/projects/lab/members/helper", Some(&owner), Some(&grant)).0, 200);
    let ran = agent(&helper);
    assert!(ran.status.success(), "{}", String::from_utf8_lossy(&ran.stderr));
    let (_, trials) = call(&s, "GET", &format!("/api/v1/sweeps/{id}/trials"), Some(&owner), None);
    let trial = &trials["trials"][0];
    assert_eq!(trial["state"], "finished", "{trials}");
    let run = trial["run_id"].as_str().unwrap();
    assert_eq!(call(&s, "GET", &format!("/api/v1/runs/{run}"), Some(&owner), None).1["user"], "helper");
}

#[test]
fn the_mlflow_door_needs_a_key_too_and_answers_as_mlflow() {
    let s = TestServer::spawn_local_with(&["--auth"]);
    let key = admin_key(&s);
    for (method, path) in [
        ("GET", "/api/2.0/mlflow/experiments/search"),
        ("POST", "/api/2.0/mlflow/experiments/create"),
        ("POST", "/api/2.0/mlflow/runs/create"),
        ("POST", "/api/2.0/mlflow/runs/log-batch"),
        ("GET", "/api/2.0/mlflow/metrics/get-history"),
        ("POST", "/api/2.0/mlflow/registered-models/create"),
        ("POST", "/api/2.0/mlflow/logged-models/search"),
        ("GET", "/ajax-api/2.0/mlflow/experiments/search"),
        ("PUT", "/api/2.0/mlflow-artifacts/artifacts/1/r1/artifacts/a.txt"),
        ("GET", "/api/2.0/mlflow-artifacts/artifacts"),
        ("POST", "/api/2.0/mlflow/no-such-route"),
    ] {
        let (status, body) = call(&s, method, path, None, Some(&json!({})));
        assert_eq!((status, body["error_code"].as_str()), (401, Some("UNAUTHENTICATED")), "{method} {path}: {body}");
    }
    let (status, body) = call(&s, "GET", "/api/2.0/mlflow/experiments/search", Some(&key), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["experiments"][0]["name"], "Default");
}
