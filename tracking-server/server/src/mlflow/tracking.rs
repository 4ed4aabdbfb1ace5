//! MLflow's tracking routes: experiments, runs, params, tags, metrics and their history, and run
//! search, each on trainlog's projects and runs.

use super::filter::{translate_filter, translate_order_by};
use super::{arguments, double, double_json, integer, page, required_text, text, texts, MlflowError, Result};
use crate::auth::{require, require_run};
use crate::error::ApiError;
use crate::routes::{meta, run_project, State};
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use trainlog_meta::search::RunScope;
use trainlog_meta::{NewRun, Project, Role, Run, RunUpdate, Scope};
use trainlog_schema::limits::{check_len, MAX_PAGE_SIZE, MAX_TAG_VALUE_CHARS};
use trainlog_schema::{
    BatchPoint, MetricKey, MetricSummary, ParamKey, ParamValue, PointBatch, ProjectName, RunId, RunStatus, TagKey,
};
use trainlog_store::StepRange;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/experiments/create", web::post().to(create_experiment))
        .route("/experiments/get", web::get().to(get_experiment))
        .route("/experiments/get-by-name", web::get().to(get_experiment_by_name))
        .route("/experiments/search", web::post().to(search_experiments))
        .route("/experiments/search", web::get().to(search_experiments))
        .route("/experiments/update", web::post().to(update_experiment))
        .route("/experiments/delete", web::post().to(delete_experiment))
        .route("/experiments/restore", web::post().to(restore_experiment))
        .route("/experiments/set-experiment-tag", web::post().to(set_experiment_tag))
        .route("/experiments/delete-experiment-tag", web::post().to(delete_experiment_tag))
        .route("/artifacts/list", web::get().to(super::artifacts::list_of_run))
        .route("/runs/delete", web::post().to(delete_run))
        .route("/runs/restore", web::post().to(restore_run))
        .route("/runs/create", web::post().to(create_run))
        .route("/runs/get", web::get().to(get_run))
        .route("/runs/update", web::post().to(update_run))
        .route("/runs/log-metric", web::post().to(log_metric))
        .route("/runs/log-parameter", web::post().to(log_param))
        .route("/runs/set-tag", web::post().to(set_tag))
        .route("/runs/delete-tag", web::post().to(delete_tag))
        .route("/runs/log-batch", web::post().to(log_batch))
        .route("/runs/search", web::post().to(search_runs))
        .route("/metrics/get-history", web::get().to(metric_history))
        .route("/runs/log-inputs", web::post().to(log_inputs));
}

/// MLflow's default experiment: id `0`, the project named so.
const DEFAULT_EXPERIMENT: &str = "Default";
/// What one log-batch may carry, as MLflow's server limits it.
const MAX_BATCH_METRICS: usize = 1000;
const MAX_BATCH_PARAMS: usize = 100;
const MAX_BATCH_TAGS: usize = 100;
const MAX_BATCH_ENTITIES: usize = 1000;
/// MLflow's longest param value.
const MAX_PARAM_VALUE_CHARS: usize = 6000;

fn experiment_id(p: &Project) -> String {
    if p.name == DEFAULT_EXPERIMENT {
        "0".to_owned()
    } else {
        p.id.to_string()
    }
}

/// An experiment as MLflow describes it; `None` tags: not read (lists).
fn experiment_json(p: &Project, deleted: bool, tags: Option<&BTreeMap<String, String>>) -> Value {
    let id = experiment_id(p);
    let tags: Vec<Value> = tags.into_iter().flatten().map(|(k, v)| json!({"key": k, "value": v})).collect();
    json!({
        "experiment_id": id,
        "name": p.name,
        "artifact_location": format!("mlflow-artifacts:/{id}"),
        "lifecycle_stage": if deleted { "deleted" } else { "active" },
        "creation_time": p.created_ms,
        "last_update_time": p.created_ms,
        "tags": tags,
    })
}

async fn experiment_view(state: &State, p: &Project, deleted: bool) -> Result<Value> {
    let id = p.id;
    let tags = meta(state, move |m| m.project_tags(id)).await?;
    Ok(experiment_json(p, deleted, Some(&tags)))
}

fn must_be_active(what: &str, deleted: bool) -> Result<()> {
    if deleted {
        return Err(ApiError::invalid("lifecycle_stage", format!("The {what} must be in the 'active' state.")).into());
    }
    Ok(())
}

