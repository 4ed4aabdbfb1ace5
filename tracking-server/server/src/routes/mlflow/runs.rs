//! MLflow's runs on trainlog's runs: create, get, update, delete and restore them, log metrics,
//! params, tags and batches, read a metric's history, and search runs with MLflow's filter.

use super::experiments::{experiment, forget_run_projects, must_be_active, view_type, DEFAULT_EXPERIMENT};
use super::{
    arguments, arguments_within, double, double_json, epoch_ms, integer, page, required_text, text, texts, MlflowError,
    Result,
};
use super::{mlflow_key, tag_pairs, BodyLimits};
use crate::auth::require_run;
use crate::error::ApiError;
use crate::lookup::run_project;
use crate::state::{meta, State};
use actix_web::http::Method;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use trainlog_meta::search::mlflow::{translate_filter, translate_order_by};
use trainlog_meta::search::RunScope;
use trainlog_meta::{NewRun, Role, Run, RunUpdate, Scope};
use trainlog_schema::limits::{check_len, MAX_KEY_CHARS, MAX_PAGE_SIZE, MAX_TAG_VALUE_CHARS};
use trainlog_schema::{
    BatchPoint, MetricKey, MetricSummary, ParamKey, ParamValue, PointBatch, ProjectName, RunId, RunStatus, TagKey,
};
use trainlog_store::StepRange;

pub(super) fn routes(door: &mut super::Door) {
    door.route(Method::GET, "/artifacts/list", super::artifacts::list_of_run)
        .route(Method::POST, "/runs/delete", delete_run)
        .route(Method::POST, "/runs/restore", restore_run)
        .route(Method::POST, "/runs/create", create_run)
        .route(Method::GET, "/runs/get", get_run)
        .route(Method::POST, "/runs/update", update_run)
        .route(Method::POST, "/runs/log-metric", log_metric)
        .route(Method::POST, "/runs/log-parameter", log_param)
        .route(Method::POST, "/runs/set-tag", set_tag)
        .route(Method::POST, "/runs/delete-tag", delete_tag)
        .route(Method::POST, "/runs/log-batch", log_batch)
        .route(Method::POST, "/runs/search", search_runs)
        .route(Method::GET, "/metrics/get-history", metric_history)
        .route(Method::POST, "/runs/log-inputs", log_inputs);
}

/// What one log-batch may carry, as MLflow's server limits it.
const MAX_BATCH_METRICS: usize = 1000;
const MAX_BATCH_PARAMS: usize = 100;
const MAX_BATCH_TAGS: usize = 100;
const MAX_BATCH_ENTITIES: usize = 1000;
/// MLflow's longest param value.
const MAX_PARAM_VALUE_CHARS: usize = 6000;
/// MLflow's longest tag value (trainlog keeps tags up to `MAX_TAG_VALUE_CHARS`).
const MLFLOW_TAG_VALUE_CHARS: usize = 8000;

/// The largest log-batch body: 100 params and 100 tags at MLflow's longest keys and values, and
/// 800 metrics with the longest keys, their text written as MLflow's Python client writes it
/// (`\uXXXX` past ASCII, 6 bytes a character), with 256 bytes an entity for the numbers, the
/// field names and the punctuation: 10,456,000 bytes. A batch past it is refused before it is read.
pub(super) const MAX_LOG_BATCH_BYTES: usize = 10 << 20;
const _: () = assert!(
    6 * (MAX_BATCH_PARAMS * (MAX_KEY_CHARS + MAX_PARAM_VALUE_CHARS)
        + MAX_BATCH_TAGS * (MAX_KEY_CHARS + MLFLOW_TAG_VALUE_CHARS)
        + (MAX_BATCH_ENTITIES - MAX_BATCH_PARAMS - MAX_BATCH_TAGS) * MAX_KEY_CHARS)
        + 256 * MAX_BATCH_ENTITIES
        <= MAX_LOG_BATCH_BYTES
);

