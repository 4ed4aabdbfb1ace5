//! Routes of the model registry: models, versions with lineage, aliases, tags, archive, delete.

mod wire;

pub(crate) use wire::CreateVersion;

use crate::auth::role_on;
use crate::body::json_body;
use crate::error::{ApiError, Result};
use crate::query::{query_one, query_pairs};
use crate::state::{meta, State};
use crate::wire::{integer, NameText, StatusOk, OK};
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use trainlog_meta::{NewVersion, Role, Scope, VersionRef, VersionRow, VersionUpdate};
use trainlog_schema::limits::{
    check_count, check_len, MAX_MODEL_SEARCH_CHARS, MAX_NAME_CHARS, MAX_TAGS_PER_REQUEST, MAX_TAG_VALUE_CHARS,
    MAX_TEXT_CHARS,
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

/// This resource's operations in the API document.
#[derive(utoipa::OpenApi)]
#[openapi(paths(
    create_model,
    list_models,
    get_model,
    update_model,
    delete_model,
    create_version,
    list_versions,
    get_version,
    update_version,
    delete_version,
    set_alias,
    delete_alias,
))]
pub(super) struct Api;

fn model_name(s: &str) -> Result<String> {
    check_len("name", "a model name", s, MAX_NAME_CHARS)?;
    Ok(ProjectName::parse("name", s)?.into_string())
}

fn description(s: &str) -> Result<()> {
    Ok(check_len("description", "a description", s, MAX_TEXT_CHARS)?)
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
                        check_len(&here, "a tag value", s, MAX_TAG_VALUE_CHARS)?;
                        set.insert(k.clone(), s.clone());
                    }
                    Value::Null => delete.push(k.clone()),
                    Value::Number(_) | Value::Bool(_) => {
                        set.insert(k.clone(), v.to_string());
                    }
                    _ => return Err(ApiError::invalid(&here, "a tag value is a string, a number or a boolean")),
                }
            }
        }
        _ => return Err(ApiError::invalid(field, "expected an object of strings")),
    }
    Ok((set, delete))
}

/// Refuses a caller holding less than `need` on a model (404 when they may not read it).
pub(crate) async fn model_access(state: &State, req: &HttpRequest, name: &str, need: Role) -> Result<()> {
    if crate::auth::actor(req).is_none() {
        return Ok(());
    }
    let owned = name.to_owned();
    let id = meta(state, move |m| m.scope_id(Scope::Model, &owned)).await?;
    crate::auth::require(req, Scope::Model, id, name, need).await
}

async fn version_view(state: &State, v: VersionRow) -> Result<wire::VersionView> {
    let (run_id, files) = (v.run_id.clone(), v.files.clone());
    let missing = meta(state, move |m| m.missing_files(&run_id, &files)).await?;
    Ok(wire::VersionView {
        model: v.model,
        version: v.version,
        run_id: v.run_id,
        source: v.source,
        files: v.files,
        description: v.description,
        status: v.status,
        lineage: v.lineage,
        tags: v.tags,
        aliases: v.aliases,
        created_time: v.created_ms,
        updated_time: v.updated_ms,
        source_available: missing.is_empty(),
        missing_files: missing,
    })
}

/// Register a model.
#[utoipa::path(post, path = "/api/v1/models", tag = "registry", request_body = wire::CreateModel,
    responses((status = 201, description = "The new model.", body = wire::ModelView)))]
pub(crate) async fn create_model(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let body: wire::CreateModel = json_body(&req, payload).await?;
    let name = model_name(&body.name)?;
    description(&body.description)?;
    let (tags, _) = string_map("tags", &body.tags)?;
    let creator = crate::auth::actor(&req);
    let model = meta(&state, move |m| m.create_model(&name, &body.description, &tags, creator.as_ref())).await?;
    let role = role_on(&req, Scope::Model, model.id).await?;
    Ok(HttpResponse::Created().json(wire::ModelView::new(&model, role)))
}

/// List models.
#[utoipa::path(get, path = "/api/v1/models", tag = "registry", params(("search" = Option<String>, Query, max_length = 4000, description = "Only names containing this.")),
    responses((status = 200, description = "The models.", body = wire::ModelList)))]
