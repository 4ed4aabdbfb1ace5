//! A run's media: blobs uploaded by their SHA-256, items recorded over them, and reads by key
//! and step (paged), with blobs served as immutable.

mod counted;
mod histograms;
pub(crate) mod rows;
mod tables;
mod wire;

use crate::body::read_body;
use crate::error::{ApiError, Result};
use crate::lookup;
use crate::query::{query_int, query_one, query_pairs};
use crate::state::{meta, State};
use crate::wire::{KeyText, RunIdText};
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use futures::StreamExt;
use trainlog_meta::MediaQuery;
use trainlog_schema::limits::MAX_MEDIA_PAGE;
use trainlog_schema::{parse_mime, MetricKey, RunId, Sha256};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/runs/{id}/media", web::post().to(record_media))
        .route("/runs/{id}/media", web::get().to(list_media))
        .route("/runs/{id}/media/keys", web::get().to(media_keys))
        .route("/runs/{id}/media/steps", web::get().to(media_steps))
        .route("/runs/{id}/media/blobs/{sha256}", web::put().to(put_blob))
        .route("/runs/{id}/media/blobs/{sha256}", web::get().to(get_blob))
        .route("/runs/{id}/histograms", web::post().to(histograms::record_histograms))
        .route("/runs/{id}/histograms", web::get().to(histograms::list_histograms))
        .route("/runs/{id}/tables", web::post().to(tables::record_table))
        .route("/runs/{id}/tables", web::get().to(tables::read_table));
}

/// This resource's operations in the API document.
#[derive(utoipa::OpenApi)]
#[openapi(paths(
    record_media,
    list_media,
    media_keys,
    media_steps,
    put_blob,
    get_blob,
    histograms::record_histograms,
    histograms::list_histograms,
    tables::record_table,
    tables::read_table
))]
pub(super) struct Api;

/// The blob a path names, once its text is a SHA-256; another text is a blob not found.
fn blob_sha(text: &str) -> Result<Sha256> {
    Sha256::parse("sha256", text).map_err(|_| ApiError::NotFound(format!("media blob {text:?}")))
}

/// Upload a blob of media bytes by its SHA-256. A blob the run's project already holds is not
/// written again.
#[utoipa::path(put, path = "/api/v1/runs/{id}/media/blobs/{sha256}", tag = "media",
    params(("id" = inline(RunIdText), Path, description = "The run's id."),
        ("sha256" = String, Path, pattern = "^[0-9a-f]{64}$", description = "The SHA-256 of the body, in hex.")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "The bytes, at most 64 MiB; `Content-Type` is their media type (application/octet-stream when absent)."),
    responses((status = 201, description = "Stored.", body = wire::BlobView),
        (status = 200, description = "Already stored.", body = wire::BlobView)))]
pub(crate) async fn put_blob(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let (id, sha) = path.into_inner();
    let (_, project_id) = lookup::writable(&state, &req, &id).await?;
    let sha = Sha256::parse("sha256", &sha)?;
    let mime = match req.headers().get(header::CONTENT_TYPE) {
        None => "application/octet-stream".to_owned(),
        Some(v) => parse_mime("Content-Type", v.to_str().map_err(|_| ApiError::invalid("Content-Type", "not text"))?)?,
    };
    let bytes = read_body(&req, payload).await?;
    let actual = trainlog_store::media::digest(&bytes);
    if actual != sha {
        return Err(ApiError::invalid(
            "sha256",
            format!("the body's SHA-256 is {actual}, not the {sha} the path names; nothing was stored"),
        ));
    }
    let (row, created) = state.store.media().put_blob(project_id, &sha, &mime, bytes).await?;
    let view = wire::BlobView::new(&row);
    Ok(if created { HttpResponse::Created().json(view) } else { HttpResponse::Ok().json(view) })
}

/// The largest body recording media items. An item's own limits (10,000 boxes, each with a
/// label of 1,000 characters) imply no useful size for 1,000 of them; 16 MiB holds the SDK's
/// batch of 64 items with 1,000 labelled boxes each (some 150 bytes a box), and at most some
/// 400,000 boxes (42 bytes the least a box takes).
pub(crate) const MAX_RECORD_MEDIA_BYTES: usize = 16 << 20;