/// A log-batch's body: within `MAX_LOG_BATCH_BYTES`, its metrics, params and tags counted as
/// they parse and refused past MLflow's limits before any is looked at.
static LOG_BATCH_BODY: BodyLimits = BodyLimits {
    bytes: MAX_LOG_BATCH_BYTES,
    lists: &[("metrics", MAX_BATCH_METRICS), ("params", MAX_BATCH_PARAMS), ("tags", MAX_BATCH_TAGS)],
    check: check_batch_counts,
};

/// Refuses a log-batch past MLflow's counts, in MLflow's words.
fn check_batch_counts(counts: &[usize]) -> Result<()> {
    let names = ["metrics", "params", "tags"];
    let limits = [MAX_BATCH_METRICS, MAX_BATCH_PARAMS, MAX_BATCH_TAGS];
    for ((name, &n), max) in names.iter().zip(counts).zip(limits) {
        if n > max {
            return Err(ApiError::OverBudget {
                field: (*name).to_owned(),
                reason: format!("A batch logging request can contain at most {max} {name}. Got {n} {name}. Please split up {name} across multiple requests and try again."),
                limit: max as u64,
            }
            .into());
        }
    }
    let total: usize = counts.iter().sum();
    if total > MAX_BATCH_ENTITIES {
        return Err(ApiError::OverBudget {
            field: "metrics".into(),
            reason: format!("A batch logging request can contain at most {MAX_BATCH_ENTITIES} metrics, params, and tags in total. Got {total} total entities."),
            limit: MAX_BATCH_ENTITIES as u64,
        }
        .into());
    }
    Ok(())
}
/// The most runs one MLflow search may ask for; trainlog answers them in pages of at most
/// `MAX_PAGE_SIZE`.
const MAX_SEARCH_RESULTS: usize = 50_000;

async fn set_run_deleted(state: State, req: HttpRequest, payload: web::Payload, deleted: bool) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let (id, was_deleted) = named_run_any(&state, &req, &args, Role::Admin).await?;
    must_be_active(&format!("run {id}"), was_deleted == deleted)?;
    let run = {
        let id = id.clone();
        meta(&state, move |m| {
            m.set_run_deleted(&id, deleted)?;
            Ok(m.run_any(&id)?.0)
        })
        .await?
    };
    forget_run_projects(&state);
    state.store.project_changed(run.project_id);
    Ok(HttpResponse::Ok().json(json!({})))
}

async fn delete_run(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    set_run_deleted(state, req, payload, true).await
}

async fn restore_run(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    set_run_deleted(state, req, payload, false).await
}

fn status_name(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Running => "RUNNING",
        RunStatus::Finished => "FINISHED",
        RunStatus::Failed | RunStatus::Preempted | RunStatus::Lost => "FAILED",
        RunStatus::Killed | RunStatus::Pruned => "KILLED",
    }
}

fn parse_status(s: &str) -> Result<RunStatus> {
    Ok(match s {
        "RUNNING" | "SCHEDULED" => RunStatus::Running,
        "FINISHED" => RunStatus::Finished,
        "FAILED" => RunStatus::Failed,
        "KILLED" => RunStatus::Killed,
        other => return Err(ApiError::invalid("status", format!("{other:?} is not a run status")).into()),
    })
}

/// A param as MLflow's clients write them: text (a Python bool reads `True`).
fn param_text(v: &ParamValue) -> String {
    match v {
        ParamValue::Str(s) => s.clone(),
        ParamValue::Int(i) => i.to_string(),
        ParamValue::Float(f) => format!("{f:?}"),
        ParamValue::Bool(b) => if *b { "True" } else { "False" }.to_owned(),
    }
}

/// A run's `info` as MLflow writes it.
#[derive(Serialize)]
struct RunInfoJson<'a> {
    run_id: &'a str,
    run_uuid: &'a str,
    run_name: &'a str,
    experiment_id: String,
    user_id: &'a str,
    status: &'static str,
    start_time: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    end_time: Option<i64>,
    artifact_uri: String,
    lifecycle_stage: &'static str,
}