pub(crate) async fn list_models(state: State, req: HttpRequest) -> Result<HttpResponse> {
    let pairs = query_pairs(&req)?;
    let search = query_one(&pairs, "search").unwrap_or_default().to_owned();
    check_len("search", "a model search", &search, MAX_MODEL_SEARCH_CHARS)?;
    let visible = crate::auth::visibility(&req, Scope::Model).await?;
    let models = meta(&state, move |m| m.models(&search)).await?;
    let mut views = Vec::with_capacity(models.len());
    for model in models.iter().filter(|m| visible.allows(m.id)) {
        views.push(wire::ModelView::new(model, role_on(&req, Scope::Model, model.id).await?));
    }
    Ok(HttpResponse::Ok().json(wire::ModelList { models: views }))
}

/// Get a model.
#[utoipa::path(get, path = "/api/v1/models/{name}", tag = "registry", params(("name" = inline(NameText), Path, description = "The model's name.")),
    responses((status = 200, description = "The model.", body = wire::ModelView)))]
pub(crate) async fn get_model(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let name = path.into_inner();
    model_access(&state, &req, &name, Role::Read).await?;
    let model = meta(&state, move |m| m.model(&name)).await?;
    let role = role_on(&req, Scope::Model, model.id).await?;
    Ok(HttpResponse::Ok().json(wire::ModelView::new(&model, role)))
}

/// Change a model's description or tags.
#[utoipa::path(patch, path = "/api/v1/models/{name}", tag = "registry", params(("name" = inline(NameText), Path, description = "The model's name.")), request_body = wire::UpdateModel,
    responses((status = 200, description = "The model as it is now.", body = wire::ModelView)))]
pub(crate) async fn update_model(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let name = path.into_inner();
    model_access(&state, &req, &name, Role::Write).await?;
    let body: wire::UpdateModel = json_body(&req, payload).await?;
    if let Some(text) = &body.description {
        description(text)?;
    }
    let (set, delete) = string_map("tags", &body.tags)?;
    let model = meta(&state, move |m| m.update_model(&name, body.description.as_deref(), &set, &delete)).await?;
    let role = role_on(&req, Scope::Model, model.id).await?;
    Ok(HttpResponse::Ok().json(wire::ModelView::new(&model, role)))
}

/// Delete a model and its versions (their files stay with their runs).
#[utoipa::path(delete, path = "/api/v1/models/{name}", tag = "registry", params(("name" = inline(NameText), Path, description = "The model's name.")),
    responses((status = 200, description = "Deleted.", body = StatusOk)))]
pub(crate) async fn delete_model(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let name = path.into_inner();
    model_access(&state, &req, &name, Role::Admin).await?;
    meta(&state, move |m| m.delete_model(&name)).await?;
    Ok(HttpResponse::Ok().json(OK))
}

