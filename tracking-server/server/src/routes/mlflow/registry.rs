//! MLflow's model registry routes on trainlog's registry: a registered model is a trainlog model,
//! a model version is a trainlog version made from the run's artifacts that its `source` names
//! (`runs:/RUN/PATH` or `mlflow-artifacts:/EXPERIMENT/RUN/artifacts/PATH`), with the same
//! lineage; aliases and tags are shared. Stages, which MLflow deprecates, are kept in a version
//! tag of their own (`Archived` is also the version's archived status).

use super::experiments::name_filter;
use super::{arguments, page, paged, required_text, text, MlflowError, Result};
use crate::error::ApiError;
use crate::lookup::run_project;
use crate::routes::registry::{model_access, register_version, CreateVersion};
use crate::state::{meta, State};
use actix_web::http::Method;
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use trainlog_meta::{ModelRow, Role, Scope, VersionRef, VersionRow, VersionUpdate};

pub(super) fn routes(door: &mut super::Door) {
    door.route(Method::POST, "/registered-models/create", create_model)
        .route(Method::GET, "/registered-models/get", get_model)
        .route(Method::PATCH, "/registered-models/update", update_model)
        .route(Method::POST, "/registered-models/rename", rename_model)
        .route(Method::DELETE, "/registered-models/delete", delete_model)
        .route(Method::GET, "/registered-models/search", search_models)
        .route(Method::POST, "/registered-models/get-latest-versions", latest_versions)
        .route(Method::GET, "/registered-models/get-latest-versions", latest_versions)
        .route(Method::POST, "/registered-models/set-tag", set_model_tag)
        .route(Method::DELETE, "/registered-models/delete-tag", delete_model_tag)
        .route(Method::POST, "/registered-models/alias", set_alias)
        .route(Method::DELETE, "/registered-models/alias", delete_alias)
        .route(Method::GET, "/registered-models/alias", version_by_alias)
        .route(Method::POST, "/model-versions/create", create_version)
        .route(Method::GET, "/model-versions/get", get_version)
        .route(Method::PATCH, "/model-versions/update", update_version)
        .route(Method::DELETE, "/model-versions/delete", delete_version)
        .route(Method::GET, "/model-versions/search", search_versions)
        .route(Method::GET, "/model-versions/get-download-uri", download_uri)
        .route(Method::POST, "/model-versions/transition-stage", transition_stage)
        .route(Method::POST, "/model-versions/set-tag", set_version_tag)
        .route(Method::DELETE, "/model-versions/delete-tag", delete_version_tag);
}

/// The version tag that keeps a version's MLflow stage; it is not listed among its tags.
const STAGE_TAG: &str = "mlflow.current_stage";
const STAGES: [&str; 4] = ["None", "Staging", "Production", "Archived"];

fn stage_of(v: &VersionRow) -> String {
    if v.status == "archived" {
        return "Archived".to_owned();
    }
    v.tags.get(STAGE_TAG).cloned().unwrap_or_else(|| "None".to_owned())
}

fn tag_list(tags: &BTreeMap<String, String>) -> Vec<Value> {
    tags.iter().filter(|(k, _)| k.as_str() != STAGE_TAG).map(|(k, v)| json!({"key": k, "value": v})).collect()
}

/// Where a version's files are, as an MLflow artifact URI.
async fn source_uri(state: &State, v: &VersionRow) -> Result<String> {
    let path = match v.source["kind"].as_str() {
        Some("checkpoint") => format!("checkpoints/{}", v.source["name"].as_str().unwrap_or_default()),
        _ => v.source["path"].as_str().unwrap_or_default().to_owned(),
    };
    let run = trainlog_schema::RunId::parse("run_id", &v.run_id)?;
    let (experiment, _) = super::experiments::experiment_of_run(state, &run).await?;
    Ok(format!("mlflow-artifacts:/{experiment}/{}/artifacts/{path}", v.run_id))
}

async fn version_json(state: &State, v: &VersionRow) -> Result<Value> {
    Ok(json!({
        "name": v.model,
        "version": v.version.to_string(),
        "creation_timestamp": v.created_ms,
        "last_updated_timestamp": v.updated_ms,
        "user_id": v.lineage["run"]["user"].as_str().unwrap_or_default(),
        "current_stage": stage_of(v),
        "description": v.description,
        "source": source_uri(state, v).await?,
        "run_id": v.run_id,
        "status": "READY",
        "tags": tag_list(&v.tags),
        "aliases": v.aliases,
        "model_id": logged_model_of(v),
    }))
}