fn run_info(run: &Run, deleted: bool) -> RunInfoJson<'_> {
    let experiment = if run.project == DEFAULT_EXPERIMENT { "0".to_owned() } else { run.project_id.to_string() };
    RunInfoJson {
        run_id: run.id.as_str(),
        run_uuid: run.id.as_str(),
        run_name: &run.name,
        artifact_uri: format!("mlflow-artifacts:/{experiment}/{}/artifacts", run.id),
        experiment_id: experiment,
        user_id: &run.user,
        status: status_name(run.status),
        start_time: run.start_ms,
        end_time: run.end_ms,
        lifecycle_stage: if deleted { "deleted" } else { "active" },
    }
}

#[derive(Serialize)]
struct KeyValue<'a> {
    key: &'a str,
    value: std::borrow::Cow<'a, str>,
}

#[derive(Serialize)]
struct MetricJson<'a> {
    key: &'a str,
    value: crate::wire::Float,
    timestamp: i64,
    step: i64,
}

#[derive(Serialize)]
struct RunDataJson<'a> {
    metrics: Vec<MetricJson<'a>>,
    params: Vec<KeyValue<'a>>,
    tags: Vec<KeyValue<'a>>,
}

/// What a run used, as MLflow writes it: each dataset input `{dataset, tags}` and each model
/// input `{model_id}` as `runs/log-inputs` received it.
#[derive(Serialize)]
struct RunInputsJson<'a> {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    dataset_inputs: Vec<&'a Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    model_inputs: Vec<&'a Value>,
}

/// What a run produced, as MLflow writes it: each `{model_id, step}` as `runs/outputs` received it.
#[derive(Serialize)]
struct RunOutputsJson<'a> {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    model_outputs: Vec<&'a Value>,
}

/// The objects of a list kept in a run's metadata (none where it is missing).
fn kept_items<'a>(section: &'a Value, field: &str) -> Vec<&'a Value> {
    section[field].as_array().map(|items| items.iter().filter(|i| i.is_object()).collect()).unwrap_or_default()
}

/// A run as MLflow writes it, serialized straight from trainlog's run (search answers
/// thousands of them).
#[derive(Serialize)]
struct RunJson<'a> {
    info: RunInfoJson<'a>,
    data: RunDataJson<'a>,
    inputs: RunInputsJson<'a>,
    outputs: RunOutputsJson<'a>,
}

fn run_json<'a>(run: &'a Run, deleted: bool, extras: &'a RunExtras) -> RunJson<'a> {
    use std::borrow::Cow;
    let commit = extras.commit.as_deref();
    let metrics = extras
        .summaries
        .iter()
        .map(|(k, s)| MetricJson { key: k, value: crate::wire::Float(s.last), timestamp: s.last_ms, step: s.last_step })
        .collect();
    let params = run.params.iter().map(|(k, v)| KeyValue { key: k, value: Cow::Owned(param_text(v)) }).collect();
    let mut tags: Vec<KeyValue> =
        run.tags.iter().map(|(k, v)| KeyValue { key: k, value: Cow::Borrowed(v.as_str()) }).collect();
    tags.push(KeyValue { key: "mlflow.runName", value: Cow::Borrowed(&run.name) });
    tags.push(KeyValue { key: "mlflow.user", value: Cow::Borrowed(&run.user) });
    if let Some(parent) = &run.parent_id {
        tags.push(KeyValue { key: "mlflow.parentRunId", value: Cow::Borrowed(parent) });
    }
    if !run.notes.is_empty() {
        tags.push(KeyValue { key: "mlflow.note.content", value: Cow::Borrowed(&run.notes) });
    }
    if let Some(commit) = commit.filter(|_| !run.tags.contains_key("mlflow.source.git.commit")) {
        tags.push(KeyValue { key: "mlflow.source.git.commit", value: Cow::Borrowed(commit) });
    }
    RunJson {
        info: run_info(run, deleted),
        data: RunDataJson { metrics, params, tags },
        inputs: RunInputsJson {
            dataset_inputs: kept_items(&extras.inputs, "datasets"),
            model_inputs: kept_items(&extras.inputs, "models"),
        },
        outputs: RunOutputsJson { model_outputs: kept_items(&extras.outputs, "models") },
    }
}