/// The files a version points at, and what they were, from a checkpoint or an artifact path.
async fn version_source(state: &State, run: &RunId, body: &wire::CreateVersion) -> Result<(Value, Value)> {
    if let Some(path) = &body.artifact {
        let (id, prefix) = (run.clone(), path.clone());
        let rows = meta(state, move |m| m.artifacts(&id, &prefix)).await?;
        let files: Vec<Value> = rows
            .iter()
            .filter(|a| a.path == *path || a.path.starts_with(&format!("{}/", path.trim_end_matches('/'))))
            .map(|a| json!({"path": a.path, "size": a.size, "sha256": a.sha256}))
            .collect();
        if files.is_empty() {
            return Err(ApiError::Conflict {
                field: "artifact".into(),
                reason: format!("run {run} has no artifact at {path:?}"),
            });
        }
        return Ok((json!({"kind": "artifact", "path": path}), Value::Array(files)));
    }
    let id = run.clone();
    let checkpoints = meta(state, move |m| m.checkpoints(&id)).await?;
    let chosen = match &body.checkpoint {
        None => checkpoints.first(),
        Some(Value::String(name)) => checkpoints.iter().find(|c| &c.name == name),
        Some(Value::Number(n)) => checkpoints.iter().find(|c| Some(c.step) == integer::of(n)),
        Some(_) => return Err(ApiError::invalid("checkpoint", "a checkpoint name or step")),
    };
    // The model and the run exist; the run does not hold (yet) what the version is to be made of.
    let c = chosen.ok_or_else(|| ApiError::Conflict {
        field: "checkpoint".into(),
        reason: match &body.checkpoint {
            Some(which) => format!("run {run} has no checkpoint {which}"),
            None => format!("run {run} has no checkpoint yet"),
        },
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

/// Register a new version from a run's checkpoint or artifact, with the run's lineage.
#[utoipa::path(post, path = "/api/v1/models/{name}/versions", tag = "registry", params(("name" = inline(NameText), Path, description = "The model's name.")), request_body = wire::CreateVersion,
    responses((status = 201, description = "The new version.", body = wire::VersionView)))]
pub(crate) async fn create_version(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let name = model_name(&path)?;
    let body: wire::CreateVersion = json_body(&req, payload).await?;
    let row = register_version(&state, &req, name, body).await?;
    Ok(HttpResponse::Created().json(version_view(&state, row).await?))
}

/// Registers a new version of a model from a run's checkpoint or artifacts, with the run's
/// lineage; the caller needs write on the model and read on the run.
pub(crate) async fn register_version(
    state: &State,
    req: &HttpRequest,
    name: String,
    body: wire::CreateVersion,
) -> Result<VersionRow> {
    model_access(state, req, &name, Role::Write).await?;
    let run = RunId::parse("run_id", &body.run_id).map_err(|_| ApiError::NotFound(format!("run {:?}", body.run_id)))?;
    let project_id = crate::lookup::run_project(state, &run).await?;
    crate::auth::require_run(req, &run, project_id, Role::Read).await?;
    let alias = body.alias.as_deref().map(|a| alias("alias", a)).transpose()?;
    description(&body.description)?;
    let (tags, _) = string_map("tags", &body.tags)?;
    let (source, files) = version_source(state, &run, &body).await?;
    // Lineage: the run as it is now, with what it recorded about its code and environment.
    let (run_row, metadata) = {
        let id = run.clone();
        meta(state, move |m| Ok((m.run(&id)?, m.metadata(&id)?))).await?
    };
    let summaries = state.store.summaries(&run).await?;
    let run_view = serde_json::to_value(crate::routes::runs::RunView::new(&run_row, &summaries, false))
        .map_err(|e| ApiError::Internal(e.to_string()))?;
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
    let row = meta(state, move |m| m.create_version(&name, &new)).await?;
    crate::rules::registry_event(state, &row, crate::rules::RegistryEvent::VersionCreated).await;
    Ok(row)
}

/// A model's versions.
#[utoipa::path(get, path = "/api/v1/models/{name}/versions", tag = "registry",
    params(("name" = inline(NameText), Path, description = "The model's name."), ("status" = Option<String>, Query, description = "ready or archived.")),
    responses((status = 200, description = "The versions.", body = wire::VersionList)))]
pub(crate) async fn list_versions(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let name = path.into_inner();
    model_access(&state, &req, &name, Role::Read).await?;
    let pairs = query_pairs(&req)?;
    let status = query_one(&pairs, "status").map(str::to_owned);
    let rows = meta(&state, move |m| m.versions(&name, status.as_deref())).await?;
    let mut list = Vec::with_capacity(rows.len());
    for r in rows {
        list.push(version_view(&state, r).await?);
    }
    Ok(HttpResponse::Ok().json(wire::VersionList { versions: list }))
}

/// Get a version, by number or alias.
#[utoipa::path(get, path = "/api/v1/models/{name}/versions/{version}", tag = "registry", params(("name" = inline(NameText), Path, description = "The model's name."), ("version" = String, Path, pattern = "^([0-9]{1,18}|[A-Za-z][A-Za-z0-9_-]{0,63})$", description = "A version number, or an alias.")),
    responses((status = 200, description = "The version.", body = wire::VersionView)))]
pub(crate) async fn get_version(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let (name, version) = path.into_inner();
    model_access(&state, &req, &name, Role::Read).await?;
    let row = meta(&state, move |m| m.version(&name, &VersionRef::parse(&version))).await?;
    Ok(HttpResponse::Ok().json(version_view(&state, row).await?))
}