/// The logged model a version was registered from, if it was.
fn logged_model_of(v: &VersionRow) -> Option<String> {
    let path = v.source["path"].as_str()?;
    let id = path.strip_prefix("models/")?;
    (id.starts_with("m-") && !id.contains('/')).then(|| id.to_owned())
}

async fn model_json(state: &State, m: &ModelRow) -> Result<Value> {
    let name = m.name.clone();
    let versions = meta(state, move |meta| meta.versions(&name, None)).await?;
    let mut latest = Vec::new();
    for stage in STAGES {
        if let Some(v) = versions.iter().filter(|v| stage_of(v) == stage).max_by_key(|v| v.version) {
            latest.push(version_json(state, v).await?);
        }
    }
    let aliases: Vec<Value> =
        m.aliases.iter().map(|(alias, version)| json!({"alias": alias, "version": version.to_string()})).collect();
    Ok(json!({
        "name": m.name,
        "creation_timestamp": m.created_ms,
        "last_updated_timestamp": m.updated_ms,
        "description": m.description,
        "latest_versions": latest,
        "tags": tag_list(&m.tags),
        "aliases": aliases,
    }))
}

fn tags_of(args: &Value) -> Result<Value> {
    let mut tags = serde_json::Map::new();
    if let Value::Array(items) = &args["tags"] {
        for t in items {
            tags.insert(required_text(t, "key")?.to_owned(), json!(text(t, "value")?.unwrap_or_default()));
        }
    }
    Ok(Value::Object(tags))
}

async fn create_model(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let name = model_name(required_text(&args, "name")?)?;
    let description = text(&args, "description")?.unwrap_or_default().to_owned();
    let tags: BTreeMap<String, String> = tags_of(&args)?
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
        .collect();
    let creator = crate::auth::actor(&req);
    let model = {
        let owned = name.clone();
        meta(&state, move |m| m.create_model(&owned, &description, &tags, creator.as_ref()))
            .await
            .map_err(model_error(&name))?
    };
    Ok(HttpResponse::Ok().json(json!({"registered_model": model_json(&state, &model).await?})))
}

fn model_name(name: &str) -> Result<String> {
    Ok(trainlog_schema::ProjectName::parse("name", name)?.into_string())
}

/// MLflow's words for a registered model that is not there, or whose name is taken, in place of
/// trainlog's own.
fn model_error(name: &str) -> impl Fn(ApiError) -> MlflowError + '_ {
    move |error| match error {
        // `ApiError::NotFound` adds " not found".
        ApiError::NotFound(_) => ApiError::NotFound(format!("Registered Model with name={name}")).into(),
        ApiError::Conflict { field, .. } => MlflowError::already_exists(ApiError::Conflict {
            field,
            reason: format!("Registered Model (name={name}) already exists."),
        }),
        other => other.into(),
    }
}

/// The model a request names, once the caller may `need` it.
async fn named_model(state: &State, req: &HttpRequest, args: &Value, need: Role) -> Result<String> {
    let name = required_text(args, "name")?.to_owned();
    model_access(state, req, &name, need).await.map_err(model_error(&name))?;
    Ok(name)
}

async fn get_model(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let name = named_model(&state, &req, &args, Role::Read).await?;
    let model = {
        let owned = name.clone();
        meta(&state, move |m| m.model(&owned)).await.map_err(model_error(&name))?
    };
    Ok(HttpResponse::Ok().json(json!({"registered_model": model_json(&state, &model).await?})))
}

/// A model's new description (when given), the tags to set and those to delete.
type ModelChange = (Option<String>, BTreeMap<String, String>, Vec<String>);

async fn change_model(
    state: State,
    req: HttpRequest,
    payload: web::Payload,
    change: fn(&Value) -> Result<ModelChange>,
) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let name = named_model(&state, &req, &args, Role::Write).await?;
    let (description, set, delete) = change(&args)?;
    let model = {
        let owned = name.clone();
        meta(&state, move |m| m.update_model(&owned, description.as_deref(), &set, &delete))
            .await
            .map_err(model_error(&name))?
    };
    Ok(HttpResponse::Ok().json(json!({"registered_model": model_json(&state, &model).await?})))
}

async fn rename_model(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let name = named_model(&state, &req, &args, Role::Admin).await?;
    let new_name = model_name(required_text(&args, "new_name")?)?;
    let (old, new) = (name.clone(), new_name.clone());
    let model = meta(&state, move |m| m.rename_model(&old, &new)).await.map_err(|e| match e {
        ApiError::Conflict { .. } => model_error(&new_name)(e),
        other => model_error(&name)(other),
    })?;
    Ok(HttpResponse::Ok().json(json!({"registered_model": model_json(&state, &model).await?})))
}