/// What `run_json` reads besides the run: its summaries, code version, and the `inputs` and
/// `outputs` metadata that `runs/log-inputs` and `runs/outputs` keep (null where none).
struct RunExtras {
    summaries: BTreeMap<String, MetricSummary>,
    commit: Option<String>,
    inputs: Value,
    outputs: Value,
}

async fn run_view(state: &State, run: &Run, deleted: bool) -> Result<Value> {
    let pair = [(run.clone(), deleted)];
    let extras = run_extras(state, &pair).await?;
    let extras = extras.first().ok_or_else(|| ApiError::Internal(format!("no extras read for run {}", run.id)))?;
    Ok(serde_json::to_value(run_json(run, deleted, extras))
        .map_err(|e| ApiError::Internal(format!("writing run {}: {e}", run.id)))?)
}

/// The summaries, code versions, inputs and outputs of many runs, each metadata section read in
/// one query.
async fn run_extras(state: &State, runs: &[(Run, bool)]) -> Result<Vec<RunExtras>> {
    let ids: Vec<RunId> = runs.iter().map(|(r, _)| r.id.clone()).collect();
    let (code, mut inputs, mut outputs) = meta(state, move |m| {
        Ok((
            m.metadata_section_of(&ids, "code")?,
            m.metadata_section_of(&ids, "inputs")?,
            m.metadata_section_of(&ids, "outputs")?,
        ))
    })
    .await?;
    let mut out = Vec::with_capacity(runs.len());
    for (run, _) in runs {
        let summaries = state.store.summaries(&run.id).await?;
        let commit = code.get(run.id.as_str()).and_then(|c| c["commit"].as_str()).map(str::to_owned);
        let inputs = inputs.remove(run.id.as_str()).unwrap_or_default();
        let outputs = outputs.remove(run.id.as_str()).unwrap_or_default();
        out.push(RunExtras { summaries, commit, inputs, outputs });
    }
    Ok(out)
}

/// The active run an MLflow request names (`run_id`, or the older `run_uuid`), once the caller
/// may `need` it.
async fn named_run(state: &State, req: &HttpRequest, args: &Value, need: Role) -> Result<RunId> {
    let (id, deleted) = named_run_any(state, req, args, need).await?;
    must_be_active(&format!("run {id}"), deleted)?;
    Ok(id)
}

/// The run an MLflow request names, deleted or not, with whether it is deleted.
pub(super) async fn named_run_any(state: &State, req: &HttpRequest, args: &Value, need: Role) -> Result<(RunId, bool)> {
    let raw = match text(args, "run_id")?.filter(|s| !s.is_empty()) {
        Some(id) => id,
        None => text(args, "run_uuid")?.filter(|s| !s.is_empty()).ok_or_else(|| super::missing("run_id"))?,
    };
    let not_found = || ApiError::NotFound(format!("Run with id={raw}"));
    let id = RunId::parse("run_id", raw).map_err(|_| not_found())?;
    match run_project(state, &id).await {
        Ok(project_id) => {
            require_run(req, &id, project_id, need).await?;
            Ok((id, false))
        }
        Err(ApiError::NotFound(_)) => {
            let owned = id.clone();
            let (run, deleted) = meta(state, move |m| m.run_any(&owned)).await.map_err(|_| not_found())?;
            require_run(req, &id, run.project_id, need).await?;
            Ok((id, deleted))
        }
        Err(e) => Err(e.into()),
    }
}

/// Tags MLflow keeps as a run's own fields, applied to a run update; answers the rest.
fn split_tags(tags: Vec<(String, String)>, update: &mut RunUpdate) -> Result<BTreeMap<TagKey, String>> {
    let mut rest = BTreeMap::new();
    for (key, value) in tags {
        match key.as_str() {
            "mlflow.runName" => update.name = Some(value),
            "mlflow.note.content" => update.notes = Some(value),
            "mlflow.user" | "mlflow.parentRunId" => {}
            _ => {
                mlflow_key("key", &key)?;
                check_len(&key, "a tag value", &value, MAX_TAG_VALUE_CHARS)?;
                rest.insert(TagKey::parse("key", &key)?, value);
            }
        }
    }
    Ok(rest)
}