/// Change a version's description, status or tags.
#[utoipa::path(patch, path = "/api/v1/models/{name}/versions/{version}", tag = "registry", params(("name" = inline(NameText), Path, description = "The model's name."), ("version" = String, Path, pattern = "^([0-9]{1,18}|[A-Za-z][A-Za-z0-9_-]{0,63})$", description = "A version number, or an alias.")), request_body = wire::UpdateVersion,
    responses((status = 200, description = "The version as it is now.", body = wire::VersionView)))]
pub(crate) async fn update_version(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let (name, version) = path.into_inner();
    model_access(&state, &req, &name, Role::Write).await?;
    let body: wire::UpdateVersion = json_body(&req, payload).await?;
    if let Some(text) = &body.description {
        description(text)?;
    }
    let (set_tags, delete_tags) = string_map("tags", &body.tags)?;
    let update = VersionUpdate {
        description: body.description,
        status: body.status.map(|s| s.as_str().to_owned()),
        set_tags,
        delete_tags,
    };
    let row = meta(&state, move |m| m.update_version(&name, &VersionRef::parse(&version), &update)).await?;
    Ok(HttpResponse::Ok().json(version_view(&state, row).await?))
}

/// Delete a version.
#[utoipa::path(delete, path = "/api/v1/models/{name}/versions/{version}", tag = "registry", params(("name" = inline(NameText), Path, description = "The model's name."), ("version" = String, Path, pattern = "^([0-9]{1,18}|[A-Za-z][A-Za-z0-9_-]{0,63})$", description = "A version number, or an alias.")),
    responses((status = 200, description = "Deleted.", body = StatusOk)))]
pub(crate) async fn delete_version(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let (name, version) = path.into_inner();
    model_access(&state, &req, &name, Role::Write).await?;
    meta(&state, move |m| m.delete_version(&name, &VersionRef::parse(&version))).await?;
    Ok(HttpResponse::Ok().json(OK))
}

/// Point an alias at a version.
#[utoipa::path(put, path = "/api/v1/models/{name}/aliases/{alias}", tag = "registry",
    params(("name" = inline(NameText), Path, description = "The model's name."), ("alias" = String, Path, pattern = "^[A-Za-z][A-Za-z0-9_-]{0,63}$", description = "An alias.")), request_body = wire::SetAlias,
    responses((status = 200, description = "The version the alias points at.", body = wire::VersionView)))]
pub(crate) async fn set_alias(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let (name, alias_name) = path.into_inner();
    model_access(&state, &req, &name, Role::Write).await?;
    let alias_name = alias("alias", &alias_name)?;
    let body: wire::SetAlias = json_body(&req, payload).await?;
    let vref = match &body.version {
        Value::Number(n) => {
            VersionRef::Number(integer::of(n).ok_or_else(|| ApiError::invalid("version", "a version number"))?)
        }
        Value::String(s) => VersionRef::parse(s),
        _ => return Err(ApiError::invalid("version", "a version number or alias")),
    };
    let moved = alias_name.clone();
    let row = meta(&state, move |m| m.set_alias(&name, &alias_name, &vref)).await?;
    crate::rules::registry_event(&state, &row, crate::rules::RegistryEvent::AliasMoved { alias: &moved }).await;
    Ok(HttpResponse::Ok().json(version_view(&state, row).await?))
}

/// Remove an alias.
#[utoipa::path(delete, path = "/api/v1/models/{name}/aliases/{alias}", tag = "registry",
    params(("name" = inline(NameText), Path, description = "The model's name."), ("alias" = String, Path, pattern = "^[A-Za-z][A-Za-z0-9_-]{0,63}$")),
    responses((status = 200, description = "Removed.", body = StatusOk)))]
pub(crate) async fn delete_alias(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let (name, alias_name) = path.into_inner();
    model_access(&state, &req, &name, Role::Write).await?;
    meta(&state, move |m| m.delete_alias(&name, &alias_name)).await?;
    Ok(HttpResponse::Ok().json(OK))
}
