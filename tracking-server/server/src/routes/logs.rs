//! Console logs of runs: a process's lines appended (acknowledged once in the console log), and
//! read back filtered, searched and paged, or followed as server-sent events.

use crate::body::{json_bytes_within, parse_json_object};
use crate::error::{ApiError, Result};
use crate::lookup;
use crate::query::{query_int, query_one, query_pairs};
use crate::state::{meta, State};
use crate::wire::RunIdText;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use trainlog_schema::console::{self, ConsoleLine, ConsoleStream, MAX_LINES_PER_BATCH, MAX_LINE_BYTES, MAX_NODE_LEN};
use trainlog_schema::RunId;
use trainlog_store::console::{ConsoleBatch, LineFilter, PageStart, Search};
use utoipa::{IntoParams, ToSchema};

/// The largest body of lines: a batch of short lines, or fewer long ones.
const MAX_LOGS_BODY_BYTES: usize = 16 << 20;
/// Lines one read answers at most.
const MAX_PAGE_LINES: usize = 10_000;
const DEFAULT_PAGE_LINES: usize = 1_000;
/// The longest search.
const MAX_SEARCH_CHARS: usize = 1_000;
/// How often a follow looks for new lines, and how long it lasts at most.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);
const FOLLOW_FOR: Duration = Duration::from_secs(6 * 3600);

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/runs/{id}/logs", web::post().to(append_logs));
    cfg.route("/runs/{id}/logs", web::get().to(read_logs));
}

/// This resource's operations in the API document.
#[derive(utoipa::OpenApi)]
#[openapi(paths(append_logs, read_logs))]
pub(super) struct Api;

/// Lines one process printed, in the order it printed them.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AppendLogs {
    /// The process's id, unique among the run's processes: with `seq` it makes each line
    /// recognisable, so a batch sent again is kept once.
    #[schema(max_length = 64, pattern = "^[A-Za-z0-9_-]+$")]
    pub process: String,
    #[serde(default, deserialize_with = "crate::wire::integer::optional")]
    #[schema(value_type = Option<u32>)]
    pub rank: Option<u32>,
    /// The host the process runs on.
    #[serde(default)]
    #[schema(max_length = 255)]
    pub node: Option<String>,
    /// The job's attempt the process belongs to (0 or absent outside a job).
    #[serde(default, deserialize_with = "crate::wire::integer::optional")]
    #[schema(value_type = Option<i64>, minimum = 0)]
    pub attempt: Option<i64>,
    #[schema(max_items = 10000)]
    pub lines: Vec<AppendLine>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AppendLine {
    /// The line's number within its process, from 0.
    #[serde(deserialize_with = "crate::wire::integer::required")]
    #[schema(value_type = u64)]
    pub seq: u64,
    /// When the line was printed, ms since the Unix epoch.
    #[serde(deserialize_with = "crate::wire::integer::required")]
    #[schema(value_type = i64)]
    pub time: i64,
    /// The last step the run had logged then.
    #[serde(default, deserialize_with = "crate::wire::integer::optional")]
    #[schema(value_type = Option<i64>)]
    pub step: Option<i64>,
    pub stream: StreamName,
    /// The line without its end, ANSI codes kept; at most 16 KiB and 64 bytes (a longer line is
    /// cut by the client at 16 KiB, with a mark saying how much).
    #[schema(max_length = 16448, pattern = "^[^\n]*$")]
    pub text: String,
}

/// The stream a line was printed to.
#[derive(Deserialize, ToSchema, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum StreamName {
    Stdout,
    Stderr,
}

/// How many lines were taken.
#[derive(Serialize, ToSchema)]
pub struct LinesAccepted {
    pub accepted: usize,
}

fn batch_of(body: AppendLogs) -> Result<ConsoleBatch> {
    console::parse_source("process", &body.process)?;
    let node = body.node.unwrap_or_default();
    if node.len() > MAX_NODE_LEN {
        return Err(ApiError::invalid("node", format!("longer than {MAX_NODE_LEN} bytes")));
    }
    let attempt = body.attempt.unwrap_or(0);
    if attempt < 0 {
        return Err(ApiError::invalid("attempt", "must not be negative"));
    }
    if body.lines.len() > MAX_LINES_PER_BATCH {
        return Err(ApiError::invalid("lines", format!("more than {MAX_LINES_PER_BATCH} lines in one request")));
    }
    // A cut line keeps its first MAX_LINE_BYTES and a short mark.
    let longest = MAX_LINE_BYTES + 64;
    let mut batch = ConsoleBatch::new(body.process.into(), node.into(), body.rank.unwrap_or(0), attempt);
    batch.lines.reserve(body.lines.len());
    for (i, l) in body.lines.into_iter().enumerate() {
        if l.text.len() > longest {
            return Err(ApiError::invalid(
                format!("lines[{i}].text"),
                format!("longer than {longest} bytes; cut it at {MAX_LINE_BYTES} bytes"),
            ));
        }
        if l.text.contains('\n') {
            return Err(ApiError::invalid(format!("lines[{i}].text"), "holds a line break: send one line each"));
        }
        let stream = match l.stream {
            StreamName::Stdout => ConsoleStream::Stdout,
            StreamName::Stderr => ConsoleStream::Stderr,
        };
        batch.push(l.seq, l.time, l.step, stream, &l.text);
    }
    Ok(batch)
}

