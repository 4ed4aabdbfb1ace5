//! Searching runs: a project's runs (`GET /projects/{name}/runs`) or any the caller may read
//! (`POST /runs/search`), filtered, ordered and paged, answered as JSON or as an Arrow stream in
//! the runs table's layout, with only the params, tags and metrics asked for.

use super::wire;
use crate::body::json_body;
use crate::error::{ApiError, Result};
use crate::lookup;
use crate::query::{page, query_int, query_one, query_pairs};
use crate::respond::{server_timing, wants_arrow, SERVER_TIMING};
use crate::state::{meta, State};
use crate::wire::NameText;
use actix_web::{web, HttpRequest, HttpResponse};
use std::collections::BTreeMap;
use trainlog_meta::{Role, Run, Scope};
use trainlog_schema::arrow::ARROW_STREAM_MEDIA_TYPE;
use trainlog_schema::limits::{check_len, MAX_QUERY_FILTER_CHARS, MAX_QUERY_ORDER_BY_CHARS};
use trainlog_schema::RunId;

struct SearchRequest {
    project: Option<String>,
    filter: String,
    order_by: Vec<String>,
    limit: u32,
    offset: u64,
    archived: wire::Archived,
    columns: Columns,
    total: bool,
}

/// Which keys of one kind (params, tags or metrics) a search answers.
#[derive(Clone, Debug, PartialEq)]
enum Pick {
    All,
    Only(std::collections::BTreeSet<String>),
}

impl Pick {
    fn keeps(&self, key: &str) -> bool {
        match self {
            Pick::All => true,
            Pick::Only(keys) => keys.contains(key),
        }
    }
}

/// The params, tags and metrics a search answers for each run (`columns`); everything by default.
#[derive(Clone, Debug, PartialEq)]
struct Columns {
    params: Pick,
    tags: Pick,
    metrics: Pick,
}

impl Default for Columns {
    fn default() -> Self {
        Columns { params: Pick::All, tags: Pick::All, metrics: Pick::All }
    }
}

impl Columns {
    /// `params`, `tags`, `metrics`, or one of them followed by `.KEY`; a kind not named is left out.
    /// `field_of(i)` names the item in an error.
    fn parse<'a>(items: impl IntoIterator<Item = &'a str>, field_of: impl Fn(usize) -> String) -> Result<Columns> {
        let none = || Pick::Only(Default::default());
        let mut columns = Columns { params: none(), tags: none(), metrics: none() };
        for (i, item) in items.into_iter().enumerate() {
            let (kind, key) = match item.split_once('.') {
                Some((kind, key)) => (kind, Some(key)),
                None => (item, None),
            };
            let pick = match kind {
                "params" => &mut columns.params,
                "tags" => &mut columns.tags,
                "metrics" => &mut columns.metrics,
                _ => {
                    return Err(ApiError::invalid(
                        field_of(i),
                        format!("expected params, tags or metrics, alone or followed by .KEY, got {item:?}"),
                    ))
                }
            };
            match key {
                None => *pick = Pick::All,
                Some("") => return Err(ApiError::invalid(field_of(i), format!("a key must follow {kind:?}."))),
                Some(key) => {
                    if let Pick::Only(keys) = pick {
                        keys.insert(key.to_owned());
                    }
                }
            }
        }
        Ok(columns)
    }
}

