//! Limits on what a request may carry, against the real binary: each over-long field answers 400
//! naming the field and the limit, the request writes nothing, and a value at the limit is accepted.

use trainlog_tests::{json, urlencode, TestServer, Value};

// The limits as the README documents them (`trainlog_schema::limits` in the code).
const MAX_RUN_ID_CHARS: usize = 64;
const MAX_KEY_CHARS: usize = 250;
const MAX_NAME_CHARS: usize = 500;
const MAX_SWEEP_NAME_CHARS: usize = MAX_NAME_CHARS - 24;
const MAX_PARAM_VALUE_CHARS: usize = 64 << 10;
const MAX_TAG_VALUE_CHARS: usize = 64 << 10;
const MAX_TEXT_CHARS: usize = 1 << 20;
const MAX_ARTIFACT_PATH_CHARS: usize = 1024;
const MAX_PARAMS_PER_REQUEST: usize = 100_000;
const MAX_TAGS_PER_REQUEST: usize = 1_000;
const MAX_FILTER_BYTES: usize = 16 << 10;
const MAX_MODEL_SEARCH_CHARS: usize = 4_000;
const MAX_QUERY_FILTER_CHARS: usize = 3_000;
const MAX_FILTER_COMPARISONS: usize = 200;
const MAX_FILTER_NESTING: usize = 16;
const MAX_ORDER_BY_ITEMS: usize = 16;
const MAX_PAGE_SIZE: u32 = 1000;

fn text(bytes: usize) -> String {
    "x".repeat(bytes)
}

/// Asserts a 400 `invalid_argument` naming `field`, with a message that states the limit.
fn assert_refused(answer: (u16, Value), field: &str, limit: impl std::fmt::Display) {
    let (status, body) = answer;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "invalid_argument", "{body}");
    assert_eq!(body["error"]["field"], field, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(&format!("at most {limit}")), "the message should state the limit {limit}: {message}");
}

fn run_count(s: &TestServer) -> usize {
    let (status, body) = s.post("/runs/search", &json!({}));
    assert_eq!(status, 200, "{body}");
    body["runs"].as_array().map_or(0, Vec::len)
}

fn project_count(s: &TestServer) -> usize {
    let (status, body) = s.get("/projects");
    assert_eq!(status, 200, "{body}");
    body["projects"].as_array().map_or(0, Vec::len)
}

#[test]
fn a_new_run_with_any_over_long_field_is_refused_and_writes_nothing() {
    let s = TestServer::spawn_local();
    let key_over = text(MAX_KEY_CHARS + 1);
    let cases = [
        (json!({"project": text(MAX_NAME_CHARS + 1)}), "project".to_owned(), MAX_NAME_CHARS),
        (json!({"project": "p", "name": text(MAX_NAME_CHARS + 1)}), "name".to_owned(), MAX_NAME_CHARS),
        (json!({"project": "p", "user": text(MAX_NAME_CHARS + 1)}), "user".to_owned(), MAX_NAME_CHARS),
        (json!({"project": "p", "host": text(MAX_NAME_CHARS + 1)}), "host".to_owned(), MAX_NAME_CHARS),
        (json!({"project": "p", "group": text(MAX_NAME_CHARS + 1)}), "group".to_owned(), MAX_NAME_CHARS),
        (json!({"project": "p", "notes": text(MAX_TEXT_CHARS + 1)}), "notes".to_owned(), MAX_TEXT_CHARS),
        (
            json!({"project": "p", "params": {"lr": 0.1, "model": {"arch": text(MAX_PARAM_VALUE_CHARS + 1)}}}),
            "params.model.arch".to_owned(),
            MAX_PARAM_VALUE_CHARS,
        ),
        (json!({"project": "p", "params": {"lr": 0.1, &key_over: 1}}), format!("params.{key_over}"), MAX_KEY_CHARS),
        (
            json!({"project": "p", "tags": {"team": "vision", "note": text(MAX_TAG_VALUE_CHARS + 1)}}),
            "tags.note".to_owned(),
            MAX_TAG_VALUE_CHARS,
        ),
        (
            json!({"project": "p", "tags": {"team": "vision", &key_over: "v"}}),
            format!("tags.{key_over}"),
            MAX_KEY_CHARS,
        ),
        (json!({"project": "p", "tags": ["ok", &key_over]}), "tags[1]".to_owned(), MAX_KEY_CHARS),
        (json!({"project": "p", "id": text(MAX_RUN_ID_CHARS + 1)}), "id".to_owned(), MAX_RUN_ID_CHARS),
    ];
    for (body, field, limit) in cases {
        assert_refused(s.post("/runs", &body), &field, limit);
    }
    assert_eq!((run_count(&s), project_count(&s)), (0, 0), "a refused run creates neither a run nor a project");

    // Every field at its limit is accepted.
    let (status, run) = s.post(
        "/runs",
        &json!({"project": text(MAX_NAME_CHARS), "name": text(MAX_NAME_CHARS), "user": text(MAX_NAME_CHARS),
                "host": text(MAX_NAME_CHARS), "group": text(MAX_NAME_CHARS), "notes": text(MAX_TEXT_CHARS),
                "params": {"arch": text(MAX_PARAM_VALUE_CHARS), text(MAX_KEY_CHARS): 1},
                "tags": {"note": text(MAX_TAG_VALUE_CHARS), text(MAX_KEY_CHARS): "v"}}),
    );
    assert_eq!(status, 201, "{}", run.to_string().chars().take(300).collect::<String>());
    assert_eq!(run["notes"].as_str().map(str::len), Some(MAX_TEXT_CHARS));
    assert_eq!(run["params"]["arch"].as_str().map(str::len), Some(MAX_PARAM_VALUE_CHARS));
    assert_eq!(run["tags"]["note"].as_str().map(str::len), Some(MAX_TAG_VALUE_CHARS));
}

