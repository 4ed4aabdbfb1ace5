//! MLflow's experiments on trainlog's projects: create, get, search, update, delete and restore
//! them and their tags. MLflow's `Default` experiment, id `0`, is the project named so.

use super::{arguments, page, required_text, text, MlflowError, Result};
use super::{mlflow_key, tag_pairs};
use crate::auth::require;
use crate::error::ApiError;
use crate::state::{meta, State};
use actix_web::http::Method;
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use trainlog_meta::{Project, Role, Scope};
use trainlog_schema::limits::{check_len, MAX_TAG_VALUE_CHARS};
use trainlog_schema::{ProjectName, RunId};

pub(super) fn routes(door: &mut super::Door) {
    door.route(Method::POST, "/experiments/create", create_experiment)
        .route(Method::GET, "/experiments/get", get_experiment)
        .route(Method::GET, "/experiments/get-by-name", get_experiment_by_name)
        .route(Method::POST, "/experiments/search", search_experiments)
        .route(Method::GET, "/experiments/search", search_experiments)
        .route(Method::POST, "/experiments/update", update_experiment)
        .route(Method::POST, "/experiments/delete", delete_experiment)
        .route(Method::POST, "/experiments/restore", restore_experiment)
        .route(Method::POST, "/experiments/set-experiment-tag", set_experiment_tag)
        .route(Method::POST, "/experiments/delete-experiment-tag", delete_experiment_tag);
}

/// MLflow's default experiment: id `0`, the project named so.
pub(super) const DEFAULT_EXPERIMENT: &str = "Default";
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

pub(super) fn must_be_active(what: &str, deleted: bool) -> Result<()> {
    if deleted {
        return Err(ApiError::invalid("lifecycle_stage", format!("The {what} must be in the 'active' state.")).into());
    }
    Ok(())
}

/// The project behind an experiment id, once the caller may `need` it; it must be active.
pub(super) async fn experiment(state: &State, req: &HttpRequest, id: &str, need: Role) -> Result<Project> {
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
/// `=`, `!=`, `LIKE` or `ILIKE` and a quoted value. A thing without a tag matches no
/// comparison of it, except `!=` on `PROMPT_TAG`.
pub(super) struct NameFilter {
    clauses: Vec<(Option<String>, String, String)>,
}

/// The tag MLflow's clients filter registered models on (`!= 'true'`) to leave prompts out.
const PROMPT_TAG: &str = "mlflow.prompt.is_prompt";

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
            // As in MLflow, a tag comparison (`!=` included) only matches where the tag is set,
            // but for the tag that marks prompts: a thing without it is no prompt.
            match (op.as_str(), subject) {
                ("!=", None) => tag.as_deref() == Some(PROMPT_TAG),
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
            Some(("attribute" | "attributes", "name")) => None,
            Some(("tag" | "tags", key)) => Some(key.trim_matches('`').to_owned()),
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
pub(super) enum ViewType {
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

    pub(super) fn lifecycle(self) -> trainlog_meta::search::Lifecycle {
        match self {
            ViewType::ActiveOnly => trainlog_meta::search::Lifecycle::Active,
            ViewType::DeletedOnly => trainlog_meta::search::Lifecycle::Deleted,
            ViewType::All => trainlog_meta::search::Lifecycle::All,
        }
    }
}

pub(super) fn view_type(args: &Value) -> Result<ViewType> {
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
pub(super) fn forget_run_projects(state: &State) {
    if let Ok(mut cache) = state.run_projects.lock() {
        cache.clear();
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
/// A run deleted, or in a deleted experiment, still has one: MLflow reads such runs' artifacts.
pub(super) async fn experiment_of_run(state: &State, run: &RunId) -> Result<(String, i64)> {
    let run = run.clone();
    let project = meta(state, move |m| {
        let (run, _) = m.run_any(&run)?;
        Ok(m.project_any(run.project_id)?.0)
    })
    .await?;
    Ok((experiment_id(&project), project.id))
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
            ("tags.missing != 'x'", false),
            ("tags.team != 'vision'", true),
            ("tags.team != 'vision and speech'", false),
        ];
        for (filter, expected) in cases {
            assert_eq!(name_filter(filter).unwrap().matches("detector", &tags), expected, "{filter}");
        }
        for bad in ["name > 'a'", "size = 1", "name = detector"] {
            assert!(name_filter(bad).is_err(), "{bad}");
        }
    }
}
