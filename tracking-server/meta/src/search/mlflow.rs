//! MLflow's run-search filter and order-by, rewritten into trainlog's search grammar, which is a
//! superset of MLflow's: `attributes.run_name` becomes `name`, `tags.mlflow.runName` becomes
//! `name`, `'FINISHED'` compared with `status` becomes `'finished'`, and so on. Everything else
//! is passed through, so trainlog's parser reports the errors, with their positions.

use std::fmt;

/// A field MLflow has that runs cannot be searched or ordered by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterRewriteError {
    /// "filter" or "order_by".
    pub field: &'static str,
    pub message: String,
}

impl FilterRewriteError {
    fn new(field: &'static str, message: String) -> Self {
        Self { field, message }
    }
}

impl fmt::Display for FilterRewriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for FilterRewriteError {}

/// MLflow's attribute names (after `attributes.`, `attribute.`, `attr.` or `run.`), as trainlog's.
fn attribute(name: &str) -> Option<&'static str> {
    Some(match name {
        "status" => "status",
        "run_name" | "runName" => "name",
        "user_id" => "user",
        "start_time" | "created" | "Created" => "start_time",
        "end_time" => "end_time",
        "run_id" | "run_uuid" => "id",
        _ => return None,
    })
}

/// MLflow's special tags that trainlog keeps as attributes of the run.
fn special_tag(key: &str) -> Option<&'static str> {
    Some(match key {
        "mlflow.runName" => "name",
        "mlflow.user" => "user",
        "mlflow.parentRunId" => "parent_id",
        "mlflow.note.content" => "notes",
        _ => return None,
    })
}

/// One field of a filter or an order-by item, rewritten; `None` when it is not one MLflow has.
fn field(text: &str) -> Result<Option<String>, FilterRewriteError> {
    let unquote = |s: &str| s.trim_matches('`').trim_matches('"').to_owned();
    let Some((prefix, rest)) = text.split_once('.') else {
        return Ok(attribute(text).map(str::to_owned));
    };
    match prefix.to_ascii_lowercase().as_str() {
        "attributes" | "attribute" | "attr" | "run" => match attribute(&unquote(rest)) {
            Some(a) => Ok(Some(a.to_owned())),
            None => Err(FilterRewriteError::new("filter", format!("{text}: not an attribute runs can be searched by"))),
        },
        "tags" | "tag" => Ok(Some(match special_tag(&unquote(rest)) {
            Some(a) => a.to_owned(),
            None => format!("tags.{rest}"),
        })),
        "metrics" | "metric" => Ok(Some(format!("metrics.{rest}"))),
        "params" | "param" | "parameter" | "parameters" => Ok(Some(format!("params.{rest}"))),
        _ => Ok(None),
    }
}

/// Rewrites an MLflow filter into trainlog's grammar.
pub fn translate_filter(filter: &str) -> Result<String, FilterRewriteError> {
    let mut out = String::with_capacity(filter.len() + 16);
    let chars: Vec<char> = filter.chars().collect();
    let mut i = 0;
    // Inside a comparison with `status`, string literals are MLflow's upper-case statuses.
    let mut status_comparison = false;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' || c == '"' {
            let start = i;
            i += 1;
            while i < chars.len() && chars[i] != c {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i = (i + 1).min(chars.len());
            let literal: String = chars[start..i].iter().collect();
            out.push_str(&if status_comparison { literal.to_lowercase() } else { literal });
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' || c == '`' {
            let start = i;
            let mut in_backquote = false;
            while i < chars.len() {
                let d = chars[i];
                if d == '`' {
                    in_backquote = !in_backquote;
                } else if !(in_backquote || d.is_ascii_alphanumeric() || matches!(d, '_' | '.' | '-' | '/' | ':')) {
                    break;
                }
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            if word.eq_ignore_ascii_case("and") {
                status_comparison = false;
                out.push_str("and");
            } else if let Some(rewritten) = field(&word)? {
                status_comparison = rewritten == "status";
                out.push_str(&rewritten);
            } else {
                out.push_str(&word);
            }
            continue;
        }
        out.push(c);
        i += 1;
    }
    Ok(out)
}

/// Rewrites MLflow order-by items (`metrics.loss DESC`, `attributes.start_time`).
pub fn translate_order_by(items: &[String]) -> Result<Vec<String>, FilterRewriteError> {
    items
        .iter()
        .map(|item| {
            let item = item.trim();
            let (name, direction) = match item.rsplit_once(char::is_whitespace) {
                Some((n, d)) if d.eq_ignore_ascii_case("asc") || d.eq_ignore_ascii_case("desc") => {
                    (n.trim(), Some(d.to_ascii_lowercase()))
                }
                _ => (item, None),
            };
            let rewritten = field(name)?.ok_or_else(|| {
                FilterRewriteError::new("order_by", format!("{name}: not a field runs can be ordered by"))
            })?;
            Ok(match direction {
                Some(d) => format!("{rewritten} {d}"),
                None => rewritten,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mlflow_names_become_trainlog_ones_and_the_rest_passes_through() {
        let cases = [
            ("metrics.acc > 0.9 and params.lr = '0.01'", "metrics.acc > 0.9 and params.lr = '0.01'"),
            (
                "attributes.status = 'FINISHED' AND metrics.`val loss` < 1",
                "status = 'finished' and metrics.`val loss` < 1",
            ),
            ("tags.mlflow.runName LIKE 'lr-%'", "name LIKE 'lr-%'"),
            ("tags.`mlflow.user` = 'ada' and tags.team = 'Vision'", "user = 'ada' and tags.team = 'Vision'"),
            ("attribute.run_name ILIKE '%A%' AND run.user_id = 'Bo'", "name ILIKE '%A%' and user = 'Bo'"),
            (
                "status IN ('RUNNING', 'FAILED') and params.opt = 'SGD'",
                "status IN ('running', 'failed') and params.opt = 'SGD'",
            ),
            ("", ""),
        ];
        for (mlflow, trainlog) in cases {
            assert_eq!(translate_filter(mlflow).unwrap(), trainlog, "{mlflow}");
        }
        assert!(translate_filter("attributes.artifact_uri = 'x'").is_err());
    }

    #[test]
    fn order_by_items_keep_their_direction() {
        let items =
            ["metrics.loss DESC", "attributes.start_time", "tags.mlflow.runName asc", "params.lr"].map(str::to_owned);
        assert_eq!(
            translate_order_by(&items).unwrap(),
            ["metrics.loss desc", "start_time", "name asc", "params.lr"].map(str::to_owned)
        );
        assert!(translate_order_by(&["nonsense".to_owned()]).is_err());
    }
}
