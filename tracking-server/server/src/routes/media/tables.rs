//! A run's tables: each log of a table is a part (JSON rows or an Arrow IPC stream, stored as
//! Parquet); a read joins the parts as of a step, then filters, sorts and pages the rows.

use super::wire::{ColumnView, TablePartView, TableRows, TableView};
use crate::body::{media_type, parse_json_object, read_body_within, JSON_MEDIA_TYPE, MAX_BODY_BYTES};
use crate::error::{ApiError, Result};
use crate::lookup;
use crate::query::{query_int, query_one, query_pairs};
use crate::state::{meta, State};
use crate::wire::{KeyText, RunIdText};
use actix_web::{web, HttpRequest, HttpResponse};
use std::collections::BTreeMap;
use trainlog_meta::{PartIndex, TablePartShape};
use trainlog_schema::limits::{MAX_MEDIA_ITEMS_PER_STEP, MAX_TABLE_PAGE, MAX_TABLE_ROWS};
use trainlog_schema::{MediaItem, MediaKind, MetricKey, TableMode};
use trainlog_store::media::table::{self, FilterOp, TableQuery, PARQUET_MIME};

/// Values (rows × columns) in one page of a table read as JSON.
pub const MAX_TABLE_PAGE_VALUES: usize = 1_000_000;

/// The media type of an Arrow IPC stream.
const ARROW_STREAM: &str = "application/vnd.apache.arrow.stream";

/// Whether `text` is a writer's token: 1 to 64 letters, digits, `-` or `_`.
fn is_writer_token(text: &str) -> bool {
    (1..=64).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn key_of(pairs: &[(String, String)]) -> Result<MetricKey> {
    let key = query_one(pairs, "key").ok_or_else(|| ApiError::invalid("key", "the table's key is required"))?;
    Ok(MetricKey::parse("key", key)?)
}

/// Log a part of a table: the whole table from its step on (mode `replace`), or rows that
/// follow the table so far (mode `append`, with the columns of the part before).
#[utoipa::path(post, path = "/api/v1/runs/{id}/tables", tag = "media",
    params(("id" = inline(RunIdText), Path, description = "The run's id."),
        ("key" = inline(KeyText), Query, description = "The table's key."),
        ("step" = i64, Query, minimum = 0, description = "The step it was logged at."),
        ("mode" = Option<String>, Query, pattern = "^(replace|append)$", description = "replace (the default) or append."),
        ("index" = Option<u32>, Query, minimum = 0, maximum = 999, description = "Its place among the parts at this step; sending a part again at its index replaces it. The next free index for an appended part when absent, else 0. With `writer`, the writer's own number of the part at this step instead."),
        ("writer" = Option<String>, Query, pattern = "^[A-Za-z0-9_-]{1,64}$", description = "A token that one process of the run makes for itself, sent with `index`: the part takes the next free index at its step the first time it arrives, and the same index whenever the writer sends it again (a retry), so parts of another process of the run are never replaced.")),
    request_body(content = TableRows, description = "JSON rows; or an Arrow IPC stream, sent as application/vnd.apache.arrow.stream.",
        content_type = "application/json"),
    responses((status = 200, description = "Recorded.", body = TablePartView)))]