/// The project behind an experiment id, once the caller may `need` it; it must be active.
async fn experiment(state: &State, req: &HttpRequest, id: &str, need: Role) -> Result<Project> {
    let (project, deleted) = experiment_any(state, req, id, need).await?;
    must_be_active(&format!("experiment {id}"), deleted)?;
    Ok(project)
}

/// The project behind an experiment id, deleted or not, once the caller may `need` it.
async fn experiment_any(state: &State, req: &HttpRequest, id: &str, need: Role) -> Result<(Project, bool)> {
    let (project, deleted) = if id == "0" {
        meta(state, |m| match m.project_by_name_any(DEFAULT_EXPERIMENT) {
            Err(trainlog_meta::Error::NotFound { .. }) => {
                let name = ProjectName::parse("experiment_id", DEFAULT_EXPERIMENT)?;
                match m.create_project(&name, "", None) {
                    Err(trainlog_meta::Error::Conflict { .. }) => m.project_by_name_any(DEFAULT_EXPERIMENT),
                    other => other.map(|p| (p, false)),
                }
            }
            other => other,
        })
        .await?
    } else {
        let number: i64 = id.parse().map_err(|_| ApiError::NotFound(format!("experiment with id {id:?}")))?;
        meta(state, move |m| m.project_any(number))
            .await
            .map_err(|_| ApiError::NotFound(format!("experiment with id {number}")))?
    };
    require(req, Scope::Project, project.id, &project.name, need).await?;
    Ok((project, deleted))
}

async fn create_experiment(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let name = ProjectName::parse("name", required_text(&args, "name")?)?;
    // Artifacts live in trainlog's own store; a location is checked as MLflow checks it, and the
    // experiment answers with the location its artifacts really have.
    text(&args, "artifact_location")?;
    let tags = tag_pairs(&args, "tags")?;
    for (key, value) in &tags {
        mlflow_key("key", key)?;
        check_len(key, "a tag value", value, MAX_TAG_VALUE_CHARS)?;
    }
    let creator = crate::auth::actor(&req);
    let project = meta(&state, move |m| {
        let project = m.create_project(&name, "", creator.as_ref())?;
        for (key, value) in &tags {
            m.set_project_tag(project.id, key, Some(value))?;
        }
        Ok(project)
    })
    .await
    .map_err(MlflowError::already_exists)?;
    Ok(HttpResponse::Ok().json(json!({"experiment_id": experiment_id(&project)})))
}

async fn get_experiment(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let id = required_text(&args, "experiment_id")?;
    let (project, deleted) = experiment_any(&state, &req, id, Role::Read).await?;
    Ok(HttpResponse::Ok().json(json!({"experiment": experiment_view(&state, &project, deleted).await?})))
}

async fn get_experiment_by_name(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let name = required_text(&args, "experiment_name")?.to_owned();
    let owned = name.clone();
    let (project, deleted) = meta(&state, move |m| m.project_by_name_any(&owned))
        .await
        .map_err(|_| ApiError::NotFound(format!("Could not find experiment with name '{name}'")))?;
    require(&req, Scope::Project, project.id, &project.name, Role::Read)
        .await
        .map_err(|_| ApiError::NotFound(format!("Could not find experiment with name '{name}'")))?;
    Ok(HttpResponse::Ok().json(json!({"experiment": experiment_view(&state, &project, deleted).await?})))
}

/// A filter on names and tags, as clients search experiments and registered models:
/// comparisons joined by `AND`, each `name` or `tags.KEY` (`tag.`, backquotes allowed) with
/// `=`, `!=`, `LIKE` or `ILIKE` and a quoted value. A `!=` on a tag a thing lacks matches.
pub(super) struct NameFilter {
    clauses: Vec<(Option<String>, String, String)>,
}

impl NameFilter {
    /// Whether a filter names tags, so they must be read.
    pub(super) fn uses_tags(&self) -> bool {
        self.clauses.iter().any(|(tag, _, _)| tag.is_some())
    }

