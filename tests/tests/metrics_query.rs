//! `POST /metrics/query` against the real binary: by run it answers what `GET /metrics` answers,
//! past its 1,000 ids; by group it buckets each group's runs on one step grid; refusals name
//! their field, unknown runs are not found by id, and runs the caller may not read are hidden.

use trainlog_tests::{json, TestServer, Value};

fn field(body: &Value) -> &str {
    body["error"]["field"].as_str().unwrap_or_default()
}

fn points(values: &[(i64, Value)]) -> Value {
    Value::Array(values.iter().map(|(step, v)| json!({"key": "loss", "step": step, "value": v})).collect())
}

#[test]
fn by_run_it_answers_what_the_get_answers() {
    let s = TestServer::spawn_local();
    let ids: Vec<String> = (0..3).map(|i| s.create_run("p", &format!("r{i}"))).collect();
    for (i, id) in ids.iter().enumerate() {
        let series: Vec<(i64, Value)> = (0..50).map(|step| (step, json!(step as f64 * (i + 1) as f64))).collect();
        assert_eq!(s.log(id, points(&series)).0, 200);
    }
    assert_eq!(s.log(&ids[1], points(&[(50, json!("NaN")), (51, json!("-Infinity"))])).0, 200);
    for (query, body) in [
        ("buckets=7", json!({"key": "loss", "buckets": 7, "runs": ids})),
        (
            "buckets=3&step_min=10&step_max=20",
            json!({"key": "loss", "buckets": 3, "step_min": 10, "step_max": 20, "runs": ids}),
        ),
        ("buckets=100000", json!({"key": "loss", "buckets": 100000, "runs": [&ids[1], &ids[0], &ids[1]]})),
    ] {
        let runs: Vec<&str> = body["runs"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        let (status, got) = s.get(&format!("/metrics?key=loss&runs={}&{query}", runs.join(",")));
        assert_eq!(status, 200, "{got}");
        let (status, posted) = s.post("/metrics/query", &body);
        assert_eq!(status, 200, "{posted}");
        assert_eq!(posted, got, "{query}");
    }
    // A key nobody logged: empty buckets for each run.
    let (status, none) = s.post("/metrics/query", &json!({"key": "acc", "buckets": 5, "runs": [&ids[0]]}));
    assert_eq!((status, &none["series"][0]["buckets"]), (200, &json!([])), "{none}");

    // Past the GET's 1,000 ids.
    let many: Vec<String> = (0..1_200).map(|i| s.create_run("wide", &format!("w{i}"))).collect();
    assert_eq!(s.log(&many[1_100], points(&[(3, json!(0.5))])).0, 200);
    let (status, answer) = s.post("/metrics/query", &json!({"key": "loss", "buckets": 10, "runs": many}));
    assert_eq!(status, 200);
    let series = answer["series"].as_array().unwrap();
    assert_eq!(series.len(), 1_200);
    assert_eq!(series[1_100]["run_id"], many[1_100].as_str());
    assert_eq!(series[1_100]["buckets"][0]["last"], 0.5);
    let (status, groups) = s.post("/metrics/query", &json!({"key": "loss", "buckets": 10, "groups": {"all": many}}));
    assert_eq!(status, 200);
    assert_eq!(
        (&groups["groups"][0]["runs"], &groups["groups"][0]["runs_without_points"]),
        (&json!(1_200), &json!(1_199))
    );
}

#[test]
fn by_group_runs_share_one_grid_with_means_extremes_and_counts() {
    let s = TestServer::spawn_local();
    let [a, b, c, empty] = ["a", "b", "c", "empty"].map(|name| s.create_run("p", name));
    // a: steps 0..=9 valued as their step, with +inf at 5; b: steps 0..=19 valued 100 + step,
    // NaN at 19; c: steps 0..=3 valued 1.
    let mut a_points: Vec<(i64, Value)> = (0..10).map(|i| (i, json!(i))).collect();
    a_points[5].1 = json!("Infinity");
    let mut b_points: Vec<(i64, Value)> = (0..20).map(|i| (i, json!(100 + i))).collect();
    b_points[19].1 = json!("NaN");
    assert_eq!(s.log(&a, points(&a_points)).0, 200);
    assert_eq!(s.log(&b, points(&b_points)).0, 200);
    assert_eq!(s.log(&c, points(&(0..4).map(|i| (i, json!(1))).collect::<Vec<_>>())).0, 200);
    // Archived runs are read like the others.
    assert_eq!(s.post(&format!("/runs/{c}/archive"), &json!({})).0, 200);

    // Written out, so the groups come in this order (a JSON object built here would sort them).
    let body = format!(
        r#"{{"key": "loss", "buckets": 2, "groups": {{"zeta": ["{a}", "{b}", "{empty}", "{a}"], "alpha": ["{c}", "{a}"]}}}}"#
    );
    let (status, answer) = s.post_raw("/metrics/query", "application/json", body.into_bytes());
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["key"], "loss");
    let zeta = &answer["groups"][0];
    assert_eq!(
        (&zeta["name"], &zeta["runs"], &zeta["runs_without_points"]),
        (&json!("zeta"), &json!(3), &json!(1)),
        "{zeta}"
    );
    // The grid spans 0..=19 in two buckets of ten steps.
    assert_eq!(
        zeta["buckets"],
        json!([
            {"step_min": 0, "step_max": 9, "mean": 59.0, "min": 0.0, "max": "Infinity", "runs": 2},
            {"step_min": 10, "step_max": 19, "mean": null, "min": 110.0, "max": 118.0, "runs": 1},
        ])
    );
    // Another group, another grid: 0..=9 in buckets of five.
    let alpha = &answer["groups"][1];
    assert_eq!(
        (&alpha["name"], &alpha["runs"], &alpha["runs_without_points"]),
        (&json!("alpha"), &json!(2), &json!(0))
    );
    assert_eq!(
        alpha["buckets"],
        json!([
            {"step_min": 0, "step_max": 4, "mean": 2.5, "min": 0.0, "max": 4.0, "runs": 2},
            {"step_min": 5, "step_max": 9, "mean": 9.0, "min": 6.0, "max": "Infinity", "runs": 1},
        ])
    );
    // A step range cuts the points first; a group with nothing in it has no buckets.
    let (status, ranged) = s.post(
        "/metrics/query",
        &json!({"key": "loss", "buckets": 1, "step_min": 10, "groups": {"late": [a, b], "none": [c, empty], "no runs": []}}),
    );
    assert_eq!(status, 200, "{ranged}");
    let group = |name: &str| {
        ranged["groups"].as_array().unwrap().iter().find(|g| g["name"] == name).cloned().expect("the group")
    };
    let late = group("late");
    assert_eq!(
        late["buckets"],
        json!([{"step_min": 10, "step_max": 19, "mean": null, "min": 110.0, "max": 118.0, "runs": 1}])
    );
    assert_eq!(late["runs_without_points"], 1);
    assert_eq!((&group("none")["buckets"], &group("none")["runs_without_points"]), (&json!([]), &json!(2)));
    assert_eq!((&group("no runs")["runs"], &group("no runs")["buckets"]), (&json!(0), &json!([])));
}