/// Parses a JSON object body on the blocking pool when it is large, in place when small.
pub(crate) async fn parse_off_workers<T: serde::de::DeserializeOwned + Send + 'static>(bytes: web::Bytes) -> Result<T> {
    if bytes.len() <= 64 << 10 {
        return crate::body::parse_json_object(&bytes);
    }
    web::block(move || crate::body::parse_json_object(&bytes)).await?
}

/// Record media items over uploaded blobs, all or none. The body is at most 16 MiB.
#[utoipa::path(post, path = "/api/v1/runs/{id}/media", tag = "media",
    params(("id" = inline(RunIdText), Path, description = "The run's id.")),
    request_body = wire::RecordMedia,
    responses((status = 200, description = "Recorded.", body = wire::Recorded)))]
pub(crate) async fn record_media(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let (run, _) = lookup::writable(&state, &req, &path).await?;
    // Within its size cap, its items, boxes, masks and class labels counted as they parse.
    let bytes = crate::body::json_bytes_within(&req, payload, MAX_RECORD_MEDIA_BYTES).await?;
    let body: wire::RecordMedia = parse_off_workers(bytes).await?;
    let now = trainlog_meta::now_ms();
    let items = body
        .items
        .into_iter()
        .enumerate()
        .map(|(i, item)| item.parse(&format!("items[{i}]"), now))
        .collect::<Result<Vec<_>>>()?;
    let recorded = meta(&state, move |m| m.put_media_items(&run, &items)).await?;
    Ok(HttpResponse::Ok().json(wire::Recorded { recorded }))
}

/// `{step}.{index}.{key}`: where a page of media ends.
fn page_token(item: &trainlog_schema::MediaItem) -> String {
    format!("{}.{}.{}", item.step, item.index, item.key)
}

fn parse_page_token(token: &str) -> Result<(String, i64, i64)> {
    let bad = || ApiError::invalid("page_token", "not a page token from this server");
    let mut parts = token.splitn(3, '.');
    let step = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    let index = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    let key = parts.next().ok_or_else(bad)?;
    Ok((key.to_owned(), step, index))
}

/// A run's media items by key, step and index, a page at a time.
#[utoipa::path(get, path = "/api/v1/runs/{id}/media", tag = "media",
    params(("id" = inline(RunIdText), Path, description = "The run's id."),
        ("key" = Option<String>, Query, min_length = 1, max_length = 250, description = "Only this key's items."),
        ("step_min" = Option<i64>, Query, description = "Only items at this step or later."),
        ("step_max" = Option<i64>, Query, description = "Only items at this step or earlier."),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "Items in a page; 100 when absent."),
        ("page_token" = Option<String>, Query, pattern = r"^([0-9]{1,18}\.[0-9]{1,3}\..{1,250})?$", description = "The `next_page_token` of the page before.")),
    responses((status = 200, description = "A page of items.", body = wire::MediaPage)))]
pub(crate) async fn list_media(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let (run, _) = lookup::readable(&state, &req, &path).await?;
    let pairs = query_pairs(&req)?;
    let key = query_one(&pairs, "key").map(|k| MetricKey::parse("key", k)).transpose()?;
    let limit: usize = query_int(&pairs, "limit")?.unwrap_or(100);
    if limit == 0 || limit > MAX_MEDIA_PAGE {
        return Err(ApiError::invalid("limit", format!("expected 1 to {MAX_MEDIA_PAGE}, got {limit}")));
    }
    let after = query_one(&pairs, "page_token").filter(|t| !t.is_empty()).map(parse_page_token).transpose()?;
    let query = MediaQuery {
        key,
        step_min: query_int(&pairs, "step_min")?,
        step_max: query_int(&pairs, "step_max")?,
        after,
        // One more than a page says whether another follows.
        limit: limit + 1,
    };
    let owned = run.clone();
    let mut rows = meta(&state, move |m| m.media_items(&owned, &query)).await?;
    let more = rows.len() > limit;
    rows.truncate(limit);
    let next_page_token = if more { rows.last().map(|r| page_token(&r.item)) } else { None };
    let items = rows.iter().map(|r| wire::MediaItemView::new(&run, r)).collect();
    Ok(HttpResponse::Ok().json(wire::MediaPage { items, next_page_token }))
}