/// Records the code version MLflow's clients send as a tag where trainlog keeps it.
async fn keep_commit(state: &State, id: &RunId, tags: &[(String, String)]) -> Result<()> {
    if let Some((_, commit)) = tags.iter().find(|(k, _)| k == "mlflow.source.git.commit") {
        let (id, commit) = (id.clone(), commit.clone());
        meta(state, move |m| {
            if m.metadata(&id)?.contains_key("code") {
                return Ok(());
            }
            m.set_metadata(&id, "code", &json!({"commit": commit}))
        })
        .await?;
    }
    Ok(())
}

async fn create_run(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let experiment_id = text(&args, "experiment_id")?.filter(|s| !s.is_empty()).unwrap_or("0").to_owned();
    let project = experiment(&state, &req, &experiment_id, Role::Write).await?;
    let tags = tag_pairs(&args, "tags")?;
    let tag = |k: &str| tags.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
    let mut update = RunUpdate::default();
    let rest = split_tags(tags.clone(), &mut update)?;
    // trainlog's extension for `trainlog import mlflow`: keep the source's run id, and its user
    // where the caller may speak for others (no keys, or a server admin).
    let run_id = text(&args, "run_id")?.filter(|s| !s.is_empty()).map(|s| RunId::parse("run_id", s)).transpose()?;
    let given_user = || -> Result<String> {
        Ok(text(&args, "user_id")?.map(str::to_owned).or_else(|| tag("mlflow.user")).unwrap_or_default())
    };
    let user = match crate::auth::caller(&req) {
        Some(c) if run_id.is_some() && c.is_admin => given_user()?,
        Some(c) => c.name,
        None => given_user()?,
    };
    // MLflow takes any parent id; trainlog links runs it holds and keeps other ids as a tag.
    let mut rest = rest;
    let parent_id = match tag("mlflow.parentRunId") {
        None => None,
        Some(parent) => {
            let known = match RunId::parse("mlflow.parentRunId", &parent) {
                Ok(id) => {
                    let probe = id.clone();
                    meta(&state, move |m| Ok(m.run_any(&probe).is_ok())).await?.then_some(id)
                }
                Err(_) => None,
            };
            if known.is_none() {
                rest.insert(TagKey::parse("key", "mlflow.parentRunId")?, parent);
            }
            known
        }
    };
    let new = NewRun {
        id: run_id,
        project: Some(ProjectName::parse("experiment_id", &project.name)?),
        name: text(&args, "run_name")?.filter(|s| !s.is_empty()).map(str::to_owned).or(update.name),
        tags: rest,
        user,
        parent_id,
        notes: update.notes.unwrap_or_default(),
        start_ms: epoch_ms(&args, "start_time")?,
        actor: crate::auth::actor(&req),
        ..Default::default()
    };
    let (run, _) = meta(&state, move |m| m.create_run(&new)).await.map_err(MlflowError::already_exists)?;
    state.store.project_changed(run.project_id);
    keep_commit(&state, &run.id, &tags).await?;
    Ok(HttpResponse::Ok().json(json!({"run": run_view(&state, &run, false).await?})))
}

async fn get_run(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let (id, _) = named_run_any(&state, &req, &args, Role::Read).await?;
    let (run, deleted) = meta(&state, move |m| m.run_any(&id)).await?;
    Ok(HttpResponse::Ok().json(json!({"run": run_view(&state, &run, deleted).await?})))
}

async fn update_run(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let id = named_run(&state, &req, &args, Role::Write).await?;
    let status = text(&args, "status")?.map(parse_status).transpose()?;
    let end_time = epoch_ms(&args, "end_time")?;
    let name = text(&args, "run_name")?.filter(|s| !s.is_empty()).map(str::to_owned);
    let run = {
        let id = id.clone();
        meta(&state, move |m| {
            if let Some(name) = name {
                m.update_run(&id, &RunUpdate { name: Some(name), ..RunUpdate::default() })?;
            }
            if let Some(status) = status {
                let end = if status == RunStatus::Running { None } else { end_time.or(Some(trainlog_meta::now_ms())) };
                m.set_status(&id, status, end)?;
            }
            m.run(&id)
        })
        .await?
    };
    state.store.project_changed(run.project_id);
    if run.status != RunStatus::Running {
        state.store.run_finished(&id).await?;
    }
    Ok(HttpResponse::Ok().json(json!({"run_info": run_info(&run, false)})))
}

