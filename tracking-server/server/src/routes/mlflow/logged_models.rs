//! MLflow 3's logged models (what `log_model` makes): kept beside the run that logs them, their
//! files the run's artifacts under `models/{model_id}/`, so they show in the run's artifacts,
//! and a version registered from one carries the run's lineage. A model logged outside any run
//! gets a finished run of its own, named after it, to hold its files.

use super::experiments::{experiment_id_of_project, named_experiment};
use super::{arguments, page, required_text, text, texts, MlflowError, Result};
use crate::error::ApiError;
use crate::lookup::run_project;
use crate::state::{meta, State};
use actix_web::http::Method;
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use trainlog_meta::{LoggedModelRow, NewRun, Project, Role};
use trainlog_schema::{ProjectName, RunId, RunStatus, TagKey};

pub(super) fn routes(door: &mut super::Door) {
    door.route(Method::POST, "/logged-models", create)
        .route(Method::POST, "/logged-models/search", search)
        .route(Method::GET, "/logged-models/{model_id}", get)
        .route(Method::PATCH, "/logged-models/{model_id}", finalize)
        .route(Method::DELETE, "/logged-models/{model_id}", delete_model)
        .route(Method::PATCH, "/logged-models/{model_id}/tags", set_tags)
        .route(Method::DELETE, "/logged-models/{model_id}/tags/{key}", delete_tag)
        .route(Method::POST, "/logged-models/{model_id}/params", log_params)
        .route(Method::POST, "/runs/outputs", log_outputs);
}

/// Where a logged model's files are among its run's artifacts.
pub(super) fn artifact_folder(model_id: &str) -> String {
    format!("models/{model_id}")
}

fn status_name(status: &str) -> &'static str {
    match status {
        "ready" => "LOGGED_MODEL_READY",
        "failed" => "LOGGED_MODEL_UPLOAD_FAILED",
        _ => "LOGGED_MODEL_PENDING",
    }
}

fn pairs(map: &BTreeMap<String, String>) -> Vec<Value> {
    map.iter().map(|(k, v)| json!({"key": k, "value": v})).collect()
}

async fn model_json(state: &State, m: &LoggedModelRow) -> Result<Value> {
    let experiment = experiment_id_of_project(state, m.project_id).await?;
    Ok(json!({
        "info": {
            "model_id": m.id,
            "experiment_id": experiment,
            "name": m.name,
            "creation_timestamp_ms": m.created_ms,
            "last_updated_timestamp_ms": m.updated_ms,
            "artifact_uri": format!("mlflow-artifacts:/{experiment}/models/{}/artifacts", m.id),
            "status": status_name(&m.status),
            "model_type": m.model_type,
            "source_run_id": if m.own_run { None } else { Some(&m.run_id) },
            "tags": pairs(&m.tags),
        },
        "data": {"params": pairs(&m.params), "metrics": []},
    }))
}

fn key_values(args: &Value, name: &str) -> Result<BTreeMap<String, String>> {
    match &args[name] {
        Value::Null => Ok(BTreeMap::new()),
        Value::Array(items) => items
            .iter()
            .map(|t| Ok((required_text(t, "key")?.to_owned(), text(t, "value")?.unwrap_or_default().to_owned())))
            .collect(),
        other => Err(super::wrong_type(name, other)),
    }
}

/// A logged model, once the caller may `need` its run's project.
pub(super) async fn named_model(state: &State, req: &HttpRequest, id: &str, need: Role) -> Result<LoggedModelRow> {
    let owned = id.to_owned();
    let model = meta(state, move |m| m.logged_model(&owned)).await?;
    crate::auth::require_in_project(req, model.project_id, need, || format!("Logged model with ID '{id}'")).await?;
    Ok(model)
}