async fn update_model(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    change_model(state, req, payload, |a| Ok((text(a, "description")?.map(str::to_owned), BTreeMap::new(), Vec::new())))
        .await
}

async fn set_model_tag(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    change_model(state, req, payload, |a| {
        let key = required_text(a, "key")?.to_owned();
        let value = text(a, "value")?.unwrap_or_default().to_owned();
        Ok((None, BTreeMap::from([(key, value)]), Vec::new()))
    })
    .await?;
    Ok(HttpResponse::Ok().json(json!({})))
}

async fn delete_model_tag(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    change_model(state, req, payload, |a| Ok((None, BTreeMap::new(), vec![required_text(a, "key")?.to_owned()])))
        .await?;
    Ok(HttpResponse::Ok().json(json!({})))
}

async fn delete_model(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let name = named_model(&state, &req, &args, Role::Admin).await?;
    let owned = name.clone();
    meta(&state, move |m| m.delete_model(&owned)).await.map_err(model_error(&name))?;
    Ok(HttpResponse::Ok().json(json!({})))
}

async fn search_models(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let filter = name_filter(text(&args, "filter")?.unwrap_or(""))?;
    let (limit, offset) = page(&args, 100)?;
    let visible = crate::auth::visibility(&req, Scope::Model).await?;
    let models = meta(&state, |m| m.models("")).await?;
    let mut out = Vec::new();
    for m in models.iter().filter(|m| visible.allows(m.id) && filter.matches(&m.name, &m.tags)) {
        out.push(model_json(&state, m).await?);
    }
    Ok(HttpResponse::Ok().json(paged(out, limit, offset, "registered_models")))
}

async fn latest_versions(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let name = named_model(&state, &req, &args, Role::Read).await?;
    let stages = super::texts(&args, "stages")?;
    let versions = {
        let owned = name.clone();
        meta(&state, move |m| m.versions(&owned, None)).await.map_err(model_error(&name))?
    };
    let mut out = Vec::new();
    for stage in STAGES.iter().filter(|s| stages.is_empty() || stages.iter().any(|w| w.eq_ignore_ascii_case(s))) {
        if let Some(v) = versions.iter().filter(|v| stage_of(v) == *stage).max_by_key(|v| v.version) {
            out.push(version_json(&state, v).await?);
        }
    }
    Ok(HttpResponse::Ok().json(json!({"model_versions": out})))
}

/// The run and artifact path a version's MLflow `source` names.
fn parse_source(source: &str, run_id: Option<&str>) -> Result<(String, String)> {
    let refused = || {
        MlflowError::from(ApiError::invalid(
            "source",
            format!("{source:?}: a model version is made from a run's artifacts here (runs:/RUN_ID/PATH or mlflow-artifacts:/EXPERIMENT/RUN_ID/artifacts/PATH)"),
        ))
    };
    let (run, path) = if let Some(rest) = source.strip_prefix("runs:/") {
        rest.split_once('/').map(|(r, p)| (r.to_owned(), p.to_owned())).ok_or_else(refused)?
    } else if let Some(rest) = source.strip_prefix("mlflow-artifacts:/") {
        let mut parts = rest.trim_start_matches('/').splitn(4, '/');
        let (_, run, artifacts, path) = (parts.next(), parts.next(), parts.next(), parts.next());
        match (run, artifacts, path) {
            (Some(run), Some("artifacts"), Some(path)) => (run.to_owned(), path.to_owned()),
            _ => return Err(refused()),
        }
    } else {
        return Err(refused());
    };
    if run_id.is_some_and(|given| !given.is_empty() && given != run) {
        return Err(
            ApiError::invalid("run_id", format!("run_id {run_id:?} is not the run of source {source:?}")).into()
        );
    }
    Ok((run, path.trim_end_matches('/').to_owned()))
}