/// One metric of a request; `at` names where it sits (`metrics[3].`) in error messages.
fn metric_point(args: &Value, at: &str) -> Result<(MetricKey, BatchPoint)> {
    let key = required_text(args, "key")?;
    mlflow_key("key", key)?;
    let key = MetricKey::parse("key", key)?;
    let value = double(args, "value")?.ok_or_else(|| super::missing(&format!("{at}value")))?;
    let timestamp_ms = integer(args, "timestamp")?.ok_or_else(|| super::missing(&format!("{at}timestamp")))?;
    let step = integer(args, "step")?.unwrap_or(0);
    Ok((key, BatchPoint { key: 0, step, timestamp_ms, value }))
}

async fn append(state: &State, id: &RunId, points: Vec<(MetricKey, BatchPoint)>) -> Result<()> {
    if points.is_empty() {
        return Ok(());
    }
    let project_id = run_project(state, id).await?;
    let mut batch = PointBatch::default();
    let mut index: BTreeMap<MetricKey, u32> = BTreeMap::new();
    for (key, mut point) in points {
        let next = index.len() as u32;
        point.key = *index.entry(key.clone()).or_insert_with(|| {
            batch.keys.push(key);
            next
        });
        batch.points.push(point);
    }
    // The project's metric rules, as for the native API's ingest.
    let fired = state.rules.check(project_id, id, &batch, trainlog_meta::now_ms());
    state.store.append(id, project_id, batch).await?;
    if !fired.is_empty() {
        crate::rules::raise(state.clone(), id.clone(), fired);
    }
    Ok(())
}

async fn log_metric(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let id = named_run(&state, &req, &args, Role::Write).await?;
    let point = metric_point(&args, "")?;
    append(&state, &id, vec![point]).await?;
    Ok(HttpResponse::Ok().json(json!({})))
}

fn param(key: &str, value: &str) -> Result<(ParamKey, ParamValue)> {
    mlflow_key("key", key)?;
    if value.chars().count() > MAX_PARAM_VALUE_CHARS {
        return Err(ApiError::invalid(
            "value",
            format!(
                "Param value for {key:?} had length {}, which exceeds length limit of {MAX_PARAM_VALUE_CHARS}",
                value.chars().count()
            ),
        )
        .into());
    }
    Ok((ParamKey::parse("key", key)?, ParamValue::Str(value.to_owned())))
}

async fn set_params(state: &State, id: &RunId, params: BTreeMap<ParamKey, ParamValue>) -> Result<()> {
    if params.is_empty() {
        return Ok(());
    }
    let id = id.clone();
    let run = meta(state, move |m| {
        m.set_params(&id, &params, false)?;
        m.run(&id)
    })
    .await
    .map_err(|e| match e {
        ApiError::Conflict { field, reason } => {
            let reason = reason.split("; send").next().unwrap_or_default();
            ApiError::Invalid { field, reason: format!("Changing param values is not allowed. {reason}") }
        }
        other => other,
    })?;
    state.store.project_changed(run.project_id);
    Ok(())
}

async fn log_param(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let id = named_run(&state, &req, &args, Role::Write).await?;
    let (key, value) = param(required_text(&args, "key")?, text(&args, "value")?.unwrap_or_default())?;
    set_params(&state, &id, BTreeMap::from([(key, value)])).await?;
    Ok(HttpResponse::Ok().json(json!({})))
}