async fn create(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let project = named_experiment(&state, &req, required_text(&args, "experiment_id")?, Role::Write).await?;
    let now = trainlog_meta::now_ms();
    // trainlog's extension for `trainlog import mlflow`: keep the source's model id.
    let id = match text(&args, "model_id")?.filter(|m| !m.is_empty()) {
        Some(given) => logged_model_id("model_id", given)?,
        None => trainlog_meta::new_logged_model_id(),
    };
    let name = match text(&args, "name")?.filter(|n| !n.is_empty()) {
        Some(given) => given.to_owned(),
        None => generated_name(&id),
    };
    let (run_id, own_run) = match text(&args, "source_run_id")?.filter(|r| !r.is_empty()) {
        Some(run_text) => {
            let run = RunId::parse("source_run_id", run_text)?;
            let run_project_id = run_project(&state, &run).await?;
            crate::auth::require_run(&req, &run, run_project_id, Role::Write).await?;
            if run_project_id != project.id {
                return Err(ApiError::invalid(
                    "source_run_id",
                    format!("run {run} is not in experiment {}", project.name),
                )
                .into());
            }
            (run.to_string(), false)
        }
        None => (holder_run(&state, &req, &project, &id, &name).await?.to_string(), true),
    };
    let row = LoggedModelRow {
        id,
        project_id: project.id,
        run_id,
        name,
        model_type: text(&args, "model_type")?.unwrap_or_default().to_owned(),
        status: "pending".to_owned(),
        params: key_values(&args, "params")?,
        tags: key_values(&args, "tags")?,
        created_ms: now,
        updated_ms: now,
        own_run,
    };
    {
        let row = row.clone();
        meta(&state, move |m| m.create_logged_model(&row)).await.map_err(MlflowError::already_exists)?;
    }
    Ok(HttpResponse::Ok().json(json!({"model": model_json(&state, &row).await?})))
}

/// The name of a model logged without one, unique as its id is: `model-` and the id's first
/// eight hex digits (as an unnamed run is named after its id).
fn generated_name(model_id: &str) -> String {
    let hex: String = model_id.strip_prefix("m-").unwrap_or(model_id).chars().take(8).collect();
    format!("model-{hex}")
}

/// A finished run that holds the files of a model logged outside any run, named after it.
async fn holder_run(state: &State, req: &HttpRequest, project: &Project, model_id: &str, name: &str) -> Result<RunId> {
    let exists = {
        let id = model_id.to_owned();
        meta(state, move |m| Ok(m.logged_model(&id).is_ok())).await?
    };
    if exists {
        return Err(MlflowError::already_exists(ApiError::Conflict {
            field: "model_id".into(),
            reason: format!("Logged model with ID '{model_id}' already exists"),
        }));
    }
    let new = NewRun {
        project: Some(ProjectName::parse("experiment_id", &project.name)?),
        name: Some(name.to_owned()),
        tags: BTreeMap::from([(TagKey::parse("key", HOLDER_TAG)?, model_id.to_owned())]),
        user: crate::auth::caller(req).map(|c| c.name).unwrap_or_default(),
        actor: crate::auth::actor(req),
        ..Default::default()
    };
    let run = meta(state, move |m| {
        let (run, _) = m.create_run(&new)?;
        m.set_status(&run.id, RunStatus::Finished, None)?;
        Ok(run)
    })
    .await?;
    state.store.project_changed(run.project_id);
    Ok(run.id)
}

/// The tag of a run made to hold a model logged outside any run: the model's id.
const HOLDER_TAG: &str = "trainlog.logged_model";

/// A logged model id as MLflow makes them: `m-` and 32 lowercase hex digits.
fn logged_model_id(field: &str, id: &str) -> Result<String> {
    let hex = id.strip_prefix("m-").unwrap_or_default();
    if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(ApiError::invalid(field, format!("{id:?} is not a logged model id (m- and 32 hex digits)")).into());
    }
    Ok(id.to_owned())
}

async fn get(state: State, req: HttpRequest, path: web::Path<String>) -> Result<HttpResponse> {
    let model = named_model(&state, &req, &path, Role::Read).await?;
    Ok(HttpResponse::Ok().json(json!({"model": model_json(&state, &model).await?})))
}

/// Deletes a logged model: get and search no longer answer it. A model logged outside any run
/// takes the run made to hold its files with it (archived, restorable); a run's own model leaves
/// its files among the run's artifacts.
async fn delete_model(state: State, req: HttpRequest, path: web::Path<String>) -> Result<HttpResponse> {
    // Deleting takes what deleting a run takes.
    named_model(&state, &req, &path, Role::Admin).await?;
    let id = path.into_inner();
    let model = meta(&state, move |m| m.delete_logged_model(&id)).await?;
    if model.own_run {
        super::experiments::forget_run_projects(&state);
        state.store.project_changed(model.project_id);
    }
    Ok(HttpResponse::Ok().json(json!({})))
}

async fn update(
    state: &State,
    id: &str,
    status: Option<&'static str>,
    params: BTreeMap<String, String>,
    set: BTreeMap<String, String>,
    delete: Vec<String>,
) -> Result<LoggedModelRow> {
    let id = id.to_owned();
    Ok(meta(state, move |m| m.update_logged_model(&id, status, &params, &set, &delete)).await?)
}