    pub(super) fn matches(&self, name: &str, tags: &BTreeMap<String, String>) -> bool {
        self.clauses.iter().all(|(tag, op, value)| {
            let subject = match tag {
                None => Some(name),
                Some(key) => tags.get(key).map(String::as_str),
            };
            match (op.as_str(), subject) {
                ("!=", None) => true,
                (_, None) => false,
                ("=", Some(s)) => s == value,
                ("!=", Some(s)) => s != value,
                ("LIKE", Some(s)) => like(s, value),
                (_, Some(s)) => like(&s.to_lowercase(), &value.to_lowercase()),
            }
        })
    }
}

pub(super) fn name_filter(filter: &str) -> Result<NameFilter> {
    let mut clauses = Vec::new();
    for clause in super::clauses(filter) {
        let refused = || {
            MlflowError::from(ApiError::invalid(
                "filter",
                format!("{clause:?}: filter by name or tags.KEY with =, !=, LIKE or ILIKE and a quoted value"),
            ))
        };
        let field_end = clause
            .char_indices()
            .scan(false, |in_backquote, (i, c)| {
                if c == '`' {
                    *in_backquote = !*in_backquote;
                }
                Some((i, c, *in_backquote))
            })
            .find(|(_, c, in_backquote)| !in_backquote && (c.is_whitespace() || matches!(c, '=' | '!')))
            .map(|(i, _, _)| i)
            .ok_or_else(refused)?;
        let (field, rest) = (&clause[..field_end], clause[field_end..].trim_start());
        let tag = match field.split_once('.') {
            None if field == "name" => None,
            Some((prefix, "name")) if matches!(prefix, "attribute" | "attributes") => None,
            Some((prefix, key)) if matches!(prefix, "tag" | "tags") => Some(key.trim_matches('`').to_owned()),
            _ => return Err(refused()),
        };
        let (op, value) = ["!=", "=", "ILIKE", "LIKE"]
            .iter()
            .find_map(|op| {
                rest.get(..op.len())
                    .filter(|head| head.eq_ignore_ascii_case(op))
                    .map(|_| (op.to_string(), rest[op.len()..].trim()))
            })
            .ok_or_else(refused)?;
        let quoted = value.len() >= 2
            && ((value.starts_with('\'') && value.ends_with('\'')) || (value.starts_with('"') && value.ends_with('"')));
        if !quoted {
            return Err(refused());
        }
        clauses.push((tag, op, value[1..value.len() - 1].to_owned()));
    }
    Ok(NameFilter { clauses })
}

/// SQL LIKE: `%` any run of characters, `_` one.
fn like(text: &str, pattern: &str) -> bool {
    fn go(t: &[char], p: &[char]) -> bool {
        match p.split_first() {
            None => t.is_empty(),
            Some(('%', rest)) => (0..=t.len()).any(|i| go(&t[i..], rest)),
            Some(('_', rest)) => !t.is_empty() && go(&t[1..], rest),
            Some((c, rest)) => t.first() == Some(c) && go(&t[1..], rest),
        }
    }
    go(&text.chars().collect::<Vec<_>>(), &pattern.chars().collect::<Vec<_>>())
}

async fn search_experiments(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let filter = name_filter(text(&args, "filter")?.unwrap_or(""))?;
    let (limit, offset) = page(&args, 1000)?;
    // Like MLflow's server, there is always a Default experiment.
    if crate::auth::actor(&req).is_none_or(|a| a.is_admin) {
        experiment(&state, &req, "0", Role::Read).await?;
    }
    let view = view_type(&args)?;
    let visible = crate::auth::visibility(&req, Scope::Project).await?;
    let mut projects: Vec<(Project, bool)> = Vec::new();
    for (p, deleted) in meta(&state, |m| m.list_projects_any()).await? {
        if !visible.allows(p.id) || !view.shows(deleted) {
            continue;
        }
        let tags = if filter.uses_tags() {
            let id = p.id;
            meta(&state, move |m| m.project_tags(id)).await?
        } else {
            BTreeMap::new()
        };
        if filter.matches(&p.name, &tags) {
            projects.push((p, deleted));
        }
    }
    sort_experiments(&mut projects, &super::texts(&args, "order_by")?)?;
    let mut page = Vec::new();
    for (p, deleted) in projects.iter().skip(offset).take(limit) {
        page.push(experiment_view(&state, p, *deleted).await?);
    }
    let mut answer = json!({"experiments": page});
    if offset + limit < projects.len() {
        answer["next_page_token"] = json!((offset + limit).to_string());
    }
    Ok(HttpResponse::Ok().json(answer))
}