async fn search(state: &State, http: &HttpRequest, req: SearchRequest) -> Result<HttpResponse> {
    use trainlog_meta::search::RunScope;
    use trainlog_meta::Visibility;
    let started = std::time::Instant::now();
    let scope = match req.project {
        Some(name) => RunScope::Project(lookup::project(state, http, name, Role::Read).await?.id),
        None => match crate::auth::visibility(http, Scope::Project).await? {
            Visibility::All => RunScope::All,
            Visibility::Only(ids) => RunScope::Projects(ids),
            Visibility::AllBut(ids) => RunScope::AllBut(ids),
        },
    };
    // Filters and orders on metrics read the stored summaries: write the changed ones first.
    state.store.sync_summaries().await?;
    let (limit, offset) = (req.limit, req.offset);
    let (filter, order_by, lifecycle, want_total) = (req.filter, req.order_by, req.archived.lifecycle(), req.total);
    let columns = req.columns;
    // One blocking call: the page of runs (params and tags loaded per table, not per run, and
    // kept between answers while a run is unchanged) and, when asked, the number of matches.
    let (mut runs, more, total, mut jobs) = meta(state, move |m| {
        let mut runs = m.search_in(scope.clone(), lifecycle, &filter, &order_by, limit + 1, offset)?;
        let more = runs.len() > limit as usize;
        runs.truncate(limit as usize);
        let total = match (want_total, more) {
            (false, _) => None,
            (true, false) if !runs.is_empty() || offset == 0 => Some(offset + runs.len() as u64),
            (true, _) => Some(m.search_count(scope, lifecycle, &filter)?),
        };
        let ids: Vec<&str> = runs.iter().map(|(run, _)| run.id.as_str()).collect();
        let jobs = m.job_rows(&ids)?;
        Ok((runs, more, total, jobs))
    })
    .await?;
    // Summaries as stored, with the points this server took and has not written yet.
    let mut summaries = match &columns.metrics {
        Pick::Only(keys) if keys.is_empty() => Default::default(),
        metrics => {
            let ids: Vec<RunId> = runs.iter().map(|(run, _)| run.id.clone()).collect();
            state.store.summaries_of(&ids, |key| metrics.keeps(key)).await?
        }
    };
    let next = more.then(|| (offset + limit as u64).to_string());
    if columns.params != Pick::All || columns.tags != Pick::All {
        for (run, _) in &mut runs {
            run.params.retain(|k, _| columns.params.keeps(k));
            run.tags.retain(|k, _| columns.tags.keeps(k));
        }
    }
    if wants_arrow(http) {
        let mut answer = arrow_runs(runs, summaries, next, total).await?;
        answer.headers_mut().insert(SERVER_TIMING, server_timing(started));
        return Ok(answer);
    }
    let list = runs
        .into_iter()
        .map(|(run, archived)| {
            let summaries = summaries.remove(run.id.as_str()).unwrap_or_default();
            let job = jobs.remove(run.id.as_str()).map(wire::JobBrief::from);
            wire::RunView { job, ..wire::RunView::from_owned(run, summaries, archived) }
        })
        .collect();
    let list = wire::RunList { runs: list, next_page_token: next, total };
    // Sized up front: a page of wide runs is a megabyte, and growing the buffer copies it over.
    let mut body = Vec::with_capacity(list.runs.len() * 1024 + 256);
    serde_json::to_writer(&mut body, &list).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .insert_header((SERVER_TIMING, server_timing(started)))
        .body(body))
}

/// A page of runs as an Arrow IPC stream in the runs table's layout (attributes, then `params`,
/// `tags` and `metrics` struct columns); the next page token and the total travel in headers.
async fn arrow_runs(
    runs: Vec<(Run, bool)>,
    mut summaries: std::collections::HashMap<String, BTreeMap<String, trainlog_schema::MetricSummary>>,
    next: Option<String>,
    total: Option<u64>,
) -> Result<HttpResponse> {
    let exports: Vec<trainlog_meta::RunExport> = runs
        .into_iter()
        .map(|(run, _)| {
            let summaries = summaries.remove(run.id.as_str()).unwrap_or_default();
            trainlog_meta::RunExport { run, summaries }
        })
        .collect();
    let body = web::block(move || -> Result<Vec<u8>> {
        let batch = trainlog_store::runs_record_batch(&exports)?;
        let mut buf = Vec::new();
        let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut buf, &batch.schema())
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        w.write(&batch).map_err(|e| ApiError::Internal(e.to_string()))?;
        w.finish().map_err(|e| ApiError::Internal(e.to_string()))?;
        drop(w);
        Ok(buf)
    })
    .await??;
    let mut answer = HttpResponse::Ok();
    answer.content_type(ARROW_STREAM_MEDIA_TYPE);
    if let Some(next) = next {
        answer.insert_header(("x-next-page-token", next));
    }
    if let Some(total) = total {
        answer.insert_header(("x-total-count", total.to_string()));
    }
    Ok(answer.body(body))
}

