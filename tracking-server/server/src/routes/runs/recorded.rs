//! What clients record about a run by themselves, masked again on ingest with the SDK's own
//! redaction (`trainlog_schema::redact`), so that an older client or a raw API call cannot store
//! a secret in clear: the command lines of the `environment` and `python` sections, and the
//! remote URL and diff of the `code` section, whose diff a project may also have switched off.
//! Only these metadata sections pay for it; metric ingest never does.

use serde_json::{Map, Value};
use trainlog_schema::redact;

/// Whether a metadata section holds text redacted on ingest.
pub(super) fn is_redacted(section: &str) -> bool {
    matches!(section, "environment" | "python" | "code")
}

/// Whether storing the section depends on the project's settings.
pub(super) fn needs_project_settings(section: &str) -> bool {
    section == "code"
}

/// Masks the secrets of a section in place. In `environment` (`command_line`) and `python`
/// (`argv`), the command line is redacted and `command_line_redactions` / `argv_redactions`
/// count what was masked, by the client and here together; in `code`, the remote URL loses its
/// credentials and the diff its secrets (counted in `diff_redactions`), or, with `capture_diff`
/// false, the diff becomes null and `diff_disabled` true.
pub(super) fn redact_section(section: &str, value: &mut Value, capture_diff: bool) {
    let Some(object) = value.as_object_mut() else {
        return;
    };
    match section {
        "environment" => redact_command_line(object, "command_line", "command_line_redactions"),
        "python" => redact_command_line(object, "argv", "argv_redactions"),
        "code" => redact_code(object, capture_diff),
        _ => {}
    }
}

/// The count a client already put in `field`, plus `found`.
fn add_count(object: &mut Map<String, Value>, field: &str, found: usize) {
    let before = object.get(field).and_then(Value::as_u64).unwrap_or(0);
    object.insert(field.to_owned(), Value::from(before.saturating_add(found as u64)));
}

fn redact_command_line(object: &mut Map<String, Value>, field: &str, count_field: &str) {
    let found = match object.get_mut(field) {
        Some(Value::Array(items)) => {
            let args: Option<Vec<String>> = items.iter().map(|item| item.as_str().map(str::to_owned)).collect();
            match args {
                Some(args) => {
                    let (redacted, found) = redact::redact_command_line(&args);
                    *items = redacted.into_iter().map(Value::String).collect();
                    found
                }
                None => items.iter_mut().map(redact_string).sum(),
            }
        }
        Some(text @ Value::String(_)) => redact_string(text),
        _ => return,
    };
    add_count(object, count_field, found);
}

/// A string value redacted as text; how many secrets it held.
fn redact_string(value: &mut Value) -> usize {
    let Value::String(text) = value else {
        return 0;
    };
    let (redacted, found) = redact::redact_text(text);
    *text = redacted;
    found
}

fn redact_code(object: &mut Map<String, Value>, capture_diff: bool) {
    if let Some(Value::String(url)) = object.get_mut("remote_url") {
        *url = redact::redact_urls(url).0;
    }
    if !capture_diff {
        object.insert("diff".to_owned(), Value::Null);
        object.insert("diff_truncated".to_owned(), Value::Null);
        object.remove("diff_redactions");
        object.insert("diff_disabled".to_owned(), Value::Bool(true));
        return;
    }
    if let Some(found) = object.get_mut("diff").filter(|diff| diff.is_string()).map(redact_string) {
        add_count(object, "diff_redactions", found);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn redacted(section: &str, mut value: Value, capture_diff: bool) -> Value {
        redact_section(section, &mut value, capture_diff);
        value
    }

    #[test]
    fn command_lines_are_masked_and_counted_with_what_the_client_counted() {
        let env = json!({"command_line": ["train.py", "--token", "t0k", "--lr", "0.1"], "hostname": "h"});
        let env = redacted("environment", env, true);
        assert_eq!(env["command_line"], json!(["train.py", "--token", "***", "--lr", "0.1"]));
        assert_eq!((env["command_line_redactions"].clone(), env["hostname"].clone()), (json!(1), json!("h")));
        let already = json!({"command_line": ["train.py", "--token", "***"], "command_line_redactions": 1});
        assert_eq!(redacted("environment", already.clone(), true), already);
        let python = redacted("python", json!({"argv": ["x.py", "-phunter2"], "version": "3.12"}), true);
        assert_eq!((python["argv"].clone(), python["argv_redactions"].clone()), (json!(["x.py", "-p***"]), json!(1)));
    }

    #[test]
    fn odd_command_lines_are_masked_as_text() {
        let env = redacted("environment", json!({"command_line": "run --password=x"}), true);
        assert_eq!(env, json!({"command_line": "run --password=***", "command_line_redactions": 1}));
        let env = redacted("environment", json!({"command_line": ["a", 1, "API_KEY=k1"]}), true);
        assert_eq!(env, json!({"command_line": ["a", 1, "API_KEY=***"], "command_line_redactions": 1}));
    }

    #[test]
    fn the_diff_and_remote_url_lose_their_secrets() {
        let code = json!({"commit": "c", "remote_url": "https://u:pw@host/x.git", "diff": "+token = 'abc'\n+lr = 1\n", "diff_truncated": false});
        let code = redacted("code", code, true);
        assert_eq!(code["remote_url"], "https://u:***@host/x.git");
        assert_eq!(code["diff"], "+token = '***'\n+lr = 1\n");
        assert_eq!(code["diff_redactions"], 1);
        assert_eq!(code.get("diff_disabled"), None);
        let again = redacted("code", code.clone(), true);
        assert_eq!(again, code);
    }

    #[test]
    fn a_switched_off_diff_is_dropped_and_marked() {
        let code = json!({"commit": "c", "diff": "+x = 1\n", "diff_truncated": true, "diff_redactions": 0});
        let code = redacted("code", code, false);
        assert_eq!(code, json!({"commit": "c", "diff": null, "diff_truncated": null, "diff_disabled": true}));
    }

    #[test]
    fn other_sections_and_non_objects_are_untouched() {
        let packages = json!({"command_line": "--password=x"});
        assert_eq!(redacted("packages", packages.clone(), true), packages);
        assert_eq!(redacted("environment", json!(["--password=x"]), true), json!(["--password=x"]));
        assert!(is_redacted("code") && is_redacted("environment") && is_redacted("python"));
        assert!(!is_redacted("packages") && needs_project_settings("code") && !needs_project_settings("python"));
    }
}
