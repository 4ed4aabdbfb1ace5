//! Saved views of a project: named UI states (filter, sort, columns, charts) the server keeps as
//! opaque JSON objects. Reading them needs read on the project, saving and deleting need write.

use crate::body::json_body;
use crate::error::{ApiError, Result};
use crate::lookup;
use crate::state::{meta, State};
use crate::wire::{text_schema, NameText, StatusOk, OK};
use actix_web::{web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use trainlog_meta::{Project, Role};
use trainlog_schema::limits::MAX_VIEW_STATE_BYTES;
use trainlog_schema::ViewName;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/projects/{name}/views", web::get().to(list_views))
        .route("/projects/{name}/views/{view}", web::get().to(get_view))
        .route("/projects/{name}/views/{view}", web::put().to(put_view))
        .route("/projects/{name}/views/{view}", web::delete().to(delete_view));
}

/// This resource's operations in the API document.
#[derive(utoipa::OpenApi)]
#[openapi(paths(list_views, get_view, put_view, delete_view,))]
pub(super) struct Api;

/// Names a missing view by its project's name rather than its id.
fn not_found(view: &ViewName, project: &Project) -> impl FnOnce(ApiError) -> ApiError {
    let what = format!("view {:?} of project {:?}", view.as_str(), project.name);
    move |e| match e {
        ApiError::NotFound(_) => ApiError::NotFound(what),
        other => other,
    }
}

/// A project's saved views, by name, without their state.
#[utoipa::path(get, path = "/api/v1/projects/{name}/views", tag = "projects",
    params(("name" = inline(NameText), Path, description = "The project's name.")),
    responses((status = 200, description = "The project's views.", body = ViewList)))]
pub(crate) async fn list_views(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let project = lookup::project(&state, &req, path.into_inner(), Role::Read).await?;
    let rows = meta(&state, move |m| m.views(project.id)).await?;
    Ok(HttpResponse::Ok().json(ViewList { views: rows.iter().map(ViewSummary::new).collect() }))
}

/// One saved view with its state.
#[utoipa::path(get, path = "/api/v1/projects/{name}/views/{view}", tag = "projects",
    params(("name" = inline(NameText), Path, description = "The project's name."),
        ("view" = inline(ViewNameText), Path, description = "The view's name.")),
    responses((status = 200, description = "The view.", body = ViewDetail)))]
pub(crate) async fn get_view(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let (name, view) = path.into_inner();
    let view = ViewName::parse("view", &view)?;
    let project = lookup::project(&state, &req, name, Role::Read).await?;
    let missing = not_found(&view, &project);
    let (row, view_state) = meta(&state, move |m| m.view(project.id, &view)).await.map_err(missing)?;
    Ok(HttpResponse::Ok().json(ViewDetail { view: ViewSummary::new(&row), state: view_state }))
}

/// Save a view, creating it or replacing the one of that name.
#[utoipa::path(put, path = "/api/v1/projects/{name}/views/{view}", tag = "projects",
    params(("name" = inline(NameText), Path, description = "The project's name."),
        ("view" = inline(ViewNameText), Path, description = "The view's name.")),
    request_body = PutView,
    responses((status = 201, description = "The new view.", body = ViewDetail),
        (status = 200, description = "The view, replaced.", body = ViewDetail)))]
pub(crate) async fn put_view(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let (name, view) = path.into_inner();
    let view = ViewName::parse("view", &view)?;
    let project = lookup::project(&state, &req, name, Role::Write).await?;
    let body: PutView = json_body(&req, payload).await?;
    let view_state = body.state.ok_or_else(|| ApiError::invalid("state", "a view needs its state"))?;
    if !view_state.is_object() {
        return Err(ApiError::invalid("state", "a view's state is a JSON object"));
    }
    let size = serde_json::to_string(&view_state).map_err(|e| ApiError::Internal(e.to_string()))?.len();
    if size > MAX_VIEW_STATE_BYTES {
        return Err(ApiError::invalid(
            "state",
            format!("a view's state may take at most {MAX_VIEW_STATE_BYTES} bytes as JSON, got {size}"),
        ));
    }
    let user = crate::auth::caller(&req).map(|c| c.name);
    let stored = view_state.clone();
    let (row, created) = meta(&state, move |m| m.put_view(project.id, &view, &stored, user.as_deref())).await?;
    let answer = ViewDetail { view: ViewSummary::new(&row), state: view_state };
    Ok(if created { HttpResponse::Created().json(answer) } else { HttpResponse::Ok().json(answer) })
}

/// Delete a saved view.
#[utoipa::path(delete, path = "/api/v1/projects/{name}/views/{view}", tag = "projects",
    params(("name" = inline(NameText), Path, description = "The project's name."),
        ("view" = inline(ViewNameText), Path, description = "The view's name.")),
    responses((status = 200, description = "Deleted.", body = StatusOk)))]
pub(crate) async fn delete_view(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let (name, view) = path.into_inner();
    let view = ViewName::parse("view", &view)?;
    let project = lookup::project(&state, &req, name, Role::Write).await?;
    let missing = not_found(&view, &project);
    meta(&state, move |m| m.delete_view(project.id, &view)).await.map_err(missing)?;
    Ok(HttpResponse::Ok().json(OK))
}

// Wire types.

/// A view's name in a path: 1 to 100 characters, no control characters, not only whitespace.
pub struct ViewNameText;
impl PartialSchema for ViewNameText {
    fn schema() -> RefOr<Schema> {
        text_schema(
            Some(1),
            Some(trainlog_schema::limits::MAX_VIEW_NAME_CHARS),
            VIEW_NAME,
            "A saved view's name: no control characters, not only whitespace.",
        )
    }
}
impl ToSchema for ViewNameText {}

/// A view's name: no control characters, and something besides whitespace.
pub const VIEW_NAME: &str = r"^[^\x00-\x1F\x7F-\x9F]*[^\x00-\x1F\x7F-\x9F \xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000][^\x00-\x1F\x7F-\x9F]*$";

/// A saved view as lists show it, without its state.
#[derive(Serialize, ToSchema)]
pub struct ViewSummary {
    pub name: String,
    /// Who saved it last; null on a server run without --auth.
    pub user: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub updated_time: i64,
}

impl ViewSummary {
    pub fn new(v: &trainlog_meta::ViewRow) -> Self {
        ViewSummary { name: v.name.clone(), user: v.user.clone(), updated_time: v.updated_ms }
    }
}

#[derive(Serialize, ToSchema)]
pub struct ViewList {
    /// By name.
    pub views: Vec<ViewSummary>,
}

/// A saved view with its state.
#[derive(Serialize, ToSchema)]
pub struct ViewDetail {
    #[serde(flatten)]
    pub view: ViewSummary,
    /// The state as the UI stored it; the server does not read it.
    #[schema(value_type = Object)]
    pub state: Value,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutView {
    /// A JSON object of at most 64 KiB as JSON text, kept as given.
    #[serde(default)]
    #[schema(value_type = Object, required = true)]
    pub state: Option<Value>,
}