async fn finalize(
    state: State,
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    named_model(&state, &req, &path, Role::Write).await?;
    let status = match required_text(&args, "status")? {
        "LOGGED_MODEL_READY" | "READY" => "ready",
        "LOGGED_MODEL_UPLOAD_FAILED" | "UPLOAD_FAILED" => "failed",
        "LOGGED_MODEL_PENDING" | "PENDING" => "pending",
        other => return Err(ApiError::invalid("status", format!("{other:?} is not a logged model status")).into()),
    };
    let model = update(&state, &path, Some(status), BTreeMap::new(), BTreeMap::new(), Vec::new()).await?;
    Ok(HttpResponse::Ok().json(json!({"model": model_json(&state, &model).await?})))
}

async fn set_tags(
    state: State,
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    named_model(&state, &req, &path, Role::Write).await?;
    let model = update(&state, &path, None, BTreeMap::new(), key_values(&args, "tags")?, Vec::new()).await?;
    Ok(HttpResponse::Ok().json(json!({"model": model_json(&state, &model).await?})))
}

async fn delete_tag(state: State, req: HttpRequest, path: web::Path<(String, String)>) -> Result<HttpResponse> {
    let (id, key) = path.into_inner();
    let model = named_model(&state, &req, &id, Role::Write).await?;
    if !model.tags.contains_key(&key) {
        // `ApiError::NotFound` adds " not found"; MLflow's message starts the same way.
        return Err(ApiError::NotFound(format!("No tag with key '{key}' in logged model '{id}'")).into());
    }
    update(&state, &id, None, BTreeMap::new(), BTreeMap::new(), vec![key]).await?;
    Ok(HttpResponse::Ok().json(json!({})))
}

async fn log_params(
    state: State,
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    named_model(&state, &req, &path, Role::Write).await?;
    update(&state, &path, None, key_values(&args, "params")?, BTreeMap::new(), Vec::new()).await?;
    Ok(HttpResponse::Ok().json(json!({})))
}

/// `name = '…'`, `source_run_id = '…'`, `model_id = '…'`, `status = '…'`, joined by AND.
fn model_filter(filter: &str) -> Result<Vec<(String, String)>> {
    let mut wanted = Vec::new();
    for part in super::clauses(filter) {
        let refused = || {
            MlflowError::from(ApiError::invalid(
                "filter",
                format!("{part:?}: logged models can be searched by name, source_run_id, model_id and status (=)"),
            ))
        };
        let (field, value) = part.split_once('=').ok_or_else(refused)?;
        let field = field.trim().trim_start_matches("attributes.").trim_start_matches("attribute.");
        if !matches!(field, "name" | "source_run_id" | "model_id" | "status") {
            return Err(refused());
        }
        wanted.push((field.to_owned(), value.trim().trim_matches('\'').trim_matches('"').to_owned()));
    }
    Ok(wanted)
}

async fn search(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let wanted = model_filter(text(&args, "filter")?.unwrap_or(""))?;
    let (limit, offset) = page(&args, 100)?;
    let mut projects = Vec::new();
    for experiment in texts(&args, "experiment_ids")? {
        if let Ok(p) = named_experiment(&state, &req, &experiment, Role::Read).await {
            projects.push(p.id);
        }
    }
    let models = meta(&state, move |m| m.logged_models(&projects)).await?;
    let matching: Vec<&LoggedModelRow> = models
        .iter()
        .filter(|m| {
            wanted.iter().all(|(field, value)| match field.as_str() {
                "name" => m.name == *value,
                "source_run_id" => !m.own_run && m.run_id == *value,
                "model_id" => m.id == *value,
                _ => status_name(&m.status) == value.as_str() || m.status == value.to_lowercase(),
            })
        })
        .collect();
    let mut out = Vec::new();
    for m in matching.iter().skip(offset).take(limit) {
        out.push(model_json(&state, m).await?);
    }
    let mut answer = json!({"models": out});
    if offset.saturating_add(limit) < matching.len() {
        answer["next_page_token"] = json!((offset + limit).to_string());
    }
    Ok(HttpResponse::Ok().json(answer))
}

/// The models a run produced: kept in the run's `outputs` metadata.
async fn log_outputs(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let run = RunId::parse("run_id", required_text(&args, "run_id")?)?;
    let project_id = run_project(&state, &run).await?;
    crate::auth::require_run(&req, &run, project_id, Role::Write).await?;
    let models = super::object_list(&args, "models")?;
    meta(&state, move |m| {
        let mut outputs = m.metadata(&run)?.remove("outputs").unwrap_or_else(|| json!({"models": []}));
        if let Some(list) = outputs["models"].as_array_mut() {
            list.extend(models);
        }
        m.set_metadata(&run, "outputs", &outputs)
    })
    .await?;
    Ok(HttpResponse::Ok().json(json!({})))
}
