//! MLflow's REST API on trainlog's own stores, so the unchanged `mlflow` client can log to this
//! server: an experiment is a project (same name; MLflow's `Default`, id `0`, is the project
//! named `Default`), a run is a trainlog run with the same id. Served under `/api/2.0/mlflow` and
//! `/ajax-api/2.0/mlflow`, with MLflow's error bodies and codes.

mod arguments;
mod artifacts;
mod experiments;
mod logged_models;
mod media_door;
mod registry;
mod runs;

use crate::error::MLFLOW_API_PREFIXES as PREFIXES;
use crate::error::{mlflow_response, ApiError};
use actix_web::http::Method;
use actix_web::{web, FromRequest, Handler, HttpRequest, HttpResponse, Responder, ResponseError};
use arguments::{arguments, arguments_within, BodyLimits};
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Mutex;

pub fn configure(cfg: &mut web::ServiceConfig) {
    for prefix in crate::error::MLFLOW_ARTIFACT_PREFIXES {
        cfg.service(web::scope(prefix).configure(|cfg| artifacts::routes(&mut Door { cfg, prefix })));
    }
    for prefix in PREFIXES {
        cfg.service(
            web::scope(prefix)
                .configure(|cfg| {
                    let door = &mut Door { cfg, prefix };
                    experiments::routes(door);
                    runs::routes(door);
                    registry::routes(door);
                    logged_models::routes(door);
                })
                .default_service(web::to(|req: HttpRequest| async move {
                    Err::<HttpResponse, _>(MlflowError::from(ApiError::NotFound(format!(
                        "the MLflow endpoint {} {} (this server does not serve it)",
                        req.method(),
                        crate::guard::routed_path(&req)
                    ))))
                })),
        );
    }
}

/// Every route of the door as registered: method and whole path template.
static ROUTES: Mutex<BTreeSet<(String, String)>> = Mutex::new(BTreeSet::new());

/// The door's route table, as the server registered it (empty before it did).
pub fn route_table() -> Vec<(String, String)> {
    ROUTES.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect()
}

/// A scope of the door that records each route it registers in [`ROUTES`], so the table can be
/// listed (the OpenAPI document's `x-mlflow-door`) and no route of the door goes untested.
pub(super) struct Door<'a> {
    cfg: &'a mut web::ServiceConfig,
    prefix: &'static str,
}

impl Door<'_> {
    pub(super) fn route<F, Args>(&mut self, method: Method, path: &str, handler: F) -> &mut Self
    where
        F: Handler<Args>,
        Args: FromRequest + 'static,
        F::Output: Responder + 'static,
    {
        ROUTES.lock().unwrap_or_else(|p| p.into_inner()).insert((method.to_string(), format!("{}{path}", self.prefix)));
        self.cfg.route(path, web::method(method).to(handler));
        self
    }
}

/// An error as MLflow's server would answer it.
#[derive(Debug)]
pub struct MlflowError {
    error: ApiError,
    code: Option<&'static str>,
}

impl MlflowError {
    /// A create that met an existing name: MLflow's `RESOURCE_ALREADY_EXISTS`.
    fn already_exists(error: ApiError) -> Self {
        match error {
            ApiError::Conflict { .. } => MlflowError { error, code: Some("RESOURCE_ALREADY_EXISTS") },
            other => other.into(),
        }
    }
}

impl From<ApiError> for MlflowError {
    fn from(error: ApiError) -> Self {
        MlflowError { error, code: None }
    }
}

impl From<trainlog_meta::Error> for MlflowError {
    fn from(error: trainlog_meta::Error) -> Self {
        ApiError::from(error).into()
    }
}

impl From<trainlog_store::Error> for MlflowError {
    fn from(error: trainlog_store::Error) -> Self {
        ApiError::from(error).into()
    }
}

impl From<trainlog_schema::Error> for MlflowError {
    fn from(error: trainlog_schema::Error) -> Self {
        ApiError::from(error).into()
    }
}