async fn create_version(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let name = named_model(&state, &req, &args, Role::Write).await?;
    let source = required_text(&args, "source")?;
    let model_id = text(&args, "model_id")?.filter(|m| !m.is_empty()).map(str::to_owned).or_else(|| {
        source.strip_prefix("models:/").filter(|m| m.starts_with("m-") && !m.contains('/')).map(str::to_owned)
    });
    let (run, path) = match model_id {
        // A logged model: its files are its run's artifacts under models/{id}/.
        Some(id) => {
            let model = super::logged_models::named_model(&state, &req, &id, Role::Read).await?;
            (model.run_id, super::logged_models::artifact_folder(&id))
        }
        None => parse_source(source, text(&args, "run_id")?)?,
    };
    let body: CreateVersion = serde_json::from_value(json!({
        "run_id": run,
        "artifact": path,
        "description": text(&args, "description")?.unwrap_or_default(),
        "tags": tags_of(&args)?,
    }))
    .map_err(|e| ApiError::invalid("source", e.to_string()))?;
    let row = register_version(&state, &req, name, body).await.map_err(|e| match e {
        ApiError::Conflict { field, reason } => ApiError::Invalid { field, reason },
        other => other,
    })?;
    Ok(HttpResponse::Ok().json(json!({"model_version": version_json(&state, &row).await?})))
}

/// The version a request names (`name`, `version`), once the caller may `need` the model.
async fn named_version(state: &State, req: &HttpRequest, args: &Value, need: Role) -> Result<(String, String)> {
    let name = named_model(state, req, args, need).await?;
    let version = match &args["version"] {
        Value::Number(n) => n.to_string(),
        _ => required_text(args, "version")?.to_owned(),
    };
    if version.parse::<i64>().is_err() {
        return Err(ApiError::invalid("version", format!("{version:?} is not a version number")).into());
    }
    Ok((name, version))
}

async fn load_version(state: &State, name: String, version: String) -> Result<VersionRow> {
    let missing = format!("Model Version (name={name}, version={version})");
    meta(state, move |m| m.version(&name, &VersionRef::parse(&version))).await.map_err(|e| match e {
        ApiError::NotFound(_) => ApiError::NotFound(missing).into(),
        other => MlflowError::from(other),
    })
}

async fn get_version(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let (name, version) = named_version(&state, &req, &args, Role::Read).await?;
    let row = load_version(&state, name, version).await?;
    Ok(HttpResponse::Ok().json(json!({"model_version": version_json(&state, &row).await?})))
}

async fn change_version(state: &State, name: String, version: String, update: VersionUpdate) -> Result<VersionRow> {
    load_version(state, name.clone(), version.clone()).await?;
    Ok(meta(state, move |m| m.update_version(&name, &VersionRef::parse(&version), &update)).await?)
}

async fn update_version(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let (name, version) = named_version(&state, &req, &args, Role::Write).await?;
    let update =
        VersionUpdate { description: text(&args, "description")?.map(str::to_owned), ..VersionUpdate::default() };
    let row = change_version(&state, name, version, update).await?;
    Ok(HttpResponse::Ok().json(json!({"model_version": version_json(&state, &row).await?})))
}

async fn set_version_tag(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let (name, version) = named_version(&state, &req, &args, Role::Write).await?;
    let key = required_text(&args, "key")?.to_owned();
    let value = text(&args, "value")?.unwrap_or_default().to_owned();
    let update = VersionUpdate { set_tags: BTreeMap::from([(key, value)]), ..VersionUpdate::default() };
    change_version(&state, name, version, update).await?;
    Ok(HttpResponse::Ok().json(json!({})))
}

async fn delete_version_tag(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let (name, version) = named_version(&state, &req, &args, Role::Write).await?;
    let update =
        VersionUpdate { delete_tags: vec![required_text(&args, "key")?.to_owned()], ..VersionUpdate::default() };
    change_version(&state, name, version, update).await?;
    Ok(HttpResponse::Ok().json(json!({})))
}

async fn transition_stage(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let (name, version) = named_version(&state, &req, &args, Role::Write).await?;
    let asked = required_text(&args, "stage")?;
    let stage = STAGES.iter().find(|s| s.eq_ignore_ascii_case(asked)).ok_or_else(|| {
        ApiError::invalid("stage", format!("{asked:?}: a stage is one of None, Staging, Production, Archived"))
    })?;
    let archive_others =
        args["archive_existing_versions"] == json!(true) || text(&args, "archive_existing_versions")? == Some("true");
    let update = VersionUpdate {
        status: Some(if *stage == "Archived" { "archived" } else { "ready" }.to_owned()),
        set_tags: BTreeMap::from([(STAGE_TAG.to_owned(), stage.to_string())]),
        ..VersionUpdate::default()
    };
    let row = change_version(&state, name.clone(), version.clone(), update).await?;
    if archive_others && matches!(*stage, "Staging" | "Production") {
        let others = {
            let name = name.clone();
            meta(&state, move |m| m.versions(&name, None)).await?
        };
        for other in others.iter().filter(|v| v.version != row.version && stage_of(v) == *stage) {
            let update = VersionUpdate {
                status: Some("archived".into()),
                set_tags: BTreeMap::from([(STAGE_TAG.to_owned(), "Archived".to_owned())]),
                ..VersionUpdate::default()
            };
            change_version(&state, name.clone(), other.version.to_string(), update).await?;
        }
    }
    Ok(HttpResponse::Ok().json(json!({"model_version": version_json(&state, &row).await?})))
}