pub(crate) async fn record_table(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let (run, project_id) = lookup::writable(&state, &req, &path).await?;
    let pairs = query_pairs(&req)?;
    let key = key_of(&pairs)?;
    let step: i64 = query_int(&pairs, "step")?.ok_or_else(|| ApiError::invalid("step", "the step is required"))?;
    if step < 0 {
        return Err(ApiError::invalid("step", "a step is 0 or more"));
    }
    let mode = query_one(&pairs, "mode").map(|m| TableMode::parse("mode", m)).transpose()?.unwrap_or_default();
    let index: Option<u32> = query_int(&pairs, "index")?;
    if index.is_some_and(|i| i as usize >= MAX_MEDIA_ITEMS_PER_STEP) {
        return Err(ApiError::invalid("index", format!("expected 0 to {}", MAX_MEDIA_ITEMS_PER_STEP - 1)));
    }
    let index = match (query_one(&pairs, "writer"), index) {
        (None, index) => PartIndex::from(index),
        (Some(writer), _) if !is_writer_token(writer) => {
            return Err(ApiError::invalid("writer", "1 to 64 letters, digits, '-' or '_'"))
        }
        (Some(writer), Some(number)) => PartIndex::Writer { writer: writer.to_owned(), number },
        (Some(_), None) => return Err(ApiError::invalid("index", "a part sent with a writer needs its index")),
    };
    let accepted = "application/json or application/vnd.apache.arrow.stream";
    let content_type = media_type(&req, accepted)?;
    // A JSON part is limited to a size its rows' limits imply before it is read, and counted as
    // it parses.
    let limit = if content_type == JSON_MEDIA_TYPE { table::MAX_PART_JSON_BYTES as usize } else { MAX_BODY_BYTES };
    let body = read_body_within(&req, payload, limit).await?;
    let batch = match content_type.as_str() {
        JSON_MEDIA_TYPE => {
            let rows: TableRows = web::block(move || parse_json_object(&body)).await??;
            let before = match mode {
                TableMode::Append => {
                    let (run, key) = (run.clone(), key.clone());
                    let parts = meta(&state, move |m| m.table_parts(&run, &key, Some(step))).await?;
                    parts.last().map(|p| p.shape.columns.clone())
                }
                TableMode::Replace => None,
            };
            web::block(move || table::from_json(&rows.columns, &rows.rows, before.as_ref())).await??
        }
        ARROW_STREAM => web::block(move || table::from_ipc(&body)).await??,
        other => {
            return Err(ApiError::UnsupportedMediaType(format!(
                "content type {other:?} is not accepted; send {accepted}"
            )))
        }
    };
    let shape = TablePartShape { mode, rows: batch.num_rows() as u64, columns: table::columns_json(&batch.schema()) };
    // Checked before its bytes are stored, so a part refused leaves no blob behind (what a race
    // with another part leaves, the store's collector of unreferenced blobs deletes).
    let checked = (run.clone(), key.clone(), shape.clone(), index.clone());
    meta(&state, move |m| m.check_table_part(&checked.0, &checked.1, step, &checked.2, &checked.3)).await?;
    let bytes = web::block(move || table::encode_part(&batch)).await??;
    let sha = trainlog_store::media::digest(&bytes);
    state.store.media().put_blob(project_id, &sha, PARQUET_MIME, bytes).await?;
    let item = MediaItem {
        key,
        step,
        index: 0,
        kind: MediaKind::Table,
        blob: sha,
        thumbnail: None,
        mime: PARQUET_MIME.into(),
        width: None,
        height: None,
        caption: None,
        boxes: vec![],
        masks: vec![],
        class_labels: BTreeMap::new(),
        timestamp_ms: trainlog_meta::now_ms(),
    };
    let view = TablePartView {
        key: item.key.to_string(),
        step,
        index: 0,
        mode: mode.as_str().into(),
        rows: shape.rows,
        blob: item.blob.to_string(),
    };
    let index = meta(&state, move |m| m.put_table_part(&run, &item, &shape, index)).await?;
    Ok(HttpResponse::Ok().json(TablePartView { index, ..view }))
}

/// The query's filter: a column, an op and a value, all three or none.
fn filter_of(pairs: &[(String, String)]) -> Result<Option<(String, FilterOp, String)>> {
    let column = query_one(pairs, "filter_column").filter(|c| !c.is_empty());
    let value = query_one(pairs, "filter_value");
    let Some(column) = column else {
        return Ok(None);
    };
    let op = FilterOp::parse("filter_op", query_one(pairs, "filter_op").unwrap_or("eq"))?;
    let value = value.ok_or_else(|| ApiError::invalid("filter_value", "a filter needs a value"))?;
    Ok(Some((column.to_owned(), op, value.to_owned())))
}

/// A table's rows as of a step: its parts joined, then filtered, sorted and paged. JSON by
/// default; `format=arrow` answers an Arrow IPC stream.
#[utoipa::path(get, path = "/api/v1/runs/{id}/tables", tag = "media",
    params(("id" = inline(RunIdText), Path, description = "The run's id."),
        ("key" = inline(KeyText), Query, description = "The table's key."),
        ("step" = Option<i64>, Query, description = "The table as of this step; the last when absent."),
        ("sort" = Option<String>, Query, max_length = 250, description = "Order the rows by this column."),
        ("order" = Option<String>, Query, pattern = "^(asc|desc)$", description = "asc (the default) or desc."),
        ("filter_column" = Option<String>, Query, max_length = 250, description = "Only rows whose value in this column passes the filter."),
        ("filter_op" = Option<String>, Query, pattern = "^(eq|ne|lt|le|gt|ge|contains)$", description = "How the value is compared; eq when absent."),
        ("filter_value" = Option<String>, Query, max_length = 1000, description = "The value compared with."),
        ("offset" = Option<u32>, Query, description = "Rows of the answer to skip."),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 10000, description = "Rows in the answer: 100 when absent for JSON, all for Arrow. A JSON page holds at most 1,000,000 values (rows × columns)."),
        ("format" = Option<String>, Query, pattern = "^(json|arrow)$", description = "json (the default) or arrow.")),
    responses((status = 200, description = "The rows.", body = TableView),
        (status = 404, description = "The run has no table under the key at or before the step.")))]