/// Orders experiments as `order_by` asks (`name`, `experiment_id`, `creation_time`,
/// `last_update_time`, each `ASC` or `DESC`); newest first by default, as MLflow.
fn sort_experiments(projects: &mut [(Project, bool)], order_by: &[String]) -> Result<()> {
    let mut keys = Vec::new();
    for item in order_by {
        let mut words = item.split_whitespace();
        let field = words.next().unwrap_or_default().trim_start_matches("attributes.").trim_start_matches("attribute.");
        let descending = match words.next().map(str::to_ascii_uppercase).as_deref() {
            None | Some("ASC") => false,
            Some("DESC") => true,
            Some(other) => return Err(ApiError::invalid("order_by", format!("{other:?}: ASC or DESC")).into()),
        };
        if !matches!(field, "name" | "experiment_id" | "creation_time" | "last_update_time") {
            return Err(ApiError::invalid(
                "order_by",
                format!("{field:?}: experiments are ordered by name, experiment_id, creation_time or last_update_time"),
            )
            .into());
        }
        keys.push((field.to_owned(), descending));
    }
    if keys.is_empty() {
        keys.push(("creation_time".to_owned(), true));
    }
    projects.sort_by(|(a, _), (b, _)| {
        keys.iter()
            .map(|(field, descending)| {
                let order = match field.as_str() {
                    "name" => a.name.cmp(&b.name),
                    "experiment_id" => a.id.cmp(&b.id),
                    _ => a.created_ms.cmp(&b.created_ms),
                };
                if *descending {
                    order.reverse()
                } else {
                    order
                }
            })
            .find(|o| o.is_ne())
            .unwrap_or_else(|| b.id.cmp(&a.id))
    });
    Ok(())
}

/// MLflow's `ViewType`: which lifecycle stages a search shows.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ViewType {
    ActiveOnly,
    DeletedOnly,
    All,
}

impl ViewType {
    fn shows(self, deleted: bool) -> bool {
        match self {
            ViewType::ActiveOnly => !deleted,
            ViewType::DeletedOnly => deleted,
            ViewType::All => true,
        }
    }

    fn lifecycle(self) -> trainlog_meta::search::Lifecycle {
        match self {
            ViewType::ActiveOnly => trainlog_meta::search::Lifecycle::Active,
            ViewType::DeletedOnly => trainlog_meta::search::Lifecycle::Deleted,
            ViewType::All => trainlog_meta::search::Lifecycle::All,
        }
    }
}

fn view_type(args: &Value) -> Result<ViewType> {
    let given = text(args, "view_type")?.or(text(args, "run_view_type")?);
    Ok(match given.unwrap_or("ACTIVE_ONLY") {
        "ACTIVE_ONLY" | "1" => ViewType::ActiveOnly,
        "DELETED_ONLY" | "2" => ViewType::DeletedOnly,
        "ALL" | "3" => ViewType::All,
        other => return Err(ApiError::invalid("view_type", format!("{other:?} is not a view type")).into()),
    })
}

async fn update_experiment(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let id = required_text(&args, "experiment_id")?;
    let project = experiment(&state, &req, id, Role::Write).await?;
    if let Some(new_name) = text(&args, "new_name")?.filter(|n| !n.is_empty()) {
        let name = ProjectName::parse("new_name", new_name)?;
        let project_id = project.id;
        meta(&state, move |m| m.rename_project(project_id, &name)).await.map_err(MlflowError::already_exists)?;
        state.store.project_changed(project_id);
    }
    Ok(HttpResponse::Ok().json(json!({})))
}

async fn set_experiment_deleted(
    state: State,
    req: HttpRequest,
    payload: web::Payload,
    deleted: bool,
) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let id = required_text(&args, "experiment_id")?;
    let (project, was_deleted) = experiment_any(&state, &req, id, Role::Admin).await?;
    must_be_active(&format!("experiment {id}"), was_deleted == deleted)?;
    let project_id = project.id;
    meta(&state, move |m| m.set_project_deleted(project_id, deleted)).await?;
    forget_run_projects(&state);
    state.store.project_changed(project_id);
    Ok(HttpResponse::Ok().json(json!({})))
}

async fn delete_experiment(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    set_experiment_deleted(state, req, payload, true).await
}

async fn restore_experiment(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    set_experiment_deleted(state, req, payload, false).await
}