/// Append a process's console lines to a run. Answered once they are in the server's
/// write-ahead log; a batch sent again (its answer lost) is kept once.
#[utoipa::path(post, path = "/api/v1/runs/{id}/logs", tag = "logs",
    params(("id" = inline(RunIdText), Path, description = "The run's id.")),
    request_body = AppendLogs,
    responses((status = 200, description = "The lines are durable.", body = LinesAccepted)))]
pub(crate) async fn append_logs(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let (id, project_id) = lookup::writable(&state, &req, &path).await?;
    let bytes = json_bytes_within(&req, payload, MAX_LOGS_BODY_BYTES).await?;
    // Thousands of lines to parse: off the executor and at a low priority, so a burst of ranks'
    // batches does not hold up the metric batches beside it.
    let batch =
        state.store.console().parse(move || parse_json_object::<AppendLogs>(&bytes).and_then(batch_of)).await??;
    let accepted = batch.lines.len();
    state.store.append_lines(&id, project_id, batch).await?;
    Ok(HttpResponse::Ok().json(LinesAccepted { accepted }))
}

/// What a read of logs may ask.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct LogsQuery {
    /// Ranks, comma-separated.
    rank: Option<String>,
    /// `stdout` or `stderr`.
    stream: Option<String>,
    attempt: Option<i64>,
    step_min: Option<i64>,
    step_max: Option<i64>,
    /// Lines printed at or after this time, ms since the Unix epoch.
    since: Option<i64>,
    until: Option<i64>,
    /// Text to find, ignoring case and ANSI colours (at most 1,000 characters).
    q: Option<String>,
    /// `true`: `q` is a regular expression.
    regex: Option<bool>,
    /// The first matching line to answer, from 0.
    offset: Option<u64>,
    /// `true`: answer the last `limit` matching lines.
    tail: Option<bool>,
    /// Start at the first matching line at or after this step.
    at_step: Option<i64>,
    /// Start after this line number (a line's `n`).
    after: Option<u64>,
    /// Lines to answer, 1 to 10,000 (1,000 by default).
    limit: Option<u32>,
    /// `true`: answer every matching line as a text file to download, each after its time (UTC),
    /// rank and stream, without ANSI codes.
    download: Option<bool>,
    /// `true`: answer as server-sent events, each new batch of lines as one `lines` event,
    /// until the run has ended and nothing came for 2 s.
    follow: Option<bool>,
}

/// A page of a run's console lines.
#[derive(Serialize, ToSchema)]
pub struct LogsPage {
    pub lines: Vec<LogLine>,
    /// Lines matching the filters, in all.
    pub matched: usize,
    /// The first answered line's place among the matching ones.
    pub offset: usize,
    /// The run's lines in all.
    pub total: usize,
    /// The ranks, attempts and streams the run's lines have.
    pub ranks: Vec<u32>,
    pub attempts: Vec<i64>,
    pub streams: Vec<&'static str>,
}

/// One console line.
#[derive(Serialize, ToSchema)]
pub struct LogLine {
    /// Its number among all the run's lines, in their order (time, rank, process).
    pub n: usize,
    /// ms since the Unix epoch.
    pub time: i64,
    pub rank: u32,
    pub node: String,
    pub attempt: i64,
    pub step: Option<i64>,
    pub stream: &'static str,
    pub text: String,
}

impl LogLine {
    fn of(n: usize, l: &ConsoleLine) -> Self {
        LogLine {
            n,
            time: l.time_ms,
            rank: l.rank,
            node: l.node.to_string(),
            attempt: l.attempt,
            step: l.step,
            stream: l.stream.as_str(),
            text: l.line.clone(),
        }
    }
}

struct Read {
    filter: LineFilter,
    start: PageStart,
    limit: usize,
    follow: bool,
    download: bool,
}

fn flag(pairs: &[(String, String)], name: &str) -> Result<bool> {
    match query_one(pairs, name) {
        None | Some("false") | Some("0") => Ok(false),
        Some("true") | Some("1") | Some("") => Ok(true),
        Some(other) => Err(ApiError::invalid(name, format!("{other:?} is not true or false"))),
    }
}