#[test]
fn bad_queries_are_refused_naming_the_field_and_unknown_runs_are_not_found() {
    let s = TestServer::spawn_local();
    let run = s.create_run("p", "r");
    let ids = |n: usize| Value::Array((0..n).map(|i| json!(format!("r{i}"))).collect());
    let groups = |n: usize, each: usize| Value::Object((0..n).map(|g| (format!("g{g}"), ids(each))).collect());
    for (body, want) in [
        (json!({"buckets": 5, "runs": [run]}), "key"),
        (json!({"key": "", "buckets": 5, "runs": [run]}), "key"),
        (json!({"key": "loss", "runs": [run]}), "buckets"),
        (json!({"key": "loss", "buckets": 0, "runs": [run]}), "buckets"),
        (json!({"key": "loss", "buckets": 100001, "runs": [run]}), "buckets"),
        (json!({"key": "loss", "buckets": "5", "runs": [run]}), "buckets"),
        (json!({"key": "loss", "buckets": 5}), "runs"),
        (json!({"key": "loss", "buckets": 5, "runs": [run], "groups": {"g": [run]}}), "groups"),
        (json!({"key": "loss", "buckets": 5, "runs": []}), "runs"),
        (json!({"key": "loss", "buckets": 5, "runs": ids(20_001)}), "runs"),
        (json!({"key": "loss", "buckets": 100, "runs": ids(10_001)}), "buckets"),
        (json!({"key": "loss", "buckets": 5, "runs": [1]}), "runs[0]"),
        (json!({"key": "loss", "buckets": 5, "groups": {}}), "groups"),
        (json!({"key": "loss", "buckets": 5, "groups": groups(101, 1)}), "groups"),
        (json!({"key": "loss", "buckets": 5, "groups": groups(2, 10_001)}), "groups"),
        (json!({"key": "loss", "buckets": 20_000, "groups": groups(51, 1)}), "buckets"),
        (json!({"key": "loss", "buckets": 5, "groups": {"": [run]}}), "groups"),
        (json!({"key": "loss", "buckets": 5, "groups": {"a\u{1}": [run]}}), "groups"),
        (json!({"key": "loss", "buckets": 5, "groups": [[run]]}), "groups"),
        (json!({"key": "loss", "buckets": 5, "groups": {"g": run}}), "groups.g"),
    ] {
        let (status, answer) = s.post("/metrics/query", &body);
        let shown = body.to_string().chars().take(120).collect::<String>();
        assert_eq!((status, field(&answer)), (400, want), "{shown}: {answer}");
    }
    let (status, answer) = s.post("/metrics/query", &json!({"key": "loss", "buckets": 5, "runs": [run], "limit": 3}));
    assert_eq!(status, 400, "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("unknown field"), "{answer}");
    let twice = format!(r#"{{"key": "loss", "buckets": 5, "groups": {{"g": ["{run}"], "g": ["{run}"]}}}}"#);
    let (status, answer) = s.post_raw("/metrics/query", "application/json", twice.into_bytes());
    assert_eq!((status, field(&answer).starts_with("groups")), (400, true), "{answer}");
    // Unknown and malformed ids are not found, by id, as GET /metrics says it.
    for bad in ["nosuchrun", "no$such"] {
        for body in [
            json!({"key": "loss", "buckets": 5, "runs": [run, bad]}),
            json!({"key": "loss", "buckets": 5, "groups": {"g": [run], "h": [bad]}}),
        ] {
            let (status, answer) = s.post("/metrics/query", &body);
            assert_eq!((status, answer["error"]["code"].as_str()), (404, Some("not_found")), "{answer}");
            assert!(answer["error"]["message"].as_str().unwrap().contains(bad), "{answer}");
        }
        let (status, got) = s.get(&format!("/metrics?key=loss&runs={run},{bad}&buckets=5"));
        assert_eq!(status, 404, "{got}");
    }
}

/// `trainlog ARGS… --data DATA`; answers the last line of stdout (a new user's key).
#[test]
fn runs_the_caller_may_not_read_are_not_found() {
    let s = TestServer::spawn_local_with(&["--auth", "--default-permission", "none"]);
    let [owner, reader] = ["owner", "reader"].map(|name| s.admin_cli(&["users", "add", name]));
    let post = |key: &str, path: &str, body: &Value| {
        let r = reqwest::blocking::Client::new().post(s.api(path)).bearer_auth(key).json(body).send().unwrap();
        let status = r.status().as_u16();
        (status, r.json::<Value>().unwrap_or(Value::Null))
    };
    let mut runs = Vec::new();
    for project in ["open", "closed"] {
        let (status, run) = post(&owner, "/runs", &json!({"project": project}));
        assert_eq!(status, 201, "{run}");
        let id = run["id"].as_str().unwrap().to_owned();
        let points = json!({"points": [{"key": "loss", "step": 1, "value": 2.0}]});
        assert_eq!(post(&owner, &format!("/runs/{id}/metrics"), &points).0, 200);
        runs.push(id);
    }
    let grant = reqwest::blocking::Client::new()
        .put(s.api("/projects/open/members/reader"))
        .bearer_auth(&owner)
        .json(&json!({"role": "read"}))
        .send()
        .unwrap();
    assert_eq!(grant.status().as_u16(), 200);
    let (open, closed) = (&runs[0], &runs[1]);
    let (status, answer) =
        post(&reader, "/metrics/query", &json!({"key": "loss", "buckets": 1, "groups": {"g": [open]}}));
    assert_eq!((status, &answer["groups"][0]["buckets"][0]["mean"]), (200, &json!(2.0)), "{answer}");
    for body in [
        json!({"key": "loss", "buckets": 1, "runs": [open, closed]}),
        json!({"key": "loss", "buckets": 1, "groups": {"g": [open], "h": [closed]}}),
    ] {
        let (status, answer) = post(&reader, "/metrics/query", &body);
        assert_eq!((status, answer["error"]["code"].as_str()), (404, Some("not_found")), "{answer}");
        assert!(answer["error"]["message"].as_str().unwrap().contains(closed.as_str()), "{answer}");
    }
    assert_eq!(post(&owner, "/metrics/query", &json!({"key": "loss", "buckets": 1, "runs": [open, closed]})).0, 200);
}
