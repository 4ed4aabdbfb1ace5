//! The route-by-identity matrix of a server run with `--auth`. Every route the application
//! itself lists (its OpenAPI document and the MLflow door's table, `x-mlflow-door`) is tried by
//! every identity that must be refused: no key, a wrong key, a revoked key, a user with no role,
//! a reader writing, a writer of another project naming this project's ids in the path and in
//! the body, and with each character of its fixed prefix percent-encoded. Each cell must be
//! refused with the right status, reveal nothing of the project it may not see, and change
//! nothing; a route added later is in the matrix without anyone adding it here.

use std::collections::BTreeSet;
use std::time::Duration;
use trainlog_tests::{json, TestServer, Value};

/// Marks that only the project `alpha` holds: no answer to an outsider may contain them.
const SECRETS: [&str; 3] = ["alpha-secret-run-name", "alpha-secret-param", "alpha-secret-tag"];

const SWEEP: &str = "command: [\"python\", \"train.py\"]\nmethod: random\nmetric: {name: loss, goal: minimize}\n\
                     parameters:\n  lr: {values: [0.1, 0.01]}\n";

fn client() -> &'static reqwest::blocking::Client {
    static CLIENT: std::sync::OnceLock<reqwest::blocking::Client> = std::sync::OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::blocking::Client::builder().timeout(Duration::from_secs(60)).build().expect("an HTTP client")
    })
}

/// One answer: status and body text.
fn call(s: &TestServer, method: &str, path: &str, key: Option<&str>, body: Option<&Value>) -> (u16, String) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
    let mut request = client().request(method.clone(), format!("{}{path}", s.url));
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
    (response.status().as_u16(), response.text().unwrap_or_default())
}