async fn experiment_tag(state: State, req: HttpRequest, payload: web::Payload, set: bool) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let id = required_text(&args, "experiment_id")?;
    let project = experiment(&state, &req, id, Role::Write).await?;
    let key = required_text(&args, "key")?.to_owned();
    mlflow_key("key", &key)?;
    let value = if set { Some(text(&args, "value")?.unwrap_or_default().to_owned()) } else { None };
    if let Some(v) = &value {
        check_len("value", "a tag value", v, MAX_TAG_VALUE_CHARS)?;
    }
    let project_id = project.id;
    let existed = {
        let key = key.clone();
        meta(&state, move |m| m.set_project_tag(project_id, &key, value.as_deref())).await?
    };
    if !set && !existed {
        return Err(ApiError::NotFound(format!("No tag with name: {key} in experiment with id {id}")).into());
    }
    Ok(HttpResponse::Ok().json(json!({})))
}

async fn set_experiment_tag(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    experiment_tag(state, req, payload, true).await
}

async fn delete_experiment_tag(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    experiment_tag(state, req, payload, false).await
}

/// Runs change project or disappear when experiments are deleted or restored: start over.
fn forget_run_projects(state: &State) {
    if let Ok(mut cache) = state.run_projects.lock() {
        cache.clear();
    }
}

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
        RunStatus::Failed | RunStatus::Preempted => "FAILED",
        RunStatus::Killed => "KILLED",
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

/// The experiment id of a project.
pub(super) async fn experiment_id_of_project(state: &State, project_id: i64) -> Result<String> {
    let project = meta(state, move |m| Ok(m.project_any(project_id)?.0)).await?;
    Ok(experiment_id(&project))
}

/// The active project behind an experiment id, once the caller may `need` it.
pub(super) async fn named_experiment(state: &State, req: &HttpRequest, id: &str, need: Role) -> Result<Project> {
    experiment(state, req, id, need).await
}

/// The experiment id of a run's project, and the project's id.
pub(super) async fn experiment_of_run(state: &State, run: &RunId) -> Result<(String, i64)> {
    let project_id = run_project(state, run).await?;
    let project = meta(state, move |m| Ok(m.project_any(project_id)?.0)).await?;
    Ok((experiment_id(&project), project_id))
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
    value: crate::api::Float,
    timestamp: i64,
    step: i64,
}

#[derive(Serialize)]
struct RunDataJson<'a> {
    metrics: Vec<MetricJson<'a>>,
    params: Vec<KeyValue<'a>>,
    tags: Vec<KeyValue<'a>>,
}

/// A run as MLflow writes it, serialized straight from trainlog's run (search answers
/// thousands of them).
#[derive(Serialize)]
struct RunJson<'a> {
    info: RunInfoJson<'a>,
    data: RunDataJson<'a>,
    inputs: BTreeMap<(), ()>,
    outputs: BTreeMap<(), ()>,
}

fn run_json<'a>(
    run: &'a Run,
    deleted: bool,
    summaries: &'a BTreeMap<String, MetricSummary>,
    commit: Option<&'a str>,
) -> RunJson<'a> {
    use std::borrow::Cow;
    let metrics = summaries
        .iter()
        .map(|(k, s)| MetricJson { key: k, value: crate::api::Float(s.last), timestamp: s.last_ms, step: s.last_step })
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
        inputs: BTreeMap::new(),
        outputs: BTreeMap::new(),
    }
}

/// What `run_json` reads besides the run: its summaries and code version.
struct RunExtras {
    summaries: BTreeMap<String, MetricSummary>,
    commit: Option<String>,
}

async fn run_view(state: &State, run: &Run, deleted: bool) -> Result<Value> {
    let pair = [(run.clone(), deleted)];
    let extras = run_extras(state, &pair).await?;
    Ok(serde_json::to_value(run_json(run, deleted, &extras[0].summaries, extras[0].commit.as_deref()))
        .map_err(|e| ApiError::Internal(format!("writing run {}: {e}", run.id)))?)
}