#[test]
fn changes_to_a_run_with_one_bad_entry_write_none_of_the_others() {
    let s = TestServer::spawn_local();
    let (status, run) = s.post("/runs", &json!({"project": "p", "name": "before", "notes": "first"}));
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().expect("a run id").to_owned();

    let over = text(MAX_PARAM_VALUE_CHARS + 1);
    let answer = s.post(&format!("/runs/{id}/params"), &json!({"params": {"batch": 64, "big": over}}));
    assert_refused(answer, "params.big", MAX_PARAM_VALUE_CHARS);
    let many_params: serde_json::Map<String, Value> =
        (0..=MAX_PARAMS_PER_REQUEST).map(|i| (format!("p{i}"), json!(i))).collect();
    let answer = s.post(&format!("/runs/{id}/params"), &json!({ "params": many_params }));
    assert_refused(answer, "params", MAX_PARAMS_PER_REQUEST);

    let answer =
        s.post(&format!("/runs/{id}/tags"), &json!({"tags": {"ok": "v", "bad": text(MAX_TAG_VALUE_CHARS + 1)}}));
    assert_refused(answer, "tags.bad", MAX_TAG_VALUE_CHARS);
    let many_tags: serde_json::Map<String, Value> =
        (0..=MAX_TAGS_PER_REQUEST).map(|i| (format!("t{i}"), json!("v"))).collect();
    assert_refused(s.post(&format!("/runs/{id}/tags"), &json!({ "tags": many_tags })), "tags", MAX_TAGS_PER_REQUEST);

    let answer = s.patch(&format!("/runs/{id}"), &json!({"name": "after", "notes": text(MAX_TEXT_CHARS + 1)}));
    assert_refused(answer, "notes", MAX_TEXT_CHARS);
    let answer = s.patch(&format!("/runs/{id}"), &json!({"notes": "second", "group": text(MAX_NAME_CHARS + 1)}));
    assert_refused(answer, "group", MAX_NAME_CHARS);
    let answer = s.patch(&format!("/runs/{id}"), &json!({"name": text(MAX_NAME_CHARS + 1), "tags": {"ok": "v"}}));
    assert_refused(answer, "name", MAX_NAME_CHARS);

    let (status, body) = s.log(
        &id,
        json!([{"key": "loss", "step": 0, "value": 1.0}, {"key": text(MAX_KEY_CHARS + 1), "step": 0, "value": 1.0}]),
    );
    assert_eq!((status, &body["error"]["field"]), (400, &json!("points[1].key")), "{body}");

    let artifact = format!("a/{}", text(MAX_ARTIFACT_PATH_CHARS - 1));
    let response = s
        .client
        .put(s.api(&format!("/runs/{id}/artifacts/{artifact}")))
        .body("bytes")
        .send()
        .expect("PUT reaches the server");
    let status = response.status().as_u16();
    let body: Value = response.json().expect("a JSON error");
    assert_refused((status, body), "path", MAX_ARTIFACT_PATH_CHARS);

    let (status, now) = s.get(&format!("/runs/{id}"));
    assert_eq!(status, 200, "{now}");
    assert_eq!(now["params"], json!({}), "no param of a refused request is written");
    assert_eq!(now["tags"], json!({}), "no tag of a refused request is written");
    assert_eq!((now["name"].as_str(), now["notes"].as_str()), (Some("before"), Some("first")));
    assert_eq!(now["summary"], json!({}), "no point of a refused batch is written");
    let (status, artifacts) = s.get(&format!("/runs/{id}/artifacts"));
    assert_eq!((status, &artifacts["artifacts"]), (200, &json!([])));
}