fn ok_json(s: &TestServer, method: &str, path: &str, key: &str, body: Option<&Value>) -> Value {
    let (status, text) = call(s, method, path, Some(key), body);
    assert!((200..300).contains(&status), "{method} {path}: {status} {text}");
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

/// The objects the matrix aims at, and the keys it tries.
struct World {
    s: TestServer,
    admin: String,
    admin_key_id: String,
    /// Read on project alpha and model alpha-model.
    reader: String,
    /// No role anywhere (the server's default is none).
    nobody: String,
    /// Write on project beta and model beta-model only.
    outsider: String,
    revoked: String,
    run_a: String,
    run_b: String,
    sweep_a: String,
    sweep_b: String,
    experiment_a: String,
    experiment_b: String,
}

fn world() -> World {
    // The matrix makes thousands of failed key checks from one address: no throttling here
    // (`auth.rs` checks it).
    let s = TestServer::spawn_local_with(&["--auth", "--default-permission", "none", "--max-key-failures", "0"]);
    let admin = s.api_key.clone().expect("the admin's key");
    let admin_key_id = admin.split('_').nth(1).expect("tl_ID_SECRET").to_owned();
    let [reader, nobody, outsider, gone] =
        ["reader", "nobody", "outsider", "gone"].map(|n| s.admin_cli(&["users", "add", n]));
    s.admin_cli(&["keys", "revoke", gone.split('_').nth(1).expect("tl_ID_SECRET")]);
    let run = |project: &str, name: &str| {
        ok_json(&s, "POST", "/api/v1/runs", &admin, Some(&json!({"project": project, "name": name})))["id"]
            .as_str()
            .expect("a run id")
            .to_owned()
    };
    let (run_a, run_b) = (run("alpha", SECRETS[0]), run("beta", "beta-run"));
    for (r, marker) in [(&run_a, true), (&run_b, false)] {
        let (p, t) = if marker { (SECRETS[1], SECRETS[2]) } else { ("beta-param", "beta-tag") };
        ok_json(&s, "POST", &format!("/api/v1/runs/{r}/params"), &admin, Some(&json!({"params": {"note": p}})));
        ok_json(&s, "POST", &format!("/api/v1/runs/{r}/tags"), &admin, Some(&json!({"tags": {"note": t}})));
        let points = json!({"points": [{"key": "loss", "step": 1, "value": 0.5}]});
        ok_json(&s, "POST", &format!("/api/v1/runs/{r}/metrics"), &admin, Some(&points));
        let put = client()
            .put(format!("{}/api/v1/runs/{r}/artifacts/a.txt", s.url))
            .bearer_auth(&admin)
            .body(b"weights".to_vec())
            .send()
            .expect("the server answers");
        assert_eq!(put.status().as_u16(), 201);
    }
    for (model, r) in [("alpha-model", &run_a), ("beta-model", &run_b)] {
        ok_json(&s, "POST", "/api/v1/models", &admin, Some(&json!({"name": model})));
        let version = json!({"run_id": r, "artifact": "a.txt"});
        ok_json(&s, "POST", &format!("/api/v1/models/{model}/versions"), &admin, Some(&version));
    }
    let sweep = |project: &str| {
        ok_json(&s, "POST", "/api/v1/sweeps", &admin, Some(&json!({"project": project, "config": SWEEP})))["id"]
            .as_str()
            .expect("a sweep id")
            .to_owned()
    };
    let (sweep_a, sweep_b) = (sweep("alpha"), sweep("beta"));
    s.admin_cli(&["grant", "reader", "alpha", "read"]);
    s.admin_cli(&["grant", "reader", "alpha-model", "read", "--model"]);
    s.admin_cli(&["grant", "outsider", "beta", "write"]);
    s.admin_cli(&["grant", "outsider", "beta-model", "write", "--model"]);
    let experiment = |name: &str| {
        let found = ok_json(
            &s,
            "GET",
            &format!("/api/2.0/mlflow/experiments/get-by-name?experiment_name={name}"),
            &admin,
            None,
        );
        found["experiment"]["experiment_id"].as_str().expect("an experiment id").to_owned()
    };
    let (experiment_a, experiment_b) = (experiment("alpha"), experiment("beta"));
    World {
        admin,
        admin_key_id,
        reader,
        nobody,
        outsider,
        revoked: gone,
        run_a,
        run_b,
        sweep_a,
        sweep_b,
        experiment_a,
        experiment_b,
        s,
    }
}

/// Which project's objects a concrete path names.
#[derive(Clone, Copy, PartialEq)]
enum Target {
    Alpha,
    Beta,
    /// Names that exist nowhere, for comparing with `Alpha`: an outsider must not tell them apart.
    Ghost,
}

impl World {
    /// Every route the application lists: (method, path template).
    fn routes(&self) -> Vec<(String, String)> {
        let doc: Value = ok_json(&self.s, "GET", "/api/v1/openapi.json", &self.admin, None);
        let mut routes = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for method in ["get", "post", "put", "patch", "delete"] {
                if item.get(method).is_some() {
                    routes.insert((method.to_uppercase(), path.clone()));
                }
            }
        }
        let native = routes.len();
        for route in doc["x-mlflow-door"].as_array().expect("the MLflow door's table") {
            routes.insert((route["method"].as_str().unwrap().to_owned(), route["path"].as_str().unwrap().to_owned()));
        }
        assert!(native >= 80, "only {native} documented operations");
        assert!(routes.len() - native >= 100, "only {} MLflow door routes", routes.len() - native);
        routes.into_iter().collect()
    }

    /// A template with its parameters filled in for `target`'s objects.
    fn concrete(&self, template: &str, target: Target) -> String {
        let (run, sweep, project, model, experiment) = match target {
            Target::Alpha => {
                (self.run_a.as_str(), self.sweep_a.as_str(), "alpha", "alpha-model", self.experiment_a.as_str())
            }
            Target::Beta => {
                (self.run_b.as_str(), self.sweep_b.as_str(), "beta", "beta-model", self.experiment_b.as_str())
            }
            Target::Ghost => ("0123456789abcdef0123456789abcdef", "ghostsweep", "ghost", "ghost-model", "987654321"),
        };
        let id = if template.starts_with("/api/v1/sweeps/") {
            sweep.to_owned()
        } else if template.starts_with("/api/v1/keys/") {
            self.admin_key_id.clone()
        } else {
            run.to_owned()
        };
        let name = if template.starts_with("/api/v1/models/") {
            model
        } else if template.starts_with("/api/v1/users/") {
            "admin"
        } else if template.contains("/checkpoints/") {
            "ckpt"
        } else {
            project
        };
        let mlflow_artifact = format!("{experiment}/{run}/artifacts/a.txt");
        // The door's reads take their ids in the query.
        let query = if template.contains("/2.0/mlflow/") {
            format!(
                "?run_id={run}&run_uuid={run}&experiment_id={experiment}&experiment_name={project}&name={model}\
                 &metric_key=loss&version=1&alias=champion"
            )
        } else {
            String::new()
        };
        let path = template
            .replace("{id}", &id)
            .replace("{name}", name)
            .replace("{path:.*}", &mlflow_artifact)
            .replace("{path}", "a.txt")
            .replace("{version}", "1")
            .replace("{alias}", "champion")
            .replace("{index}", "0")
            .replace("{section}", "code")
            .replace("{user}", "reader")
            .replace("{view}", "v1")
            .replace("{channel}", "1")
            .replace("{rule}", "1")
            .replace("{sha256}", &"0".repeat(64))
            .replace("{model_id}", "m-0")
            .replace("{key}", "k");
        path + &query
    }

    /// A body naming `target`'s objects in every field a route may read them from.
    fn body(&self, target: Target) -> Value {
        let (run, project, model, experiment) = match target {
            Target::Alpha => (&self.run_a, "alpha", "alpha-model", &self.experiment_a),
            Target::Beta => (&self.run_b, "beta", "beta-model", &self.experiment_b),
            Target::Ghost => {
                (&"0123456789abcdef0123456789abcdef".to_owned(), "ghost", "ghost-model", &"987654321".to_owned())
            }
        };
        let (run, experiment) = (run.clone(), experiment.clone());
        json!({
            "project": project, "name": model, "run_id": run, "run_uuid": run, "run_ids": [run], "runs": [run],
            "parent_id": run, "experiment_id": experiment, "experiment_ids": [experiment],
            "source": format!("runs:/{run}/a.txt"), "artifact": "a.txt", "version": "1", "alias": "champion",
            "key": "loss", "value": "1", "timestamp": 0, "step": 0, "role": "admin", "admin": true,
            "points": [{"key": "loss", "step": 1, "value": 1.0}], "params": {"lr": "1"}, "tags": {"t": "1"},
            "metrics": [{"key": "loss", "value": 1.0, "timestamp": 0, "step": 0}],
            "config": SWEEP, "monthly_usd": 1.0, "usd_per_hour": 0.0, "status": "finished", "up_to": 0,
        })
    }

    /// What the admin sees of every object the matrix aims at, less what changes with time alone.
    fn state(&self) -> Value {
        let mut state = serde_json::Map::new();
        let mut read = |path: String| {
            let value = ok_json(&self.s, "GET", &path, &self.admin, None);
            state.insert(path, without_clock_fields(value));
        };
        for project in ["alpha", "beta"] {
            read(format!("/api/v1/projects/{project}"));
            read(format!("/api/v1/projects/{project}/members"));
            read(format!("/api/v1/projects/{project}/budget"));
            read(format!("/api/v1/projects/{project}/views"));
            read(format!("/api/v1/projects/{project}/runs"));
        }
        for run in [&self.run_a, &self.run_b] {
            read(format!("/api/v1/runs/{run}"));
            read(format!("/api/v1/runs/{run}/artifacts"));
            read(format!("/api/v1/runs/{run}/checkpoints"));
            read(format!("/api/v1/runs/{run}/media/keys"));
            read(format!("/api/v1/runs/{run}/metrics?key=loss"));
            read(format!("/api/v1/runs/{run}/logs"));
        }
        for model in ["alpha-model", "beta-model"] {
            read(format!("/api/v1/models/{model}"));
            read(format!("/api/v1/models/{model}/versions"));
            read(format!("/api/v1/models/{model}/members"));
        }
        for sweep in [&self.sweep_a, &self.sweep_b] {
            read(format!("/api/v1/sweeps/{sweep}"));
        }
        read("/api/v1/projects".into());
        read("/api/v1/models".into());
        read("/api/v1/users".into());
        read("/api/v1/prices".into());
        Value::Object(state)
    }
}