/// A count in the query: 0 to 2^63 - 1, as the API document says (0 when absent).
fn count(pairs: &[(String, String)], name: &str) -> Result<usize> {
    match query_int::<i64>(pairs, name)? {
        None => Ok(0),
        Some(n) if n < 0 => Err(ApiError::invalid(name, "must not be negative")),
        Some(n) => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
    }
}

fn read_of(pairs: &[(String, String)]) -> Result<Read> {
    let ranks = match query_one(pairs, "rank").filter(|r| !r.is_empty()) {
        None => None,
        Some(list) => Some(
            list.split(',')
                .map(|r| r.trim().parse::<u32>().map_err(|_| ApiError::invalid("rank", format!("{r:?} is not a rank"))))
                .collect::<Result<BTreeSet<u32>>>()?,
        ),
    };
    let stream =
        query_one(pairs, "stream").filter(|s| !s.is_empty()).map(|s| ConsoleStream::parse("stream", s)).transpose()?;
    // Every parameter is checked, whether or not the others make it matter.
    let regex = flag(pairs, "regex")?;
    let search = match query_one(pairs, "q").filter(|q| !q.is_empty()) {
        None => None,
        Some(q) if q.chars().count() > MAX_SEARCH_CHARS => {
            return Err(ApiError::invalid("q", format!("longer than {MAX_SEARCH_CHARS} characters")))
        }
        Some(q) if regex => Some(Search::Regex(
            regex_lite::RegexBuilder::new(q)
                .size_limit(1 << 20)
                .build()
                .map_err(|e| ApiError::invalid("q", format!("not a regular expression: {e}")))?,
        )),
        Some(q) => Some(Search::text(q)),
    };
    let filter = LineFilter {
        ranks,
        stream,
        attempt: query_int(pairs, "attempt")?,
        step_from: query_int(pairs, "step_min")?,
        step_to: query_int(pairs, "step_max")?,
        since_ms: query_int(pairs, "since")?,
        until_ms: query_int(pairs, "until")?,
        search,
    };
    let limit: usize = query_int(pairs, "limit")?.unwrap_or(DEFAULT_PAGE_LINES);
    if limit == 0 || limit > MAX_PAGE_LINES {
        return Err(ApiError::invalid("limit", format!("expected 1 to {MAX_PAGE_LINES}")));
    }
    let starts = [
        query_one(pairs, "offset").map(|_| "offset"),
        flag(pairs, "tail")?.then_some("tail"),
        query_one(pairs, "at_step").map(|_| "at_step"),
        query_one(pairs, "after").map(|_| "after"),
    ];
    let given: Vec<&str> = starts.into_iter().flatten().collect();
    if given.len() > 1 {
        return Err(ApiError::invalid(
            given[1],
            format!("give one of offset, tail, at_step and after, not {}", given.join(" and ")),
        ));
    }
    let start = match given.first().copied() {
        Some("tail") => PageStart::Tail,
        Some("at_step") => PageStart::AtStep(query_int(pairs, "at_step")?.unwrap_or(0)),
        Some("after") => PageStart::After(count(pairs, "after")?),
        _ => PageStart::Offset(count(pairs, "offset")?),
    };
    let (follow, download) = (flag(pairs, "follow")?, flag(pairs, "download")?);
    if follow && download {
        return Err(ApiError::invalid("download", "give one of follow and download"));
    }
    Ok(Read { filter, start, limit, follow, download })
}

fn page_of(lines: &[ConsoleLine], read: &Read, start: PageStart) -> LogsPage {
    let page = trainlog_store::console::page(lines, &read.filter, start, read.limit);
    let facets = trainlog_store::console::facets(lines);
    LogsPage {
        lines: page.lines.iter().map(|(n, l)| LogLine::of(*n, l)).collect(),
        matched: page.matched,
        offset: page.offset,
        total: lines.len(),
        ranks: facets.ranks.into_iter().collect(),
        attempts: facets.attempts.into_iter().collect(),
        streams: facets.streams.into_iter().collect(),
    }
}

async fn page_now(lines: Arc<Vec<ConsoleLine>>, read: Arc<Read>, start: PageStart) -> Result<LogsPage> {
    Ok(web::block(move || page_of(&lines, &read, start)).await?)
}

