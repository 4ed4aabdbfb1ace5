//! Routes of the model registry: models, versions with lineage, aliases, tags, archive, delete.

use crate::body::json_body;
use crate::error::{ApiError, Result};
use crate::routes::{meta, query_one, query_pairs, State};
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use trainlog_meta::{ModelRow, NewVersion, VersionRef, VersionRow, VersionUpdate};
use trainlog_schema::limits::{
    check_count, check_len, MAX_FILTER_BYTES, MAX_NAME_BYTES, MAX_TAGS_PER_REQUEST, MAX_TAG_VALUE_BYTES, MAX_TEXT_BYTES,
};
use trainlog_schema::{ProjectName, RunId, TagKey};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/models", web::post().to(create_model))
        .route("/models", web::get().to(list_models))
        .route("/models/{name}", web::get().to(get_model))
        .route("/models/{name}", web::patch().to(update_model))
        .route("/models/{name}", web::delete().to(delete_model))
        .route("/models/{name}/versions", web::post().to(create_version))
        .route("/models/{name}/versions", web::get().to(list_versions))
        .route("/models/{name}/versions/{version}", web::get().to(get_version))
        .route("/models/{name}/versions/{version}", web::patch().to(update_version))
        .route("/models/{name}/versions/{version}", web::delete().to(delete_version))
        .route("/models/{name}/aliases/{alias}", web::put().to(set_alias))
        .route("/models/{name}/aliases/{alias}", web::delete().to(delete_alias));
}

fn model_name(s: &str) -> Result<String> {
    check_len("name", "a model name", s, MAX_NAME_BYTES)?;
    Ok(ProjectName::parse("name", s)?.into_string())
}

fn description(s: &str) -> Result<()> {
    Ok(check_len("description", "a description", s, MAX_TEXT_BYTES)?)
}

fn alias(field: &str, s: &str) -> Result<String> {
    let ok = !s.is_empty()
        && s.len() <= 64
        && s.as_bytes()[0].is_ascii_alphabetic()
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(s.to_owned())
    } else {
        Err(ApiError::invalid(field, "an alias is 1 to 64 characters from [A-Za-z0-9_-], starting with a letter"))
    }
}

fn string_map(field: &str, v: &Value) -> Result<(BTreeMap<String, String>, Vec<String>)> {
    let mut set = BTreeMap::new();
    let mut delete = Vec::new();
    match v {
        Value::Null => {}
        Value::Object(map) => {
            check_count(field, "tags", map.len(), MAX_TAGS_PER_REQUEST)?;
            for (k, v) in map {
                let here = format!("{field}.{k}");
                TagKey::parse(&here, k)?;
                match v {
                    Value::String(s) => {
                        check_len(&here, "a tag value", s, MAX_TAG_VALUE_BYTES)?;
                        set.insert(k.clone(), s.clone());
                    }
                    Value::Null => delete.push(k.clone()),
                    other => {
                        set.insert(k.clone(), other.to_string());
                    }
                }
            }
        }
        _ => return Err(ApiError::invalid(field, "expected an object of strings")),
    }
    Ok((set, delete))
}

fn model_json(m: &ModelRow) -> Value {
    json!({
        "name": m.name, "description": m.description, "tags": m.tags, "aliases": m.aliases,
        "latest_version": m.latest_version, "version_count": m.version_count,
        "created_time": m.created_ms, "updated_time": m.updated_ms,
    })
}