/// Drops the fields that move with the clock or with the admin's own reads (a key's last use).
fn without_clock_fields(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(k, _)| !k.contains("last_used") && !k.ends_with("_age_ms") && k != "now_ms")
                .map(|(k, v)| (k, without_clock_fields(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_clock_fields).collect()),
        other => other,
    }
}

fn is_open(method: &str, template: &str) -> bool {
    method == "GET" && template.starts_with("/api/v1/health")
}

/// A refusal names what went wrong in the API's shape (MLflow's under its door), and never in
/// the server's own debug notation.
fn assert_refusal_body(cell: &str, text: &str) {
    let body: Value = serde_json::from_str(text).unwrap_or_else(|_| panic!("{cell}: not JSON: {text}"));
    let native = body["error"]["code"].is_string() && body["error"]["message"].is_string();
    let mlflow = body["error_code"].is_string() && body["message"].is_string();
    assert!(native || mlflow, "{cell}: {text}");
    for debug in ["RunId(", "ProjectName(", "MetricKey(", "ModelName(", "Some(\""] {
        assert!(!text.contains(debug), "{cell}: debug notation in {text}");
    }
}

#[test]
fn no_key_a_wrong_key_and_a_revoked_key_are_refused_on_every_route() {
    let w = world();
    let routes = w.routes();
    let before = w.state();
    let wrong = format!("tl_000000000000_{}", "0".repeat(64));
    for (method, template) in &routes {
        let path = w.concrete(template, Target::Alpha);
        let body = (method != "GET").then(|| w.body(Target::Alpha));
        for (who, key) in [("no key", None), ("a wrong key", Some(wrong.as_str())), ("a revoked key", Some(&w.revoked))]
        {
            let (status, text) = call(&w.s, method, &path, key, body.as_ref());
            let cell = format!("{method} {path} with {who}");
            if is_open(method, template) {
                assert_eq!(status, 200, "{cell}: {text}");
                continue;
            }
            assert_eq!(status, 401, "{cell}: {text}");
            assert_refusal_body(&cell, &text);
        }
    }
    assert_eq!(w.state(), before, "a refused request changed something");
}

