//! Stopping a run from outside it (the API, `trainlog stop`, the UI's Stop button): the stop is
//! kept on the run, and its processes see it in their next heartbeat's answer.

use crate::body::json_body;
use crate::error::Result;
use crate::lookup;
use crate::state::{meta, State};
use crate::wire::RunIdText;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Characters a stop's reason may have.
pub const MAX_REASON_CHARS: usize = 500;

/// Ask a running run to stop: each of its processes sees it with its next heartbeat (the Python
/// SDK raises KeyboardInterrupt in the main thread, or calls the run's `on_stop`), and the run
/// ends `killed`, saying who stopped it.
#[utoipa::path(post, path = "/api/v1/runs/{id}/stop", tag = "runs",
    params(("id" = inline(RunIdText), Path, description = "The run's id.")),
    request_body = StopRun,
    responses((status = 200, description = "The stop asked (the first one, when asked again).", body = StopView)))]
pub(crate) async fn stop_run(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let (id, _) = lookup::writable(&state, &req, &path).await?;
    let body: StopRun = json_body(&req, payload).await?;
    let reason = body.reason.unwrap_or_default();
    trainlog_schema::limits::check_len("reason", "a stop's reason", &reason, MAX_REASON_CHARS)?;
    let by = crate::auth::caller(&req).map_or_else(|| "someone".to_owned(), |c| c.name);
    let stop = meta(&state, move |m| m.request_stop(&id, &by, &reason)).await?;
    Ok(HttpResponse::Ok().json(StopView::from(stop)))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StopRun {
    /// Why, as the run's end will say (at most 500 characters).
    #[serde(default)]
    #[schema(max_length = 500)]
    pub reason: Option<String>,
}

/// A stop asked of a run.
#[derive(Serialize, ToSchema)]
pub struct StopView {
    /// When it was asked, ms since the Unix epoch.
    pub time: i64,
    /// Who asked: a user's name, or `someone` on a server without --auth.
    pub by: String,
    pub reason: String,
}

impl From<trainlog_meta::StopRequest> for StopView {
    fn from(s: trainlog_meta::StopRequest) -> Self {
        StopView { time: s.time_ms, by: s.by, reason: s.reason }
    }
}