pub(crate) async fn read_table(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let (run, project_id) = lookup::readable(&state, &req, &path).await?;
    let pairs = query_pairs(&req)?;
    let key = key_of(&pairs)?;
    let step: Option<i64> = query_int(&pairs, "step")?;
    let arrow = match query_one(&pairs, "format").unwrap_or("json") {
        "json" => false,
        "arrow" => true,
        other => return Err(ApiError::invalid("format", format!("expected json or arrow, got {other:?}"))),
    };
    let descending = match query_one(&pairs, "order").unwrap_or("asc") {
        "asc" => false,
        "desc" => true,
        other => return Err(ApiError::invalid("order", format!("expected asc or desc, got {other:?}"))),
    };
    let limit: Option<usize> = query_int(&pairs, "limit")?;
    if limit.is_some_and(|l| l == 0 || l > MAX_TABLE_PAGE) {
        return Err(ApiError::invalid("limit", format!("expected 1 to {MAX_TABLE_PAGE}")));
    }
    let query = TableQuery {
        filter: filter_of(&pairs)?,
        sort: query_one(&pairs, "sort").filter(|s| !s.is_empty()).map(|s| (s.to_owned(), descending)),
        offset: query_int(&pairs, "offset")?.unwrap_or(0),
        limit: if arrow { limit } else { Some(limit.unwrap_or(100)) },
    };
    let (owned_run, owned_key) = (run.clone(), key.clone());
    let parts = meta(&state, move |m| m.table_parts(&owned_run, &owned_key, step)).await?;
    let Some(last) = parts.last() else {
        return Err(ApiError::NotFound(format!("a table {key} of run {run} at or before the step asked")));
    };
    let last_step = last.step;
    // A JSON page is as many values as its rows × the table's columns: bounded as well.
    let columns_of_table = last.shape.columns.as_array().map_or(0, Vec::len);
    if let Some(rows) = query.limit.filter(|_| !arrow) {
        if rows.saturating_mul(columns_of_table) > MAX_TABLE_PAGE_VALUES {
            return Err(ApiError::OverBudget {
                field: "limit".into(),
                reason: format!(
                    "a page of {rows} rows × {columns_of_table} columns is more than the {MAX_TABLE_PAGE_VALUES} values a JSON page may hold; ask for at most {} rows, or for format=arrow",
                    MAX_TABLE_PAGE_VALUES / columns_of_table.max(1)
                ),
                limit: MAX_TABLE_PAGE_VALUES as u64,
            });
        }
    }
    let total: u64 = parts.iter().map(|p| p.shape.rows).sum();
    if total > MAX_TABLE_ROWS as u64 {
        return Err(ApiError::invalid(
            "key",
            format!("the table holds {total} rows as of this step, more than the {MAX_TABLE_ROWS} a read joins"),
        ));
    }
    // The budget in values, from the parts' recorded shapes; the store checks it again from the
    // parts' own footers before it decodes them.
    let shapes = parts.iter().map(|p| {
        let names = p.shape.columns.as_array().into_iter().flatten().filter_map(|c| c.get("name")?.as_str());
        (p.shape.rows, names)
    });
    table::check_read_cells(table::joined_cells(shapes))?;
    let whole = state.store.media().read_table(project_id, &parts).await?;
    let (total_rows, schema) = (whole.num_rows(), whole.schema());
    let (matched, page) = web::block(move || table::select(&whole, &query)).await??;
    if arrow {
        let bytes = web::block(move || table::ipc_stream(&page)).await??;
        return Ok(HttpResponse::Ok().content_type(ARROW_STREAM).body(bytes));
    }
    let columns = schema
        .fields()
        .iter()
        .map(|f| ColumnView { name: f.name().clone(), kind: table::type_name(f.data_type()) })
        .collect();
    let offset = query_int(&pairs, "offset")?.unwrap_or(0);
    let (key, parts) = (key.to_string(), parts.len());
    // The page's rows become JSON on the blocking pool: the workers keep answering other requests.
    let body = web::block(move || {
        serde_json::to_vec(&TableView {
            key,
            step: last_step,
            parts,
            columns,
            total_rows,
            matched_rows: matched,
            offset,
            rows: table::rows_json(&page),
        })
    })
    .await?
    .map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(HttpResponse::Ok().content_type("application/json").body(body))
}
