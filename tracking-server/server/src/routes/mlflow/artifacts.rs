//! MLflow's artifact proxy (`/api/2.0/mlflow-artifacts/artifacts/…`) on a run's trainlog
//! artifacts: `{experiment}/{run}/artifacts/{path}` is artifact `path` of that run, so what
//! `mlflow.log_artifact` uploads is listed, downloaded and checked like any other artifact.

use super::{MlflowError, Result};
use crate::auth::require_run;
use crate::error::ApiError;
use crate::lookup::run_project;
use crate::query::{query_one, query_pairs};
use crate::state::{meta, State};
use actix_web::http::Method;
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use trainlog_meta::Role;
use trainlog_schema::{ArtifactPath, RunId};

pub(super) fn routes(door: &mut super::Door) {
    door.route(Method::GET, "/artifacts", list)
        .route(Method::GET, "/artifacts/{path:.*}", download)
        .route(Method::PUT, "/artifacts/{path:.*}", upload)
        .route(Method::DELETE, "/artifacts/{path:.*}", delete);
}

/// A run and a path inside its artifacts, from `{experiment}/{run}/artifacts[/{path}]` (or a
/// logged model's `{experiment}/models/{model_id}/artifacts[/{path}]`, which are its run's
/// artifacts under `models/{model_id}/`), once the caller may `need` the run.
async fn target(state: &State, req: &HttpRequest, full: &str, need: Role) -> Result<(RunId, i64, String)> {
    let not_served = || {
        MlflowError::from(ApiError::NotFound(format!(
            "artifact location {full:?}: this server keeps the artifacts of runs (EXPERIMENT/RUN_ID/artifacts/PATH) \
             and of logged models (EXPERIMENT/models/MODEL_ID/artifacts/PATH)"
        )))
    };
    let trimmed = full.trim_matches('/');
    let (run, prefix, rest): (String, String, String) = match trimmed.splitn(5, '/').collect::<Vec<_>>().as_slice() {
        [_, "models", model_id, "artifacts", rest @ ..] => {
            let model = super::logged_models::named_model(state, req, model_id, need).await?;
            (model.run_id, super::logged_models::artifact_folder(model_id), rest.join("/"))
        }
        _ => match trimmed.splitn(4, '/').collect::<Vec<_>>().as_slice() {
            [_, run, "artifacts", rest @ ..] => (run.to_string(), String::new(), rest.join("/")),
            _ => return Err(not_served()),
        },
    };
    let rest = rest.trim_matches('/');
    let path = match (prefix.is_empty(), rest.is_empty()) {
        (true, _) => rest.to_owned(),
        (false, true) => prefix,
        (false, false) => format!("{prefix}/{rest}"),
    };
    let id = RunId::parse("path", &run).map_err(|_| not_served())?;
    let project_id = match run_project(state, &id).await {
        Ok(project_id) => project_id,
        // As MLflow does, the artifacts of a deleted run, or of a run in a deleted experiment, are
        // still read; they only take no changes.
        Err(ApiError::NotFound(_)) if need == Role::Read => {
            let id = id.clone();
            meta(state, move |m| Ok(m.run_any(&id)?.0.project_id)).await?
        }
        Err(e) => return Err(e.into()),
    };
    require_run(req, &id, project_id, need).await?;
    Ok((id, project_id, path))
}

fn artifact_path(path: &str) -> Result<ArtifactPath> {
    Ok(ArtifactPath::parse("path", path)?)
}

async fn list(state: State, req: HttpRequest) -> Result<HttpResponse> {
    let pairs = query_pairs(&req)?;
    let full = query_one(&pairs, "path").unwrap_or("");
    let (run, _, dir) = target(&state, &req, full, Role::Read).await?;
    Ok(HttpResponse::Ok().json(json!({"files": children(&state, run, &dir, false).await?})))
}

/// The direct children of a folder of a run's artifacts: files with their sizes, folders once;
/// their paths from the folder, or (`from_root`) from the run's artifact root.
async fn children(state: &State, run: RunId, dir: &str, from_root: bool) -> Result<Vec<Value>> {
    let prefix = if dir.is_empty() { String::new() } else { format!("{dir}/") };
    let rows = {
        let prefix = prefix.clone();
        meta(state, move |m| m.artifacts(&run, &prefix)).await?
    };
    let shown = |name: &str| if from_root { format!("{prefix}{name}") } else { name.to_owned() };
    let mut children: BTreeMap<String, Value> = BTreeMap::new();
    for row in rows.iter().filter(|r| r.path.starts_with(&prefix)) {
        let rest = &row.path[prefix.len()..];
        match rest.split_once('/') {
            Some((folder, _)) => {
                children.entry(folder.to_owned()).or_insert_with(|| json!({"path": shown(folder), "is_dir": true}));
            }
            None => {
                children.insert(rest.to_owned(), json!({"path": shown(rest), "is_dir": false, "file_size": row.size}));
            }
        }
    }
    Ok(children.into_values().collect())
}

/// The tracking API's `artifacts/list`: a run's artifacts under `path`, paths from the run's root.
pub(super) async fn list_of_run(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let args = super::arguments(&req, payload).await?;
    let (run, _) = super::runs::named_run_any(&state, &req, &args, Role::Read).await?;
    let dir = super::text(&args, "path")?.unwrap_or("").trim_matches('/').to_owned();
    if dir.split('/').any(|part| part == ".." || part == ".") || dir.contains('\\') {
        return Err(ApiError::invalid("path", "Invalid path").into());
    }
    let (experiment, _) = super::experiments::experiment_of_run(&state, &run).await?;
    let root = format!("mlflow-artifacts:/{experiment}/{run}/artifacts");
    let files = children(&state, run, &dir, true).await?;
    Ok(HttpResponse::Ok().json(json!({"root_uri": root, "files": files})))
}

async fn download(state: State, req: HttpRequest, path: web::Path<String>) -> Result<HttpResponse> {
    let (run, project_id, rest) = target(&state, &req, &path, Role::Read).await?;
    Ok(crate::routes::artifacts::artifact_download(&state, run, project_id, artifact_path(&rest)?).await?)
}

async fn upload(
    state: State,
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let (run, project_id, rest) = target(&state, &req, &path, Role::Write).await?;
    let path = artifact_path(&rest)?;
    // What the media door records is checked as it arrives: an image's size and magic bytes.
    let rules = super::media_door::upload_rules(&path);
    let row =
        crate::routes::artifacts::store_artifact(&state, &req, run.clone(), project_id, path.clone(), payload, rules)
            .await?;
    super::media_door::record(&state, &run, project_id, &path, row.size).await?;
    Ok(HttpResponse::Ok().json(json!({})))
}

async fn delete(state: State, req: HttpRequest, path: web::Path<String>) -> Result<HttpResponse> {
    let (run, project_id, rest) = target(&state, &req, &path, Role::Write).await?;
    // MLflow deletes a folder too: every artifact under the path.
    let prefix = format!("{rest}/");
    let under = {
        let (run, prefix) = (run.clone(), prefix.clone());
        meta(&state, move |m| m.artifacts(&run, &prefix)).await?
    };
    if under.is_empty() {
        crate::routes::artifacts::remove_artifact(&state, run, project_id, artifact_path(&rest)?).await?;
        return Ok(HttpResponse::Ok().json(json!({})));
    }
    for row in under {
        crate::routes::artifacts::remove_artifact(&state, run.clone(), project_id, artifact_path(&row.path)?).await?;
    }
    Ok(HttpResponse::Ok().json(json!({})))
}
