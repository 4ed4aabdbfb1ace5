//! The server masks secrets in what clients record about a run by themselves, whatever the
//! client (an old SDK, a raw API call): command lines, the remote URL and the git diff; and a
//! project admin may switch the diff off for a project, after which it is dropped on ingest.

use std::time::Duration;
use trainlog_tests::{json, TestServer, Value};

fn client() -> &'static reqwest::blocking::Client {
    static CLIENT: std::sync::OnceLock<reqwest::blocking::Client> = std::sync::OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::blocking::Client::builder().timeout(Duration::from_secs(60)).build().expect("an HTTP client")
    })
}

fn call(s: &TestServer, method: &str, path: &str, key: Option<&str>, body: Option<&Value>) -> (u16, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
    let mut request = client().request(method, s.api(path));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().expect("the server answers");
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

const DIFF: &str = "\
diff --git a/train.py b/train.py
--- a/train.py
+++ b/train.py
@@ -1,2 +1,4 @@
-lr = 0.1
+lr = 0.2
+WANDB_API_KEY = \"0123456789abcdef\"
+hub = \"hf_AbCdEfGhIjKlMnOpQrStUvWxYz12345678\"
";

fn code() -> Value {
    json!({"commit": "abc", "remote_url": "https://user:pw-777@git.example.com/x.git", "dirty": true, "diff": DIFF, "diff_truncated": false})
}

#[test]
fn recorded_command_lines_and_diffs_are_stored_with_their_secrets_masked() {
    let s = TestServer::spawn_local();
    let run = s.create_run("secrets", "old-client");
    let environment = json!({
        "hostname": "node-1",
        "command_line": ["train.py", "--api-key", "k-111", "--db", "host=db password=pw-222", "-pw-333x", "--max-tokens", "512"],
    });
    let python = json!({"version": "3.12", "argv": ["train.py", "--token=t-444"]});
    let notes = json!({"text": "--token t-555 stays: not a recorded section"});
    for (section, value) in [("environment", &environment), ("python", &python), ("code", &code()), ("notes", &notes)] {
        let (status, body) = call(&s, "PUT", &format!("/runs/{run}/metadata/{section}"), None, Some(value));
        assert_eq!(status, 200, "{section}: {body}");
    }

    let (status, stored) = s.get(&format!("/runs/{run}"));
    assert_eq!(status, 200);
    let metadata = &stored["metadata"];
    let text = metadata.to_string();
    for secret in ["k-111", "pw-222", "w-333x", "t-444", "pw-777", "0123456789abcdef", "hf_AbCdEf"] {
        assert!(!text.contains(secret), "{secret} is stored: {metadata}");
    }
    assert_eq!(
        metadata["environment"]["command_line"],
        json!(["train.py", "--api-key", "***", "--db", "host=db password=***", "-p***", "--max-tokens", "512"])
    );
    assert_eq!(metadata["environment"]["command_line_redactions"], 3);
    assert_eq!(metadata["environment"]["hostname"], "node-1");
    assert_eq!(
        (&metadata["python"]["argv"], &metadata["python"]["argv_redactions"]),
        (&json!(["train.py", "--token=***"]), &json!(1))
    );
    let code = &metadata["code"];
    assert_eq!(code["remote_url"], "https://user:***@git.example.com/x.git");
    assert_eq!(code["diff_redactions"], 2);
    let diff = code["diff"].as_str().expect("the diff is kept");
    assert!(diff.contains("-lr = 0.1\n+lr = 0.2\n+WANDB_API_KEY = \"***\"\n+hub = \"***\"\n"), "{diff}");
    assert_eq!(code.get("diff_disabled"), None);
    assert_eq!(metadata["notes"], notes);

    // Sent again as the SDK sends it, already masked: nothing more is counted.
    let masked = metadata["environment"].clone();
    assert_eq!(call(&s, "PUT", &format!("/runs/{run}/metadata/environment"), None, Some(&masked)).0, 200);
    assert_eq!(s.get(&format!("/runs/{run}")).1["metadata"]["environment"], masked);
}

#[test]
fn a_project_admin_may_switch_the_diff_off_and_then_it_is_dropped() {
    let s = TestServer::spawn_local_with(&["--auth"]);
    let admin = std::fs::read_to_string(s.data.join("admin.key")).expect("admin.key").trim().to_owned();
    let [owner, writer, reader] = ["owner", "writer", "reader"].map(|name| s.admin_cli(&["users", "add", name]));
    let (status, run) = call(&s, "POST", "/runs", Some(&owner), Some(&json!({"project": "vision"})));
    assert_eq!(status, 201, "{run}");
    let run = run["id"].as_str().expect("a run id").to_owned();
    for (user, role) in [("writer", "write"), ("reader", "read")] {
        let path = format!("/projects/vision/members/{user}");
        assert_eq!(call(&s, "PUT", &path, Some(&owner), Some(&json!({"role": role}))).0, 200);
    }
    let settings = "/projects/vision/settings";
    assert_eq!(call(&s, "GET", settings, Some(&reader), None), (200, json!({"capture_diff": true})));

    let off = json!({"capture_diff": false});
    for key in [&writer, &reader] {
        assert_eq!(call(&s, "PATCH", settings, Some(key), Some(&off)).0, 403);
    }
    assert_eq!(call(&s, "GET", settings, Some(&reader), None).1, json!({"capture_diff": true}));
    assert_eq!(call(&s, "PATCH", settings, Some(&owner), Some(&json!({"capture_diff": "no"}))).0, 400);
    assert_eq!(call(&s, "PATCH", settings, Some(&owner), Some(&off)), (200, off.clone()));
    assert_eq!(call(&s, "PATCH", settings, Some(&owner), Some(&json!({}))), (200, off.clone()));

    let put_code = || call(&s, "PUT", &format!("/runs/{run}/metadata/code"), Some(&writer), Some(&code()));
    assert_eq!(put_code().0, 200);
    let stored = call(&s, "GET", &format!("/runs/{run}"), Some(&reader), None).1["metadata"]["code"].clone();
    assert_eq!(stored["diff"], Value::Null);
    assert_eq!(
        (&stored["diff_disabled"], &stored["diff_truncated"], &stored["commit"]),
        (&json!(true), &Value::Null, &json!("abc"))
    );
    assert!(!stored.to_string().contains("lr = 0.2"), "{stored}");

    // A server admin may switch it back on; the diff is kept again, its secrets masked.
    assert_eq!(call(&s, "PATCH", settings, Some(&admin), Some(&json!({"capture_diff": true}))).0, 200);
    assert_eq!(put_code().0, 200);
    let stored = call(&s, "GET", &format!("/runs/{run}"), Some(&reader), None).1["metadata"]["code"].clone();
    assert!(stored["diff"].as_str().is_some_and(|d| d.contains("+lr = 0.2\n")), "{stored}");
    assert_eq!((stored.get("diff_disabled"), &stored["diff_redactions"]), (None, &json!(2)));
}