async fn apply_tags(state: &State, id: &RunId, tags: Vec<(String, String)>, delete: Vec<TagKey>) -> Result<()> {
    let mut update = RunUpdate { delete_tags: delete, ..RunUpdate::default() };
    update.set_tags = split_tags(tags.clone(), &mut update)?;
    let run = {
        let id = id.clone();
        meta(state, move |m| {
            m.update_run(&id, &update)?;
            m.run(&id)
        })
        .await?
    };
    keep_commit(state, id, &tags).await?;
    state.store.project_changed(run.project_id);
    Ok(())
}

async fn set_tag(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let id = named_run(&state, &req, &args, Role::Write).await?;
    let key = required_text(&args, "key")?.to_owned();
    let value = text(&args, "value")?.unwrap_or_default().to_owned();
    apply_tags(&state, &id, vec![(key, value)], Vec::new()).await?;
    Ok(HttpResponse::Ok().json(json!({})))
}

async fn delete_tag(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let id = named_run(&state, &req, &args, Role::Write).await?;
    let key = required_text(&args, "key")?;
    let run = {
        let id = id.clone();
        meta(&state, move |m| m.run(&id)).await?
    };
    if !run.tags.contains_key(key) {
        return Err(ApiError::NotFound(format!("No tag with name: {key} in run with id {id}")).into());
    }
    apply_tags(&state, &id, Vec::new(), vec![TagKey::parse("key", key)?]).await?;
    Ok(HttpResponse::Ok().json(json!({})))
}

async fn log_batch(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    // The counts are checked as the body parses, before the run is looked up.
    let args = arguments_within(&req, payload, &LOG_BATCH_BODY).await?;
    let id = named_run(&state, &req, &args, Role::Write).await?;
    let list = |name: &str| match &args[name] {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => Ok(items.clone()),
        other => Err(super::wrong_type(name, other)),
    };
    let (metrics, params, tags) = (list("metrics")?, list("params")?, tag_pairs(&args, "tags")?);
    // Everything is checked before anything is written.
    let points = metrics
        .iter()
        .enumerate()
        .map(|(i, m)| metric_point(m, &format!("metrics[{i}].")))
        .collect::<Result<Vec<_>>>()?;
    let mut parsed = BTreeMap::new();
    for p in &params {
        let (key, value) = param(required_text(p, "key")?, text(p, "value")?.unwrap_or_default())?;
        if parsed.get(&key).is_some_and(|v| *v != value) {
            return Err(
                ApiError::invalid("params", format!("Duplicate parameter keys with different values: {key}")).into()
            );
        }
        parsed.insert(key, value);
    }
    split_tags(tags.clone(), &mut RunUpdate::default())?;
    set_params(&state, &id, parsed).await?;
    if !tags.is_empty() {
        apply_tags(&state, &id, tags, Vec::new()).await?;
    }
    append(&state, &id, points).await?;
    Ok(HttpResponse::Ok().json(json!({})))
}

async fn search_runs(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let filter = translate_filter(text(&args, "filter")?.unwrap_or("")).map_err(ApiError::from)?;
    let order_by = translate_order_by(&texts(&args, "order_by")?).map_err(ApiError::from)?;
    let (limit, offset) = page(&args, 1000)?;
    if limit > MAX_SEARCH_RESULTS {
        return Err(super::bad_max_results(limit as i64, &format!("It must be at most {MAX_SEARCH_RESULTS}")));
    }
    let limit = limit.min(MAX_PAGE_SIZE as usize);
    let visible = crate::auth::visibility(&req, Scope::Project).await?;
    let mut ids = Vec::new();
    for experiment_id in texts(&args, "experiment_ids")? {
        let project = match experiment(&state, &req, &experiment_id, Role::Read).await {
            Ok(p) => p,
            Err(_) => continue,
        };
        if visible.allows(project.id) {
            ids.push(project.id);
        }
    }
    let lifecycle = view_type(&args)?.lifecycle();
    let scope = RunScope::Projects(ids);
    state.store.sync_summaries().await?;
    let runs =
        meta(&state, move |m| m.search_in(scope, lifecycle, &filter, &order_by, limit as u32 + 1, offset as u64))
            .await?;
    let more = runs.len() > limit;
    let shown = &runs[..runs.len().min(limit)];
    let extras = run_extras(&state, shown).await?;
    #[derive(Serialize)]
    struct Answer<'a> {
        runs: Vec<RunJson<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        next_page_token: Option<String>,
    }
    let answer = Answer {
        runs: shown.iter().zip(&extras).map(|((run, deleted), e)| run_json(run, *deleted, e)).collect(),
        next_page_token: more.then(|| (offset + limit).to_string()),
    };
    Ok(HttpResponse::Ok().json(answer))
}

