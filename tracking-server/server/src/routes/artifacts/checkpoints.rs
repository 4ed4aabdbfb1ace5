//! A run's checkpoints: recorded once their files are uploaded as artifacts, kept by the
//! retention asked for (the last N, the best N by a metric), listed newest step first.

use super::wire;
use crate::body::json_body;
use crate::error::{ApiError, Result};
use crate::lookup;
use crate::state::{meta, State};
use crate::wire::RunIdText;
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{json, Value};
use trainlog_schema::ArtifactPath;
use trainlog_store::StepRange;

/// Record a checkpoint whose files were uploaded under `checkpoints/{name}/`, then apply retention.
#[utoipa::path(post, path = "/api/v1/runs/{id}/checkpoints", tag = "runs", params(("id" = inline(RunIdText), Path, description = "The run's id.")),
    request_body = wire::NewCheckpoint, responses((status = 201, description = "The checkpoint, and those retention dropped.", body = wire::CheckpointCreated)))]
pub(crate) async fn put_checkpoint(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let (id, project_id) = lookup::writable(&state, &req, &path).await?;
    let body: wire::NewCheckpoint = json_body(&req, payload).await?;
    let name = body.name.clone().unwrap_or_else(|| format!("step-{:012}", body.step));
    if name.contains('/') {
        return Err(ApiError::invalid("name", "a checkpoint name has no '/'"));
    }
    ArtifactPath::parse("name", &format!("checkpoints/{name}"))?;
    for (i, f) in body.files.iter().enumerate() {
        ArtifactPath::parse(&format!("files[{i}].path"), &f.path)?;
    }
    let minimize = body.mode.unwrap_or(wire::RankMode::Min) == wire::RankMode::Min;
    if body.keep_best.is_some() && body.metric.is_none() {
        return Err(ApiError::invalid("metric", "keep_best needs the metric to rank checkpoints by"));
    }
    let metric_value = match &body.metric {
        Some(metric) => {
            let key = trainlog_schema::MetricKey::parse("metric", metric)?;
            let upto = StepRange { min: None, max: Some(body.step) };
            state.store.series(&id, &key, upto).await?.values.last().copied()
        }
        None => None,
    };
    let row = trainlog_meta::CheckpointRow {
        name,
        step: body.step,
        files: Value::Array(
            body.files.iter().map(|f| json!({"path": f.path, "size": f.size, "sha256": f.sha256})).collect(),
        ),
        metadata: body.metadata,
        metric_key: body.metric.clone(),
        metric_value,
        created_ms: trainlog_meta::now_ms(),
    };
    let retention = trainlog_meta::Retention {
        keep_last: body.keep_last,
        keep_best: body.keep_best,
        metric: body.metric,
        minimize,
    };
    let dropped = {
        let (id, row) = (id.clone(), row.clone());
        meta(&state, move |m| m.put_checkpoint(&id, &row, &retention)).await?
    };
    let artifacts = state.store.artifacts();
    for c in &dropped {
        for f in c.files.as_array().into_iter().flatten() {
            let rel = f["path"].as_str().unwrap_or_default();
            if let Ok(p) = ArtifactPath::parse("path", &format!("checkpoints/{}/{rel}", c.name)) {
                let location = trainlog_store::ArtifactStore::location(project_id, &id, &p)?;
                artifacts.delete(&location).await?;
            }
        }
    }
    let dropped = dropped.into_iter().map(|c| c.name).collect();
    Ok(HttpResponse::Created().json(wire::CheckpointCreated { checkpoint: wire::CheckpointView::new(&row), dropped }))
}

/// A run's checkpoints, newest step first.
#[utoipa::path(get, path = "/api/v1/runs/{id}/checkpoints", tag = "runs", params(("id" = inline(RunIdText), Path, description = "The run's id.")),
    responses((status = 200, description = "The checkpoints.", body = wire::CheckpointList)))]
pub(crate) async fn list_checkpoints(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let (id, _) = lookup::readable(&state, &req, &path).await?;
    let rows = meta(&state, move |m| m.checkpoints(&id)).await?;
    Ok(HttpResponse::Ok()
        .json(wire::CheckpointList { checkpoints: rows.iter().map(wire::CheckpointView::new).collect() }))
}

/// A run's newest checkpoint.
#[utoipa::path(get, path = "/api/v1/runs/{id}/checkpoints/latest", tag = "runs", params(("id" = inline(RunIdText), Path, description = "The run's id.")),
    responses((status = 200, description = "The checkpoint.", body = wire::CheckpointView)))]
pub(crate) async fn latest_checkpoint(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let (id, _) = lookup::readable(&state, &req, &path).await?;
    let rows = {
        let id = id.clone();
        meta(&state, move |m| m.checkpoints(&id)).await?
    };
    let latest = rows.first().ok_or_else(|| ApiError::NotFound(format!("a checkpoint of run {id}")))?;
    Ok(HttpResponse::Ok().json(wire::CheckpointView::new(latest)))
}

/// How one restore of a checkpoint went.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreInput {
    /// Whether the checkpoint restored: its files were there, matched their sha256, and loaded.
    pub ok: bool,
    /// Why it did not.
    #[schema(max_length = 1048576)]
    pub error: Option<String>,
    /// The run that restored it, when one did (a resumed or fine-tuning run).
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub restored_by: Option<String>,
}

/// Record that a checkpoint was restored, or failed to restore: the training report's
/// checkpoint restore rate counts these. Reading the run is enough, as restoring it is.
#[utoipa::path(post, path = "/api/v1/runs/{id}/checkpoints/{name}/restores", tag = "runs",
    params(("id" = inline(RunIdText), Path, description = "The run's id."),
        ("name" = String, Path, description = "The checkpoint's name.")),
    request_body = RestoreInput,
    responses((status = 201, description = "Recorded.", body = crate::wire::StatusOk)))]
pub(crate) async fn record_restore(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let (run, name) = path.into_inner();
    let (id, _) = lookup::readable(&state, &req, &run).await?;
    let body: RestoreInput = json_body(&req, payload).await?;
    trainlog_schema::limits::check_len(
        "error",
        "an error",
        body.error.as_deref().unwrap_or_default(),
        trainlog_schema::limits::MAX_TEXT_CHARS,
    )?;
    let restored_by =
        body.restored_by.as_deref().map(|r| trainlog_schema::RunId::parse("restored_by", r)).transpose()?;
    if body.ok && body.error.is_some() {
        return Err(ApiError::invalid("error", "a restore that worked has no error"));
    }
    meta(&state, move |m| {
        m.record_restore(
            id.as_str(),
            &name,
            body.ok,
            body.error.as_deref(),
            restored_by.as_ref().map(|r| r.as_str()),
            trainlog_meta::now_ms(),
        )
    })
    .await?;
    Ok(HttpResponse::Created().json(crate::wire::OK))
}