/// The keys of a run's media, with their kind, item and step counts.
#[utoipa::path(get, path = "/api/v1/runs/{id}/media/keys", tag = "media",
    params(("id" = inline(RunIdText), Path, description = "The run's id.")),
    responses((status = 200, description = "The keys, by name.", body = wire::MediaKeys)))]
pub(crate) async fn media_keys(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let (run, _) = lookup::readable(&state, &req, &path).await?;
    let keys = meta(&state, move |m| m.media_keys(&run)).await?;
    Ok(HttpResponse::Ok().json(wire::MediaKeys { keys: keys.iter().map(wire::MediaKeyView::new).collect() }))
}

/// The steps at which a run logged media under a key: what a step slider moves over.
#[utoipa::path(get, path = "/api/v1/runs/{id}/media/steps", tag = "media",
    params(("id" = inline(RunIdText), Path, description = "The run's id."),
        ("key" = inline(KeyText), Query, description = "The media key.")),
    responses((status = 200, description = "The steps.", body = wire::MediaSteps)))]
pub(crate) async fn media_steps(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let (run, _) = lookup::readable(&state, &req, &path).await?;
    let pairs = query_pairs(&req)?;
    let key = query_one(&pairs, "key").ok_or_else(|| ApiError::invalid("key", "the media key is required"))?;
    let key = MetricKey::parse("key", key)?;
    let steps = meta(&state, move |m| m.media_steps(&run, &key)).await?;
    Ok(HttpResponse::Ok().json(wire::MediaSteps { steps }))
}

/// Media types a browser may show in place; any other blob is served as an attachment.
fn shown_inline(essence: &str) -> bool {
    matches!(
        essence,
        "image/png" | "image/jpeg" | "image/gif" | "image/webp" | "image/bmp" | "image/avif" | "text/plain"
    ) || essence.starts_with("audio/")
        || essence.starts_with("video/")
}

/// Read a blob that one of the run's items names. Blobs never change: the answer carries an
/// `ETag` (the SHA-256) and may be cached for a year; `If-None-Match` answers 304.
#[utoipa::path(get, path = "/api/v1/runs/{id}/media/blobs/{sha256}", tag = "media",
    params(("id" = inline(RunIdText), Path, description = "The run's id."),
        ("sha256" = String, Path, pattern = "^[0-9a-f]{64}$", description = "The blob's SHA-256.")),
    responses((status = 200, description = "The bytes, with their media type.", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 304, description = "Not modified: the `ETag` given in `If-None-Match` is this blob's.")))]
pub(crate) async fn get_blob(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let (id, sha) = path.into_inner();
    let (run, project_id): (RunId, i64) = lookup::readable(&state, &req, &id).await?;
    let sha = blob_sha(&sha)?;
    let etag = format!("\"{sha}\"");
    let owned = (run.clone(), sha.clone());
    let blob = meta(&state, move |m| m.run_media_blob(&owned.0, &owned.1))
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("media blob {sha} of run {run}")))?;
    let cache = (header::CACHE_CONTROL, "private, max-age=31536000, immutable");
    let matches = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    if matches {
        return Ok(HttpResponse::NotModified().insert_header((header::ETAG, etag)).insert_header(cache).finish());
    }
    let (size, body) = match state.store.media().read_blob(project_id, &sha).await {
        Ok(found) => found,
        Err(trainlog_store::Error::ObjectStore(object_store::Error::NotFound { .. })) => {
            return Err(ApiError::NotFound(format!("the bytes of media blob {sha} are missing from the store")))
        }
        Err(e) => return Err(e.into()),
    };
    // A media type stored before types were checked strictly is served as plain bytes.
    let essence = trainlog_schema::mime_essence(&blob.mime);
    let mut answer = HttpResponse::Ok();
    answer
        .content_type(if essence.is_some() { blob.mime.as_str() } else { "application/octet-stream" })
        .insert_header((header::ETAG, etag))
        .insert_header(cache)
        // Bytes from a client are never a page of this origin, whatever their media type says.
        .insert_header((header::CONTENT_SECURITY_POLICY, "sandbox; default-src 'none'"));
    if !essence.as_deref().is_some_and(shown_inline) {
        answer.insert_header((header::CONTENT_DISPOSITION, "attachment"));
    }
    Ok(answer.no_chunking(size).streaming(body.map(|chunk| chunk.map_err(|e| ApiError::Internal(e.to_string())))))
}