#[test]
fn every_route_prefix_percent_encoded_at_any_position_is_decided_as_the_router_reads_it() {
    let w = world();
    let mut tried = 0;
    for (method, template) in &w.routes() {
        if is_open(method, template) {
            continue;
        }
        let path = w.concrete(template, Target::Alpha);
        let fixed = template.find('{').unwrap_or(template.len());
        let plain_for_reader = (method == "GET").then(|| call(&w.s, method, &path, Some(&w.reader), None).0);
        // The first slash starts the request target; it has no other spelling.
        for (i, c) in path[..fixed].char_indices().skip(1) {
            // Upper- and lower-case hex alike, as a client may write either.
            let encoded = if i % 2 == 0 { format!("%{:02X}", c as u32) } else { format!("%{:02x}", c as u32) };
            let spelled = format!("{}{encoded}{}", &path[..i], &path[i + c.len_utf8()..]);
            let (status, text) = call(&w.s, method, &spelled, None, None);
            assert_eq!(status, 401, "{method} {spelled} without a key: {text}");
            if let Some(plain) = plain_for_reader {
                // A slash encoded is a different path to the router; any other character is not.
                if c != '/' {
                    let (status, text) = call(&w.s, method, &spelled, Some(&w.reader), None);
                    assert_eq!(status, plain, "{method} {spelled} with a reader's key answers as {path}: {text}");
                }
            }
            tried += 1;
        }
    }
    assert!(tried > 2_000, "only {tried} spellings tried");
}