impl std::fmt::Display for MlflowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl ResponseError for MlflowError {
    fn status_code(&self) -> actix_web::http::StatusCode {
        crate::error::mlflow_code(&self.error).0
    }

    fn error_response(&self) -> HttpResponse {
        mlflow_response(&self.error, self.code)
    }
}

type Result<T, E = MlflowError> = std::result::Result<T, E>;

fn missing(name: &str) -> MlflowError {
    ApiError::invalid(
        name,
        format!("Missing value for required parameter '{name}'. See the API docs for more information about request parameters."),
    )
    .into()
}

/// An argument of the wrong type, worded as MLflow words it.
fn wrong_type(name: &str, value: &Value) -> MlflowError {
    ApiError::invalid(
        name,
        format!("Invalid value {value} for parameter '{name}' supplied. See the API docs for more information about request parameters."),
    )
    .into()
}

/// A text argument, if given.
fn text<'a>(args: &'a Value, name: &str) -> Result<Option<&'a str>> {
    match &args[name] {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s)),
        other => Err(wrong_type(name, other)),
    }
}

fn required_text<'a>(args: &'a Value, name: &str) -> Result<&'a str> {
    text(args, name)?.ok_or_else(|| missing(name))
}

/// An int64 argument: protobuf's JSON writes them as numbers or as strings.
fn integer(args: &Value, name: &str) -> Result<Option<i64>> {
    let bad = || wrong_type(name, &args[name]);
    match &args[name] {
        Value::Null => Ok(None),
        Value::Number(n) => n.as_i64().or_else(|| crate::wire::integer::of(n)).map(Some).ok_or_else(bad),
        Value::String(s) if s.is_empty() => Ok(None),
        Value::String(s) => s.trim().parse().map(Some).map_err(|_| bad()),
        _ => Err(bad()),
    }
}

/// A time argument in milliseconds since 1970, refused before 1970 or past the year 9999.
fn epoch_ms(args: &Value, name: &str) -> Result<Option<i64>> {
    let Some(time) = integer(args, name)? else { return Ok(None) };
    trainlog_schema::limits::check_epoch_ms(name, time).map(Some).map_err(|e| {
        ApiError::invalid(name, format!("Invalid value {time} for parameter '{name}' supplied: {}", e.reason)).into()
    })
}

/// A double argument, NaN and infinities spelled as protobuf's JSON spells them.
fn double(args: &Value, name: &str) -> Result<Option<f64>> {
    let bad = || wrong_type(name, &args[name]);
    match &args[name] {
        Value::Null => Ok(None),
        Value::Number(n) => n.as_f64().map(Some).ok_or_else(bad),
        Value::String(s) => match s.as_str() {
            "NaN" | "nan" => Ok(Some(f64::NAN)),
            "Infinity" | "inf" => Ok(Some(f64::INFINITY)),
            "-Infinity" | "-inf" => Ok(Some(f64::NEG_INFINITY)),
            other => other.trim().parse().map(Some).map_err(|_| bad()),
        },
        _ => Err(bad()),
    }
}

/// A repeated text argument (a JSON list, or one or more query values).
fn texts(args: &Value, name: &str) -> Result<Vec<String>> {
    match &args[name] {
        Value::Null => Ok(Vec::new()),
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(items) => {
            items.iter().map(|v| v.as_str().map(str::to_owned).ok_or_else(|| missing(name))).collect()
        }
        other => Err(wrong_type(name, other)),
    }
}

/// A repeated message argument: a JSON list of objects (none when absent).
fn object_list(args: &Value, name: &str) -> Result<Vec<Value>> {
    match &args[name] {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => match items.iter().find(|i| !i.is_object()) {
            Some(bad) => Err(wrong_type(name, bad)),
            None => Ok(items.clone()),
        },
        other => Err(wrong_type(name, other)),
    }
}

/// A double as protobuf's JSON writes it.
fn double_json(v: f64) -> Value {
    if v.is_nan() {
        Value::String("NaN".into())
    } else if v.is_infinite() {
        Value::String(if v > 0.0 { "Infinity" } else { "-Infinity" }.into())
    } else {
        serde_json::json!(v)
    }
}