/// A project's runs, filtered and sorted.
#[utoipa::path(get, path = "/api/v1/projects/{name}/runs", tag = "runs",
    params(("name" = inline(NameText), Path, description = "The project's name."), ("filter" = Option<String>, Query, max_length = 3000, description = "e.g. `params.lr > 0.001 and status = 'finished'`."),
        ("order_by" = Option<String>, Query, max_length = 1000, description = "Comma-separated, e.g. `metrics.val/acc desc`."),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000), ("page_token" = Option<String>, Query, pattern = "^[0-9]{0,18}$"),
        ("archived" = Option<String>, Query, pattern = "^(false|true|all)$", description = "false: only active runs (the default); true: only archived runs; all: both."),
        ("columns" = Option<String>, Query, max_length = 3000, description = "Comma-separated: `params`, `tags`, `metrics` (every key of the kind) or `params.KEY`, `tags.KEY`, `metrics.KEY`; a kind not named is left out. Everything when absent."),
        ("total" = Option<bool>, Query, description = "true: answer `total`, the number of runs matched over every page (it costs a count).")),
    responses((status = 200, description = "One page of runs. With `Accept: application/vnd.apache.arrow.stream`, an Arrow IPC stream in the runs table's layout, with the next page token and the total in the `x-next-page-token` and `x-total-count` headers.",
        content((wire::RunList = "application/json"), ("application/vnd.apache.arrow.stream")))))]
pub(crate) async fn project_runs(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let pairs = query_pairs(&req)?;
    let filter = query_one(&pairs, "filter").unwrap_or("");
    check_len(
        "filter",
        "a filter in the URL (a longer one goes to POST /runs/search)",
        filter,
        MAX_QUERY_FILTER_CHARS,
    )?;
    let order_by_text: usize = pairs.iter().filter(|(k, _)| k == "order_by").map(|(_, v)| v.chars().count()).sum();
    if order_by_text > MAX_QUERY_ORDER_BY_CHARS {
        return Err(ApiError::invalid(
            "order_by",
            format!("order_by in the URL may have at most {MAX_QUERY_ORDER_BY_CHARS} characters, got {order_by_text}"),
        ));
    }
    let order_by: Vec<String> = pairs
        .iter()
        .filter(|(k, _)| k == "order_by")
        .flat_map(|(_, v)| v.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect::<Vec<_>>())
        .collect();
    let (limit, offset) = page(query_int(&pairs, "limit")?, query_one(&pairs, "page_token"))?;
    let archived = match query_one(&pairs, "archived") {
        None => wire::Archived::Active,
        Some(text) => wire::Archived::parse(text)
            .ok_or_else(|| ApiError::invalid("archived", format!("expected false, true or all, got {text:?}")))?,
    };
    let columns = match query_one(&pairs, "columns") {
        None => Columns::default(),
        Some(text) => {
            check_len("columns", "the columns in the URL", text, MAX_QUERY_FILTER_CHARS)?;
            Columns::parse(text.split(',').map(str::trim).filter(|s| !s.is_empty()), |_| "columns".to_owned())?
        }
    };
    let total = match query_one(&pairs, "total") {
        None | Some("false") => false,
        Some("true") => true,
        Some(text) => return Err(ApiError::invalid("total", format!("expected true or false, got {text:?}"))),
    };
    let search_req = SearchRequest {
        project: Some(path.into_inner()),
        filter: filter.to_owned(),
        order_by,
        limit,
        offset,
        archived,
        columns,
        total,
    };
    search(&state, &req, search_req).await
}

/// Search runs of one project or all.
#[utoipa::path(post, path = "/api/v1/runs/search", tag = "runs", request_body = wire::SearchRuns,
    responses((status = 200, description = "One page of runs.", body = wire::RunList)))]
pub(crate) async fn search_runs(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let body: wire::SearchRuns = json_body(&req, payload).await?;
    let (limit, offset) = page(body.limit, body.page_token.as_deref())?;
    let search_req = SearchRequest {
        project: body.project,
        filter: body.filter,
        order_by: body.order_by,
        limit,
        offset,
        archived: body.archived.unwrap_or_default(),
        columns: match &body.columns {
            None => Columns::default(),
            Some(items) => Columns::parse(items.iter().map(String::as_str), |i| format!("columns[{i}]"))?,
        },
        total: body.total,
    };
    search(&state, &req, search_req).await
}
