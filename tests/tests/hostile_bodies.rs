//! Hostile request bodies against the real binary: corrupt Arrow IPC streams get an answer and
//! leave the server serving, and JSON routes refuse bodies not sent as `application/json`.

use std::sync::Arc;
use trainlog_tests::{arrow_stream, json, TestServer, Value};

const ARROW: &str = "application/vnd.apache.arrow.stream";

/// xorshift64*: a deterministic stream of variants without another dependency.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Asserts the API's error shape: `{"error": {"code", "message", "field"?}}` and nothing else.
fn assert_error_shape(status: u16, body: &Value) {
    let error = body["error"].as_object().unwrap_or_else(|| panic!("HTTP {status} without an error object: {body}"));
    assert!(error["code"].as_str().is_some_and(|c| !c.is_empty()), "HTTP {status}: no code in {body}");
    assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()), "HTTP {status}: no message in {body}");
    assert!(error.get("field").is_none_or(Value::is_string), "HTTP {status}: a field that is not a string: {body}");
    assert!(error.keys().all(|k| ["code", "message", "field"].contains(&k.as_str())), "HTTP {status}: {body}");
    assert_eq!(body.as_object().map(|o| o.len()), Some(1), "HTTP {status}: more than the error: {body}");
}

/// The body of an answer as JSON, or as a string when it is not JSON.
fn answer(response: reqwest::blocking::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// A metrics body the way the SDK sends it: keys as a dictionary of utf8.
fn dictionary_key_stream() -> Vec<u8> {
    use arrow_array::types::Int32Type;
    use arrow_array::{ArrayRef, DictionaryArray, Float64Array, Int64Array, RecordBatch};
    let keys: DictionaryArray<Int32Type> = ["loss", "lr", "loss", "acc", "loss"].into_iter().collect();
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("key", Arc::new(keys)),
        ("step", Arc::new(Int64Array::from(vec![0, 0, 1, 1, 2]))),
        ("timestamp", Arc::new(Int64Array::from(vec![1_000, 1_000, 2_000, 2_000, 3_000]))),
        ("value", Arc::new(Float64Array::from(vec![0.9, 1e-3, 0.7, 0.5, 0.6]))),
    ];
    let batch = RecordBatch::try_from_iter(columns).expect("a valid batch");
    let mut body = Vec::new();
    let mut writer = arrow_ipc::writer::StreamWriter::try_new(&mut body, &batch.schema()).expect("a stream writer");
    writer.write(&batch).expect("write");
    writer.finish().expect("finish");
    drop(writer);
    body
}

#[test]
fn corrupt_arrow_bodies_are_answered_and_the_server_keeps_serving() {
    let s = TestServer::spawn_local();
    let run = s.create_run("hostile", "arrow");
    let metrics = s.api(&format!("/runs/{run}/metrics"));
    let utf8_keys = arrow_stream(&["loss", "lr", "loss"], &[0, 0, 1], &[0.9, 1e-3, 0.7], Some(&[1_000, 1_000, 2_000]));
    let valid = [utf8_keys, dictionary_key_stream()];

    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let (mut accepted, mut refused) = (0, 0);
    for variant in 0..1_000 {
        let mut body = valid[variant % valid.len()].clone();
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(body.len());
            body[at] ^= 1 + rng.below(255) as u8;
        }
        let response = s
            .client
            .post(&metrics)
            .header("content-type", ARROW)
            .body(body)
            .send()
            .unwrap_or_else(|e| panic!("variant {variant} got no answer: {e}"));
        let (status, body) = answer(response);
        match status {
            200..=299 => accepted += 1,
            400..=499 => {
                assert_error_shape(status, &body);
                refused += 1;
            }
            _ => panic!("variant {variant} answered HTTP {status}: {body}"),
        }
    }
    println!("corrupt Arrow bodies: {accepted} accepted (2xx), {refused} refused (4xx) of 1000");
    assert!(refused > 0, "no corrupt body was refused");

    assert_eq!(s.get("/health"), (200, json!({"status": "ok"})));
    let (status, body) = s.post_raw(&format!("/runs/{run}/metrics"), ARROW, valid[1].clone());
    assert_eq!((status, body), (200, json!({"accepted": 5})));
}

/// Content types a browser may send cross-origin without a preflight, and no content type.
const NOT_JSON: [Option<&str>; 4] = [
    Some("text/plain"),
    Some("application/x-www-form-urlencoded"),
    Some("multipart/form-data; boundary=trainlog"),
    None,
];