async fn delete_version(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let (name, version) = named_version(&state, &req, &args, Role::Write).await?;
    load_version(&state, name.clone(), version.clone()).await?;
    meta(&state, move |m| m.delete_version(&name, &VersionRef::parse(&version))).await?;
    Ok(HttpResponse::Ok().json(json!({})))
}

async fn download_uri(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let (name, version) = named_version(&state, &req, &args, Role::Read).await?;
    let row = load_version(&state, name, version).await?;
    let project_id = run_project(&state, &trainlog_schema::RunId::parse("run_id", &row.run_id)?).await?;
    crate::auth::require_in_project(&req, project_id, Role::Read, || format!("run {}", row.run_id)).await?;
    Ok(HttpResponse::Ok().json(json!({"artifact_uri": source_uri(&state, &row).await?})))
}

/// `name = 'x'`, `run_id = 'y'`, joined by AND: what clients search versions by.
async fn search_versions(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let filter = text(&args, "filter")?.unwrap_or("").to_owned();
    let mut wanted: Vec<(String, String)> = Vec::new();
    for part in super::clauses(&filter) {
        let (field, value) = part.split_once('=').ok_or_else(|| {
            ApiError::invalid("filter", format!("{part:?}: versions can be searched by name = '…' and run_id = '…'"))
        })?;
        let (field, value) = (field.trim(), value.trim().trim_matches('\'').trim_matches('"').to_owned());
        if !matches!(field, "name" | "run_id") {
            return Err(
                ApiError::invalid("filter", format!("{field:?}: versions can be searched by name and run_id")).into()
            );
        }
        wanted.push((field.to_owned(), value));
    }
    let (limit, offset) = page(&args, 100)?;
    let visible = crate::auth::visibility(&req, Scope::Model).await?;
    let models = meta(&state, |m| m.models("")).await?;
    let mut out = Vec::new();
    for m in models.iter().filter(|m| visible.allows(m.id)) {
        if wanted.iter().any(|(f, v)| f == "name" && *v != m.name) {
            continue;
        }
        let name = m.name.clone();
        let versions = meta(&state, move |meta| meta.versions(&name, None)).await?;
        for v in versions.iter().filter(|v| wanted.iter().all(|(f, want)| f != "run_id" || v.run_id == *want)) {
            out.push(version_json(&state, v).await?);
        }
    }
    Ok(HttpResponse::Ok().json(paged(out, limit, offset, "model_versions")))
}

async fn set_alias(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let (name, version) = named_version(&state, &req, &args, Role::Write).await?;
    let alias = required_text(&args, "alias")?.to_owned();
    load_version(&state, name.clone(), version.clone()).await?;
    let moved = alias.clone();
    let row = meta(&state, move |m| m.set_alias(&name, &alias, &VersionRef::parse(&version))).await?;
    crate::rules::registry_event(&state, &row, crate::rules::RegistryEvent::AliasMoved { alias: &moved }).await;
    Ok(HttpResponse::Ok().json(json!({})))
}

async fn delete_alias(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let name = named_model(&state, &req, &args, Role::Write).await?;
    let alias = required_text(&args, "alias")?.to_owned();
    meta(&state, move |m| m.delete_alias(&name, &alias)).await?;
    Ok(HttpResponse::Ok().json(json!({})))
}

async fn version_by_alias(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = arguments(&req, payload).await?;
    let name = named_model(&state, &req, &args, Role::Read).await?;
    let alias = required_text(&args, "alias")?.to_owned();
    let missing = format!("Registered model alias {alias}");
    let row = meta(&state, move |m| m.version(&name, &VersionRef::Alias(alias))).await.map_err(|e| match e {
        ApiError::NotFound(_) => MlflowError::from(ApiError::NotFound(missing)),
        other => other.into(),
    })?;
    Ok(HttpResponse::Ok().json(json!({"model_version": version_json(&state, &row).await?})))
}