/// The summaries and code versions of many runs, the code versions read in one query.
async fn run_extras(state: &State, runs: &[(Run, bool)]) -> Result<Vec<RunExtras>> {
    let ids: Vec<RunId> = runs.iter().map(|(r, _)| r.id.clone()).collect();
    let code = meta(state, move |m| m.metadata_section_of(&ids, "code")).await?;
    let mut out = Vec::with_capacity(runs.len());
    for (run, _) in runs {
        let summaries = state.store.summaries(&run.id).await?;
        let commit = code.get(run.id.as_str()).and_then(|c| c["commit"].as_str()).map(str::to_owned);
        out.push(RunExtras { summaries, commit });
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
    let not_found = || ApiError::NotFound(format!("Run with id={raw} not found"));
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

/// MLflow's rule for metric, param and tag keys: letters, digits, `_ - . / : ` and spaces.
fn mlflow_key(field: &str, key: &str) -> Result<()> {
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

fn tag_pairs(args: &Value, name: &str) -> Result<Vec<(String, String)>> {
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
        other => Err(super::wrong_type(name, other)),
    }
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
        start_ms: integer(&args, "start_time")?,
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
    let end_time = integer(&args, "end_time")?;
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
    state.store.append(id, project_id, batch).await?;
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
    let args = arguments(&req, payload).await?;
    let id = named_run(&state, &req, &args, Role::Write).await?;
    let list = |name: &str| match &args[name] {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => Ok(items.clone()),
        other => Err(super::wrong_type(name, other)),
    };
    let (metrics, params, tags) = (list("metrics")?, list("params")?, tag_pairs(&args, "tags")?);
    for (name, n, max) in [
        ("metrics", metrics.len(), MAX_BATCH_METRICS),
        ("params", params.len(), MAX_BATCH_PARAMS),
        ("tags", tags.len(), MAX_BATCH_TAGS),
    ] {
        if n > max {
            return Err(ApiError::invalid(
                name,
                format!("A batch logging request can contain at most {max} {name}. Got {n} {name}. Please split up {name} across multiple requests and try again."),
            )
            .into());
        }
    }
    let total = metrics.len() + params.len() + tags.len();
    if total > MAX_BATCH_ENTITIES {
        return Err(ApiError::invalid(
            "metrics",
            format!("A batch logging request can contain at most {MAX_BATCH_ENTITIES} metrics, params, and tags in total. Got {total} total entities."),
        )
        .into());
    }
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
    let filter = translate_filter(text(&args, "filter")?.unwrap_or(""))?;
    let order_by = translate_order_by(&texts(&args, "order_by")?)?;
    let (limit, offset) = page(&args, 1000)?;
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
        runs: shown
            .iter()
            .zip(&extras)
            .map(|((run, deleted), e)| run_json(run, *deleted, &e.summaries, e.commit.as_deref()))
            .collect(),
        next_page_token: more.then(|| (offset + limit).to_string()),
    };
    Ok(HttpResponse::Ok().json(answer))
}

async fn metric_history(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let (id, _) = named_run_any(&state, &req, &args, Role::Read).await?;
    let key = required_text(&args, "metric_key")?;
    let key = MetricKey::parse("metric_key", key)?;
    let (limit, offset) = page(&args, i64::MAX)?;
    let series = state.store.series(&id, &key, StepRange::default()).await?;
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
    Ok(HttpResponse::Ok().json(answer))
}

/// The datasets (and models) a run used: kept in the run's `inputs` metadata, each once.
async fn log_inputs(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let id = named_run(&state, &req, &args, Role::Write).await?;
    let list = |name: &str| match &args[name] {
        Value::Array(items) => Ok(items.clone()),
        Value::Null => Ok(Vec::new()),
        other => Err(super::wrong_type(name, other)),
    };
    let (datasets, models) = (list("datasets")?, list("models")?);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_filters_take_and_tags_and_quotes() {
        let tags = BTreeMap::from([("team".to_owned(), "vision and speech".to_owned())]);
        let cases = [
            ("", true),
            ("name = 'detector'", true),
            ("name LIKE 'detec%' AND tag.`mlflow.prompt.is_prompt` != 'true'", true),
            ("name ILIKE 'DETEC%' and tags.team = 'vision and speech'", true),
            ("attributes.name != 'detector'", false),
            ("tags.team = 'vision'", false),
            ("tags.missing = 'x'", false),
        ];
        for (filter, expected) in cases {
            assert_eq!(name_filter(filter).unwrap().matches("detector", &tags), expected, "{filter}");
        }
        for bad in ["name > 'a'", "size = 1", "name = detector"] {
            assert!(name_filter(bad).is_err(), "{bad}");
        }
    }
}