async fn metric_history(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let (id, _) = named_run_any(&state, &req, &args, Role::Read).await?;
    let key = required_text(&args, "metric_key")?;
    let key = MetricKey::parse("metric_key", key)?;
    // As MLflow's own server does, a page holds at most `MAX_HISTORY_PAGE` points, whatever
    // `max_results` asks; the client follows `next_page_token` for the rest.
    let (limit, offset) = page(&args, MAX_HISTORY_PAGE as i64)?;
    let limit = limit.min(MAX_HISTORY_PAGE);
    // Each page reads the whole series: it is bounded as a metrics query is, before it is read.
    use crate::routes::metrics::{max_query_points, series_points};
    let (points, budget) = (series_points(&state, std::slice::from_ref(&id), &key).await?, max_query_points());
    if points > budget {
        return Err(ApiError::OverBudget {
            field: "metric_key".into(),
            reason: format!(
                "the series {key} of run {id} holds {points} points, more than the {budget} points one read may cost"
            ),
            limit: budget,
        }
        .into());
    }
    let series = state.store.series(&id, &key, StepRange::default()).await?;
    // The page is written on the blocking pool: the workers keep answering other requests.
    let body = web::block(move || {
        let end = offset.saturating_add(limit).min(series.steps.len());
        let metrics: Vec<Value> = (offset.min(end)..end)
            .map(|i| {
                json!({"key": key.as_str(), "value": double_json(series.values[i]), "timestamp": series.timestamps[i], "step": series.steps[i]})
            })
            .collect();
        let mut answer = json!({"metrics": metrics});
        if end < series.steps.len() {
            answer["next_page_token"] = json!(end.to_string());
        }
        serde_json::to_vec(&answer)
    })
    .await
    .map_err(ApiError::from)?
    .map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(HttpResponse::Ok().content_type("application/json").body(body))
}

/// Points in one page of `metrics/get-history`, as MLflow's server pages it.
pub const MAX_HISTORY_PAGE: usize = 25_000;

/// The largest log-inputs body: a dataset at MLflow's limits (a profile of 16,777,215
/// characters, a schema of 1,048,575 and a source of 65,535, each JSON text whose quotes take 2
/// bytes once escaped) and 4 MiB for the rest.
pub(super) const MAX_LOG_INPUTS_BYTES: usize = 40 << 20;
const _: () = assert!(2 * (16_777_215 + 1_048_575 + 65_535) + (4 << 20) <= MAX_LOG_INPUTS_BYTES);

static LOG_INPUTS_BODY: BodyLimits = BodyLimits { bytes: MAX_LOG_INPUTS_BYTES, lists: &[], check: |_| Ok(()) };

/// The datasets (and models) a run used: kept in the run's `inputs` metadata, each once.
async fn log_inputs(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments_within(&req, payload, &LOG_INPUTS_BODY).await?;
    let id = named_run(&state, &req, &args, Role::Write).await?;
    let (datasets, models) = (super::object_list(&args, "datasets")?, super::object_list(&args, "models")?);
    meta(&state, move |m| {
        let mut inputs = m.metadata(&id)?.remove("inputs").unwrap_or_else(|| json!({"datasets": [], "models": []}));
        for (field, new) in [("datasets", datasets), ("models", models)] {
            if !inputs[field].is_array() {
                inputs[field] = json!([]);
            }
            if let Some(known) = inputs[field].as_array_mut() {
                for item in new {
                    if !known.contains(&item) {
                        known.push(item);
                    }
                }
            }
        }
        m.set_metadata(&id, "inputs", &inputs)
    })
    .await?;
    Ok(HttpResponse::Ok().json(json!({})))
}