/// Sends a JSON document with another (or no) content type; the body itself is valid JSON, so
/// only the content type can refuse it.
fn send(s: &TestServer, method: reqwest::Method, path: &str, content_type: Option<&str>, body: &Value) -> (u16, Value) {
    let mut request = s.client.request(method, s.api(path)).body(body.to_string());
    if let Some(content_type) = content_type {
        request = request.header("content-type", content_type);
    }
    answer(request.send().expect("the request reaches the server"))
}

fn assert_unsupported_media_type(answer: (u16, Value), what: &str) {
    let (status, body) = answer;
    assert_eq!(status, 415, "{what}: {body}");
    assert_error_shape(status, &body);
    assert_eq!(body["error"]["code"], "unsupported_media_type", "{what}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("application/json"), "{what}: the message names no accepted type: {message}");
}

#[test]
fn json_routes_refuse_bodies_that_are_not_json_and_write_nothing() {
    use reqwest::Method;
    let s = TestServer::spawn_local();
    let run = s.create_run("guarded", "target");
    assert_eq!(s.post("/models", &json!({"name": "guarded-model"})).0, 201);

    for content_type in NOT_JSON {
        let what = |route: &str| format!("{route} with content type {content_type:?}");
        let project = format!("csrf-{}", content_type.unwrap_or("none").split(['/', ';']).nth(1).unwrap_or("none"));
        assert_unsupported_media_type(
            send(&s, Method::POST, "/runs", content_type, &json!({"project": project, "name": "injected"})),
            &what("create run"),
        );
        assert_eq!(s.get(&format!("/projects/{project}")).0, 404, "{}: the project was created", what("create run"));

        let run_path = format!("/runs/{run}");
        let changes = [
            (Method::POST, format!("{run_path}/params"), json!({"params": {"injected": 1}}), "params"),
            (Method::POST, format!("{run_path}/tags"), json!({"tags": {"injected": "yes"}}), "tags"),
            (Method::PATCH, run_path.clone(), json!({"notes": "injected"}), "update run"),
            (Method::PUT, format!("{run_path}/metadata/injected"), json!({"injected": true}), "metadata"),
            (Method::POST, format!("{run_path}/finish"), json!({"status": "failed"}), "finish"),
            (
                Method::POST,
                format!("{run_path}/metrics"),
                json!({"points": [{"key": "injected", "step": 0, "value": 1}]}),
                "metrics",
            ),
            (Method::POST, "/models".to_owned(), json!({"name": "injected-model"}), "create model"),
            (Method::PATCH, "/models/guarded-model".to_owned(), json!({"description": "injected"}), "update model"),
        ];
        for (method, path, body, route) in changes {
            let accepted_types = match route {
                "metrics" => "application/json or application/vnd.apache.arrow.stream",
                _ => "application/json",
            };
            let (status, answer) = send(&s, method, &path, content_type, &body);
            assert_unsupported_media_type((status, answer.clone()), &what(route));
            assert!(
                answer["error"]["message"].as_str().unwrap_or_default().contains(accepted_types),
                "{}",
                what(route)
            );
        }

        let (status, after) = s.get(&run_path);
        assert_eq!(status, 200, "{after}");
        assert!(after["params"].get("injected").is_none(), "{}: {after}", what("params"));
        assert!(after["tags"].get("injected").is_none(), "{}: {after}", what("tags"));
        assert_eq!(after["notes"], "", "{}", what("update run"));
        assert!(after["metadata"].get("injected").is_none(), "{}: {after}", what("metadata"));
        assert_eq!(after["status"], "running", "{}", what("finish"));
        assert!(s.series(&run, "injected").is_empty(), "{}", what("metrics"));
        assert_eq!(s.get("/models/injected-model").0, 404, "{}", what("create model"));
        let (_, model) = s.get("/models/guarded-model");
        assert_ne!(model["description"], "injected", "{}: {model}", what("update model"));
    }

    // The same documents as application/json, with parameters or in capitals, are accepted: the
    // project refused above as text/plain is created now.
    let params = json!({"params": {"accepted": 1}});
    let accepted =
        send(&s, Method::POST, &format!("/runs/{run}/params"), Some("application/json; charset=utf-8"), &params);
    assert_eq!(accepted.0, 200, "{}", accepted.1);
    let tags = json!({"tags": {"accepted": "yes"}});
    let accepted = send(&s, Method::POST, &format!("/runs/{run}/tags"), Some("Application/JSON"), &tags);
    assert_eq!(accepted.0, 200, "{}", accepted.1);
    let created = send(&s, Method::POST, "/runs", Some("application/json"), &json!({"project": "csrf-plain"}));
    assert_eq!(created.0, 201, "{}", created.1);
}