#[test]
fn registry_and_sweep_text_is_limited_too() {
    let s = TestServer::spawn_local();
    assert_refused(s.post("/models", &json!({"name": text(MAX_NAME_CHARS + 1)})), "name", MAX_NAME_CHARS);
    let answer = s.post("/models", &json!({"name": "m", "description": text(MAX_TEXT_CHARS + 1)}));
    assert_refused(answer, "description", MAX_TEXT_CHARS);
    let answer = s.post("/models", &json!({"name": "m", "tags": {"task": text(MAX_TAG_VALUE_CHARS + 1)}}));
    assert_refused(answer, "tags.task", MAX_TAG_VALUE_CHARS);
    let key_over = text(MAX_KEY_CHARS + 1);
    let answer = s.post("/models", &json!({"name": "m", "tags": {&key_over: "v"}}));
    assert_refused(answer, &format!("tags.{key_over}"), MAX_KEY_CHARS);
    let (status, models) = s.get("/models");
    assert_eq!((status, &models["models"]), (200, &json!([])), "a refused model is not created");

    let (status, model) = s.post("/models", &json!({"name": "m", "description": "kept", "tags": {"task": "vision"}}));
    assert_eq!(status, 201, "{model}");
    let answer = s.patch("/models/m", &json!({"description": text(MAX_TEXT_CHARS + 1), "tags": {"stage": "dev"}}));
    assert_refused(answer, "description", MAX_TEXT_CHARS);
    let (_, model) = s.get("/models/m");
    assert_eq!((&model["description"], &model["tags"]), (&json!("kept"), &json!({"task": "vision"})));
    let answer = s.get(&format!("/models?search={}", urlencode(&text(MAX_MODEL_SEARCH_CHARS + 1))));
    assert_refused(answer, "search", MAX_MODEL_SEARCH_CHARS);

    let config = "command: [\"python\", \"train.py\"]\nmethod: random\nmetric: {name: loss, goal: minimize}\n\
                  parameters:\n  lr: {values: [0.1, 0.01]}\n";
    let answer = s.post("/sweeps", &json!({"config": config, "project": "p", "name": text(MAX_SWEEP_NAME_CHARS + 1)}));
    assert_refused(answer, "name", MAX_SWEEP_NAME_CHARS);
    let padded = format!("{config}# {}\n", text(MAX_TEXT_CHARS));
    assert_refused(s.post("/sweeps", &json!({"config": padded, "project": "p"})), "config", MAX_TEXT_CHARS);
    let (status, sweeps) = s.get("/sweeps");
    assert_eq!((status, &sweeps["sweeps"]), (200, &json!([])), "a refused sweep is not created");
    let (status, sweep) =
        s.post("/sweeps", &json!({"config": config, "project": "p", "name": text(MAX_SWEEP_NAME_CHARS)}));
    assert_eq!(status, 201, "{sweep}");
    // The longest sweep name still leaves its trials' run names within the name limit.
    let id = sweep["id"].as_str().expect("a sweep id");
    let (status, trial) = s.post(&format!("/sweeps/{id}/next"), &json!({"agent": "a", "slot": "cpu:0"}));
    assert_eq!(status, 200, "{trial}");
    let (status, run) = s.get(&format!("/runs/{}", trial["run_id"].as_str().expect("a trial run")));
    assert_eq!(status, 200, "{run}");
    assert!(run["name"].as_str().is_some_and(|n| n.len() <= MAX_NAME_CHARS), "{run}");
}