/// A run's console lines: filtered by rank, stream, attempt, step or time, searched, and paged;
/// or followed as they arrive (`follow=true`, server-sent events).
#[utoipa::path(get, path = "/api/v1/runs/{id}/logs", tag = "logs",
    params(("id" = inline(RunIdText), Path, description = "The run's id."), LogsQuery),
    responses((status = 200, description = "A page of lines; with `follow=true`, a `text/event-stream` of `lines` events, each a page of the lines that came since; with `download=true`, every matching line as text.",
        content((LogsPage = "application/json"), ("text/event-stream"), ("text/plain")))))]
pub(crate) async fn read_logs(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let (id, project_id) = lookup::readable(&state, &req, &path).await?;
    let read = Arc::new(read_of(&query_pairs(&req)?)?);
    let lines = state.store.console().lines(&id, project_id).await?;
    if read.download {
        return Ok(download(&id, lines, read));
    }
    if !read.follow {
        let page = page_now(lines, read.clone(), read.start).await?;
        return Ok(HttpResponse::Ok().json(page));
    }
    Ok(follow(state, id, project_id, read, lines))
}

/// Server-sent events: the first page as `read` asks (the tail by default), then every line
/// that comes after the last one sent, until the run has ended and nothing came for 2 s.
fn follow(state: State, id: RunId, project_id: i64, read: Arc<Read>, lines: Arc<Vec<ConsoleLine>>) -> HttpResponse {
    let first = match read.start {
        PageStart::Offset(0) => PageStart::Tail,
        other => other,
    };
    let started = tokio::time::Instant::now();
    let stream =
        futures::stream::unfold((Some(lines), None::<usize>, 0u32, false), move |(lines, last, quiet, done)| {
            let (state, id, read) = (state.clone(), id.clone(), read.clone());
            async move {
                if done || started.elapsed() > FOLLOW_FOR {
                    return None;
                }
                let mut quiet = quiet;
                let mut last = last;
                let mut lines = lines;
                loop {
                    let current = match lines.take() {
                        Some(l) => l,
                        None => {
                            tokio::time::sleep(FOLLOW_EVERY).await;
                            match state.store.console().lines(&id, project_id).await {
                                Ok(l) => l,
                                Err(e) => return Some((Ok(event("error", &e.to_string())), (None, last, quiet, true))),
                            }
                        }
                    };
                    let start = last.map_or(first, PageStart::After);
                    let page = match page_now(current, read.clone(), start).await {
                        Ok(p) => p,
                        Err(e) => return Some((Ok(event("error", &e.to_string())), (None, last, quiet, true))),
                    };
                    if let Some(l) = page.lines.last() {
                        last = Some(l.n);
                    } else if last.is_none() {
                        last = Some(page.total.saturating_sub(1)).filter(|_| page.total > 0);
                    }
                    if !page.lines.is_empty() || quiet == 0 {
                        let json = serde_json::to_string(&page).unwrap_or_default();
                        return Some((Ok::<_, actix_web::Error>(event("lines", &json)), (None, last, 1, false)));
                    }
                    quiet += 1;
                    // After 2 s of nothing a run that has ended closes the stream; every 10 s a
                    // comment keeps proxies from closing it.
                    if quiet.is_multiple_of(4) {
                        let id = id.clone();
                        let ended =
                            meta(&state, move |m| m.run(&id)).await.map(|r| r.status.is_terminal()).unwrap_or(true);
                        if ended {
                            return Some((Ok(event("end", "{}")), (None, last, quiet, true)));
                        }
                    }
                    if quiet.is_multiple_of(20) {
                        return Some((Ok(web::Bytes::from_static(b": still here\n\n")), (None, last, quiet, false)));
                    }
                }
            }
        });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("cache-control", "no-cache"))
        .insert_header(("x-accel-buffering", "no"))
        .streaming(stream)
}

/// Every matching line as text, written as it is read: `2026-01-02T03:04:05.678Z rank 2 stderr | text`.
fn download(id: &RunId, lines: Arc<Vec<ConsoleLine>>, read: Arc<Read>) -> HttpResponse {
    let mut response = crate::respond::streamed("text/plain; charset=utf-8", move |out| {
        let format =
            time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
        for l in lines.iter().filter(|l| read.filter.keeps(l)) {
            let at = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(l.time_ms) * 1_000_000)
                .ok()
                .and_then(|t| t.format(&format).ok())
                .unwrap_or_default();
            let text = trainlog_store::console::query::strip_ansi(&l.line);
            writeln!(out, "{at} rank {} {} | {text}", l.rank, l.stream.as_str())?;
        }
        Ok(())
    });
    if let Ok(value) = format!("attachment; filename=\"{id}-logs.txt\"").parse() {
        response.headers_mut().insert(actix_web::http::header::CONTENT_DISPOSITION, value);
    }
    response
}

fn event(name: &str, data: &str) -> web::Bytes {
    web::Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}