/// A page of a search: `max_results` (else `default`) items from the offset in `page_token`.
fn page(args: &Value, default: i64) -> Result<(usize, usize)> {
    let limit = integer(args, "max_results")?.unwrap_or(default);
    if limit <= 0 {
        return Err(bad_max_results(limit, "It must be a positive integer"));
    }
    let offset = match text(args, "page_token")? {
        None | Some("") => 0,
        Some(t) => t.parse().map_err(|_| ApiError::invalid("page_token", "not a page token from this server"))?,
    };
    Ok((limit as usize, offset))
}

/// A refused `max_results`, worded as MLflow words it.
fn bad_max_results(limit: i64, rule: &str) -> MlflowError {
    ApiError::invalid("max_results", format!("Invalid value {limit} for parameter 'max_results' supplied. {rule}"))
        .into()
}

/// One page of `items` under `field`, with `next_page_token` when more follow.
fn paged(items: Vec<Value>, limit: usize, offset: usize, field: &str) -> Value {
    let more = offset.saturating_add(limit) < items.len();
    let page: Vec<Value> = items.into_iter().skip(offset).take(limit).collect();
    let mut answer = serde_json::json!({ field: page });
    if more {
        answer["next_page_token"] = serde_json::json!((offset + limit).to_string());
    }
    answer
}

/// The comparisons of an MLflow filter: split on `AND` (any case) outside quotes and
/// backquotes, trimmed, empty ones dropped.
fn clauses(filter: &str) -> Vec<&str> {
    split_outside_quotes(filter, " and ").into_iter().map(str::trim).filter(|c| !c.is_empty()).collect()
}

/// Splits text on a keyword outside quotes and backquotes, ignoring case.
fn split_outside_quotes<'a>(text: &'a str, keyword: &str) -> Vec<&'a str> {
    let (bytes, mut parts, mut start, mut quote, mut i) = (text.as_bytes(), Vec::new(), 0, None, 0);
    while i < bytes.len() {
        let c = bytes[i];
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if matches!(c, b'\'' | b'"' | b'`') => quote = Some(c),
            None if text[i..].len() >= keyword.len()
                && text.is_char_boundary(i)
                && text.is_char_boundary(i + keyword.len())
                && text[i..i + keyword.len()].eq_ignore_ascii_case(keyword) =>
            {
                parts.push(&text[start..i]);
                i += keyword.len();
                start = i;
                continue;
            }
            None => {}
        }
        i += 1;
    }
    parts.push(&text[start..]);
    parts
}

/// MLflow's rule for metric, param and tag keys: letters, digits, `_ - . / : ` and spaces.
pub(super) fn mlflow_key(field: &str, key: &str) -> Result<()> {
    let ok = !key.is_empty()
        && key.chars().count() <= 250
        && key.chars().all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | ' ' | '/' | ':'))
        && !key.starts_with('/')
        && !key.split('/').any(|part| part == "..");
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(
            field,
            format!(
                "Invalid value {key:?} for parameter '{field}' supplied: names may only contain alphanumerics, \
                 underscores (_), dashes (-), periods (.), spaces ( ), colon(:) and slashes (/)"
            ),
        )
        .into())
    }
}

pub(super) fn tag_pairs(args: &Value, name: &str) -> Result<Vec<(String, String)>> {
    match &args[name] {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items
            .iter()
            .map(|t| {
                let key = required_text(t, "key")?.to_owned();
                let value = text(t, "value")?.unwrap_or_default().to_owned();
                Ok((key, value))
            })
            .collect(),
        other => Err(wrong_type(name, other)),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_filter_splits_on_and_outside_quotes_only() {
        assert_eq!(
            super::clauses("name = 'cats and dogs' AND run_id = \"a AND b\" and tags.`x and y` != 'z'"),
            ["name = 'cats and dogs'", "run_id = \"a AND b\"", "tags.`x and y` != 'z'"]
        );
        assert!(super::clauses("  ").is_empty());
    }
}