#[test]
fn users_without_a_role_readers_writing_and_other_projects_writers_are_refused_and_see_nothing() {
    let w = world();
    let before = w.state();
    let mut refused = 0;
    for (method, template) in &w.routes() {
        if is_open(method, template) || template == "/api/v1/openapi.json" {
            continue;
        }
        let write = method != "GET";
        let alpha = w.concrete(template, Target::Alpha);
        let ghost = w.concrete(template, Target::Ghost);
        // Who tries what: a user with no role on alpha's objects in the path and the body; a
        // reader writing there; beta's writer on beta's objects with alpha's ids in the body.
        let mut cells = vec![
            ("nobody", &w.nobody, alpha.clone(), Target::Alpha),
            ("the outsider", &w.outsider, alpha.clone(), Target::Alpha),
        ];
        if write {
            cells.push(("a reader", &w.reader, alpha.clone(), Target::Alpha));
            cells.push(("beta's writer", &w.outsider, w.concrete(template, Target::Beta), Target::Alpha));
        }
        for (who, key, path, body_target) in cells {
            let body = write.then(|| w.body(body_target));
            let (status, text) = call(&w.s, method, &path, Some(key), body.as_ref());
            let cell = format!("{method} {path} by {who}");
            assert!(status < 500, "{cell}: {status} {text}");
            if who != "a reader" {
                for secret in SECRETS {
                    assert!(!text.contains(secret), "{cell} reveals {secret}: {text}");
                }
            }
            if (200..300).contains(&status) {
                // Allowed: a read that shows nothing of alpha (a list, a search), or beta's writer
                // writing to beta; either way alpha is unchanged (checked below).
                assert!(who != "a reader" || !write || is_read_only(method, template), "{cell}: {status} {text}");
            } else {
                assert_refusal_body(&cell, &text);
                refused += 1;
            }
            if who == "beta's writer" && (200..300).contains(&status) {
                assert!(!text.contains(&w.run_a), "{cell} took alpha's run: {text}");
            }
            // Ids in the path (or a read's body) exist or not alike; a name a request creates
            // is unique across projects, so its existence is not hidden from creators.
            if who == "nobody" && (template.contains('{') || !write || is_read_only(method, template)) {
                // Alpha exists and ghost does not: to a user who may not see alpha, they answer alike.
                let ghost_body = write.then(|| w.body(Target::Ghost));
                let (ghost_status, ghost_text) = call(&w.s, method, &ghost, Some(key), ghost_body.as_ref());
                assert_eq!(status, ghost_status, "{cell} tells alpha from ghost: {text} / {ghost_text}");
            }
        }
    }
    assert!(refused > 300, "only {refused} cells refused");
    let after = w.state();
    for (path, value) in before.as_object().unwrap() {
        if path.contains("alpha") || path.contains(&w.run_a) || path.contains(&w.sweep_a) {
            assert_eq!(&after[path], value, "{path} changed");
        }
    }
    assert_eq!(after["/api/v1/users"], before["/api/v1/users"], "users or keys changed");
    assert_eq!(after["/api/v1/prices"], before["/api/v1/prices"], "the price catalog changed");
}

/// Routes whose method is not GET but which only read, or change only the caller's own state
/// (how far they have read a project's alerts).
fn is_read_only(method: &str, template: &str) -> bool {
    method == "POST"
        && (template.ends_with("/search")
            || template.ends_with("/metrics/query")
            || template.ends_with("/get-latest-versions")
            || template.ends_with("/artifacts/list")
            || template.ends_with("/alerts/read"))
}

#[test]
fn a_post_a_page_of_any_site_could_send_changes_nothing_on_any_route() {
    let w = world();
    let before = w.state();
    let mut tried = 0;
    for (method, template) in &w.routes() {
        if method != "POST" {
            continue;
        }
        let path = w.concrete(template, Target::Alpha);
        // What a form or a no-cors fetch sends: no Content-Type, a form's, or text/plain.
        let sends: [(Option<&str>, Vec<u8>); 3] = [
            (None, Vec::new()),
            (Some("application/x-www-form-urlencoded"), b"project=alpha&name=x".to_vec()),
            (Some("text/plain"), serde_json::to_vec(&w.body(Target::Alpha)).unwrap()),
        ];
        for (content_type, body) in sends {
            let mut request = client().post(format!("{}{path}", w.s.url)).bearer_auth(&w.admin).body(body);
            if let Some(t) = content_type {
                request = request.header("content-type", t);
            }
            let response = request.send().expect("the server answers");
            let status = response.status().as_u16();
            let text = response.text().unwrap_or_default();
            let cell = format!("POST {path} as {content_type:?} by the admin");
            assert!(!(200..300).contains(&status) && status < 500, "{cell}: {status} {text}");
            assert_refusal_body(&cell, &text);
            tried += 1;
        }
    }
    assert!(tried >= 150, "only {tried} posts tried");
    assert_eq!(w.state(), before, "a post a page could send changed something");
}