async fn version_json(state: &State, v: VersionRow) -> Result<Value> {
    let (run_id, files) = (v.run_id.clone(), v.files.clone());
    let missing = meta(state, move |m| m.missing_files(&run_id, &files)).await?;
    Ok(json!({
        "model": v.model, "version": v.version, "run_id": v.run_id, "source": v.source, "files": v.files,
        "description": v.description, "status": v.status, "lineage": v.lineage, "tags": v.tags, "aliases": v.aliases,
        "created_time": v.created_ms, "updated_time": v.updated_ms,
        "source_available": missing.is_empty(), "missing_files": missing,
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateModel {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    tags: Value,
}

async fn create_model(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let body: CreateModel = json_body(&req, payload).await?;
    let name = model_name(&body.name)?;
    description(&body.description)?;
    let (tags, _) = string_map("tags", &body.tags)?;
    let model = meta(&state, move |m| m.create_model(&name, &body.description, &tags)).await?;
    Ok(HttpResponse::Created().json(model_json(&model)))
}

async fn list_models(state: State, req: HttpRequest) -> Result<HttpResponse> {
    let pairs = query_pairs(&req)?;
    let search = query_one(&pairs, "search").unwrap_or_default().to_owned();
    check_len("search", "a model search", &search, MAX_FILTER_BYTES)?;
    let models = meta(&state, move |m| m.models(&search)).await?;
    Ok(HttpResponse::Ok().json(json!({"models": models.iter().map(model_json).collect::<Vec<_>>()})))
}

async fn get_model(state: State, path: web::Path<String>) -> Result<HttpResponse> {
    let name = path.into_inner();
    let model = meta(&state, move |m| m.model(&name)).await?;
    Ok(HttpResponse::Ok().json(model_json(&model)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateModel {
    description: Option<String>,
    #[serde(default)]
    tags: Value,
}

async fn update_model(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let name = path.into_inner();
    let body: UpdateModel = json_body(&req, payload).await?;
    if let Some(text) = &body.description {
        description(text)?;
    }
    let (set, delete) = string_map("tags", &body.tags)?;
    let model = meta(&state, move |m| m.update_model(&name, body.description.as_deref(), &set, &delete)).await?;
    Ok(HttpResponse::Ok().json(model_json(&model)))
}

async fn delete_model(state: State, path: web::Path<String>) -> Result<HttpResponse> {
    let name = path.into_inner();
    meta(&state, move |m| m.delete_model(&name)).await?;
    Ok(HttpResponse::Ok().json(json!({"status": "ok"})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateVersion {
    run_id: String,
    /// A checkpoint of the run, by name or by step; the latest one when neither this nor `artifact` is given.
    checkpoint: Option<Value>,
    /// An artifact path of the run: one file, or a folder prefix.
    artifact: Option<String>,
    #[serde(default)]
    description: String,
    #[serde(default)]
    tags: Value,
    alias: Option<String>,
}

/// The files a version points at, and what they were, from a checkpoint or an artifact path.
async fn version_source(state: &State, run: &RunId, body: &CreateVersion) -> Result<(Value, Value)> {
    if let Some(path) = &body.artifact {
        let (id, prefix) = (run.clone(), path.clone());
        let rows = meta(state, move |m| m.artifacts(&id, &prefix)).await?;
        let files: Vec<Value> = rows
            .iter()
            .filter(|a| a.path == *path || a.path.starts_with(&format!("{}/", path.trim_end_matches('/'))))
            .map(|a| json!({"path": a.path, "size": a.size, "sha256": a.sha256}))
            .collect();
        if files.is_empty() {
            return Err(ApiError::NotFound(format!("artifact {path:?} of run {run}")));
        }
        return Ok((json!({"kind": "artifact", "path": path}), Value::Array(files)));
    }
    let id = run.clone();
    let checkpoints = meta(state, move |m| m.checkpoints(&id)).await?;
    let chosen = match &body.checkpoint {
        None => checkpoints.first(),
        Some(Value::String(name)) => checkpoints.iter().find(|c| &c.name == name),
        Some(Value::Number(n)) => checkpoints.iter().find(|c| Some(c.step) == n.as_i64()),
        Some(_) => return Err(ApiError::invalid("checkpoint", "a checkpoint name or step")),
    };
    let c = chosen.ok_or_else(|| {
        ApiError::NotFound(format!("checkpoint {} of run {run}", body.checkpoint.clone().unwrap_or(json!("(latest)"))))
    })?;
    let files: Vec<Value> = c
        .files
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| json!({"path": format!("checkpoints/{}/{}", c.name, f["path"].as_str().unwrap_or_default()), "size": f["size"], "sha256": f["sha256"]}))
        .collect();
    Ok((json!({"kind": "checkpoint", "name": c.name, "step": c.step, "metadata": c.metadata}), Value::Array(files)))
}

async fn create_version(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let name = model_name(&path)?;
    let body: CreateVersion = json_body(&req, payload).await?;
    let run = RunId::parse("run_id", &body.run_id).map_err(|_| ApiError::NotFound(format!("run {:?}", body.run_id)))?;
    let alias = body.alias.as_deref().map(|a| alias("alias", a)).transpose()?;
    description(&body.description)?;
    let (tags, _) = string_map("tags", &body.tags)?;
    let (source, files) = version_source(&state, &run, &body).await?;
    // Lineage: the run as it is now, with what it recorded about its code and environment.
    let (run_row, metadata) = {
        let id = run.clone();
        meta(&state, move |m| Ok((m.run(&id)?, m.metadata(&id)?))).await?
    };
    let summaries = state.store.summaries(&run, run_row.project_id).await?;
    let run_view = crate::json::run(&run_row, &summaries);
    let lineage = json!({
        "run": {"id": run_view["id"], "project": run_view["project"], "name": run_view["name"], "status": run_view["status"],
                "start_time": run_view["start_time"], "end_time": run_view["end_time"], "user": run_view["user"], "host": run_view["host"],
                "group": run_view["group"]},
        "params": run_view["params"],
        "metrics": run_view["summary"],
        "tags": run_view["tags"],
        "code": metadata.get("code").cloned().unwrap_or(Value::Null),
        "environment": metadata.get("environment").cloned().unwrap_or(Value::Null),
        "python": metadata.get("python").cloned().unwrap_or(Value::Null),
        "packages": metadata.get("packages").cloned().unwrap_or(Value::Null),
    });
    let new =
        NewVersion { run_id: run.to_string(), source, files, description: body.description, tags, lineage, alias };
    let row = meta(&state, move |m| m.create_version(&name, &new)).await?;
    Ok(HttpResponse::Created().json(version_json(&state, row).await?))
}

async fn list_versions(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let name = path.into_inner();
    let pairs = query_pairs(&req)?;
    let status = query_one(&pairs, "status").map(str::to_owned);
    let rows = meta(&state, move |m| m.versions(&name, status.as_deref())).await?;
    let mut list = Vec::with_capacity(rows.len());
    for r in rows {
        list.push(version_json(&state, r).await?);
    }
    Ok(HttpResponse::Ok().json(json!({ "versions": list })))
}

async fn get_version(state: State, path: web::Path<(String, String)>) -> Result<HttpResponse> {
    let (name, version) = path.into_inner();
    let row = meta(&state, move |m| m.version(&name, &VersionRef::parse(&version))).await?;
    Ok(HttpResponse::Ok().json(version_json(&state, row).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateVersion {
    description: Option<String>,
    status: Option<String>,
    #[serde(default)]
    tags: Value,
}

async fn update_version(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let (name, version) = path.into_inner();
    let body: UpdateVersion = json_body(&req, payload).await?;
    if let Some(s) = body.status.as_deref() {
        if s != "ready" && s != "archived" {
            return Err(ApiError::invalid("status", "a version's status is \"ready\" or \"archived\""));
        }
    }
    if let Some(text) = &body.description {
        description(text)?;
    }
    let (set_tags, delete_tags) = string_map("tags", &body.tags)?;
    let update = VersionUpdate { description: body.description, status: body.status, set_tags, delete_tags };
    let row = meta(&state, move |m| m.update_version(&name, &VersionRef::parse(&version), &update)).await?;
    Ok(HttpResponse::Ok().json(version_json(&state, row).await?))
}

async fn delete_version(state: State, path: web::Path<(String, String)>) -> Result<HttpResponse> {
    let (name, version) = path.into_inner();
    meta(&state, move |m| m.delete_version(&name, &VersionRef::parse(&version))).await?;
    Ok(HttpResponse::Ok().json(json!({"status": "ok"})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetAlias {
    version: Value,
}

async fn set_alias(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let (name, alias_name) = path.into_inner();
    let alias_name = alias("alias", &alias_name)?;
    let body: SetAlias = json_body(&req, payload).await?;
    let vref = match &body.version {
        Value::Number(n) => {
            VersionRef::Number(n.as_i64().ok_or_else(|| ApiError::invalid("version", "a version number"))?)
        }
        Value::String(s) => VersionRef::parse(s),
        _ => return Err(ApiError::invalid("version", "a version number or alias")),
    };
    let row = meta(&state, move |m| m.set_alias(&name, &alias_name, &vref)).await?;
    Ok(HttpResponse::Ok().json(version_json(&state, row).await?))
}

async fn delete_alias(state: State, path: web::Path<(String, String)>) -> Result<HttpResponse> {
    let (name, alias_name) = path.into_inner();
    meta(&state, move |m| m.delete_alias(&name, &alias_name)).await?;
    Ok(HttpResponse::Ok().json(json!({"status": "ok"})))
}