/// `count` comparisons joined by `or`.
fn or_chain(count: usize) -> String {
    (0..count).map(|i| format!("tags.k{i} = 'v{i}'")).collect::<Vec<_>>().join(" or ")
}

#[test]
fn search_filters_past_their_limits_answer_400_naming_the_filter() {
    let s = TestServer::spawn_local();
    s.create_run("p", "n");

    let thousand = vec!["id = 'x'"; 1000].join(" or ");
    assert_refused(
        s.post("/runs/search", &json!({ "filter": thousand })),
        "filter",
        format!("{MAX_FILTER_COMPARISONS} comparisons"),
    );
    assert_refused(s.post("/runs/search", &json!({"filter": or_chain(1000)})), "filter", MAX_FILTER_BYTES);
    let (status, body) = s.post("/runs/search", &json!({"filter": or_chain(MAX_FILTER_COMPARISONS)}));
    assert_eq!((status, body["runs"].as_array().map(Vec::len)), (200, Some(0)), "{body}");

    let deep = format!("{}status = 'running'{}", "(".repeat(200), ")".repeat(200));
    assert_refused(s.post("/runs/search", &json!({"filter": deep})), "filter", MAX_FILTER_NESTING);
    let deepest = format!("{}status = 'running'{}", "(".repeat(MAX_FILTER_NESTING), ")".repeat(MAX_FILTER_NESTING));
    let (status, body) = s.post("/runs/search", &json!({"filter": deepest}));
    assert_eq!((status, body["runs"].as_array().map(Vec::len)), (200, Some(1)), "{body}");
    let nots = format!("{}status = 'running'", "not ".repeat(500));
    assert_refused(s.post("/runs/search", &json!({"filter": nots})), "filter", MAX_FILTER_NESTING);

    let long = format!("name like '{}'", "%".repeat(MAX_FILTER_BYTES));
    assert_refused(s.post("/runs/search", &json!({"filter": long})), "filter", MAX_FILTER_BYTES);
    let long_query =
        format!("/projects/p/runs?filter={}", urlencode(&format!("notes = '{}'", text(MAX_QUERY_FILTER_CHARS))));
    assert_refused(s.get(&long_query), "filter", MAX_QUERY_FILTER_CHARS);

    let order: Vec<String> = (0..=MAX_ORDER_BY_ITEMS).map(|i| format!("params.p{i}")).collect();
    assert_refused(s.post("/runs/search", &json!({ "order_by": order })), "order_by", MAX_ORDER_BY_ITEMS);
    assert_refused(s.post("/runs/search", &json!({"limit": MAX_PAGE_SIZE + 1})), "limit", MAX_PAGE_SIZE);
}

#[test]
fn a_run_s_start_or_end_before_1970_or_past_the_year_9999_is_refused_and_the_report_still_answers() {
    const MAX_EPOCH_MS: i64 = 253_402_300_799_999;
    let s = TestServer::spawn_local();
    for bad in [-1, i64::MIN, MAX_EPOCH_MS + 1, i64::MAX] {
        let (status, body) = s.post("/runs", &json!({"project": "p", "start_time": bad}));
        assert_eq!((status, body["error"]["field"].as_str()), (400, Some("start_time")), "{body}");
    }
    assert_eq!((run_count(&s), project_count(&s)), (0, 0), "a refused run creates neither a run nor a project");

    let (status, run) = s.post("/runs", &json!({"project": "p", "start_time": 0}));
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().expect("a run id").to_owned();
    for bad in [-1, i64::MIN, MAX_EPOCH_MS + 1] {
        let (status, body) = s.post(&format!("/runs/{id}/finish"), &json!({"end_time": bad}));
        assert_eq!((status, body["error"]["field"].as_str()), (400, Some("end_time")), "{body}");
    }
    let (status, body) = s.get(&format!("/runs/{id}"));
    assert_eq!((status, body["status"].as_str()), (200, Some("running")), "a refused end changes nothing: {body}");
    let (status, body) = s.post(&format!("/runs/{id}/finish"), &json!({"end_time": MAX_EPOCH_MS}));
    assert_eq!((status, body["end_time"].as_i64()), (200, Some(MAX_EPOCH_MS)), "{body}");

    let (status, report) = s.get("/report");
    assert_eq!(status, 200, "{report}");
}
