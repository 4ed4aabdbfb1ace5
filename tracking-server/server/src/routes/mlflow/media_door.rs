//! What MLflow's clients log as artifacts that is media to trainlog: `mlflow.log_image(key=,
//! step=)` images (`images/{key}+step+{step}+timestamp+{ms}+{uuid}.png`, `/` in the key written
//! `~`), `log_table` tables (JSON with `columns` and `data`), and `log_text` / `log_dict` text.
//! The artifact is stored first; these are recorded beside it.

use crate::body::UploadRules;
use crate::error::{ApiError, Result};
use crate::state::{meta, State};
use futures::StreamExt;
use std::collections::BTreeMap;
use trainlog_meta::TablePartShape;
use trainlog_schema::limits::MAX_MEDIA_ITEM_BYTES;
use trainlog_schema::{ArtifactPath, MediaItem, MediaKind, MetricKey, RunId, TableMode};
use trainlog_store::media::table;

/// Text files larger than this stay artifacts only.
const MAX_TEXT_BYTES: u64 = 1 << 20;

/// What an uploaded artifact is to the media store.
#[derive(Debug, PartialEq)]
enum Door {
    Image {
        key: String,
        step: i64,
        timestamp_ms: i64,
    },
    /// A JSON file that may be a table (`log_table`) or else text (`log_dict`).
    Json,
    Text,
}

/// MLflow's image file name: `{key}{sep}step{sep}{step}{sep}timestamp{sep}{ms}{sep}{uuid}.png`,
/// with `+` as the separator and `~` for a `/` in the key (MLflow 3), or `%` and `#` (MLflow 2).
fn image_name(name: &str) -> Option<(String, i64, i64)> {
    let stem = name.strip_suffix(".png")?;
    let sep = ['+', '%'].into_iter().find(|s| stem.contains(&format!("{s}step{s}")))?;
    let parts: Vec<&str> = stem.split(sep).collect();
    match parts.as_slice() {
        [key, "step", step, "timestamp", ms, _uuid] => {
            let slash = if sep == '+' { '~' } else { '#' };
            Some((key.replace(slash, "/"), step.parse().ok()?, ms.parse().ok()?))
        }
        _ => None,
    }
}

fn door(path: &str, size: u64) -> Option<Door> {
    if let Some(name) = path.strip_prefix("images/") {
        return image_name(name)
            .filter(|_| size <= MAX_MEDIA_ITEM_BYTES)
            .map(|(key, step, timestamp_ms)| Door::Image { key, step, timestamp_ms });
    }
    let ext = path.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase())?;
    match ext.as_str() {
        "json" if size <= table::MAX_PART_JSON_BYTES => Some(Door::Json),
        "txt" | "md" | "log" | "yaml" | "yml" | "json" if size <= MAX_TEXT_BYTES => Some(Door::Text),
        _ => None,
    }
}

/// What an upload through MLflow's artifact proxy must be, by its path: an image the door records
/// is a PNG (its header checked from the first bytes) of at most the native media routes'
/// `MAX_MEDIA_ITEM_BYTES`; other artifacts are any bytes.
pub(crate) fn upload_rules(path: &ArtifactPath) -> UploadRules {
    match door(path.as_str(), 0) {
        Some(Door::Image { .. }) => {
            UploadRules { limit: Some(MAX_MEDIA_ITEM_BYTES), head: PNG_HEADER_BYTES, check: Some(png_header) }
        }
        _ => UploadRules::ANY,
    }
}

/// The bytes of a PNG's signature and its IHDR chunk's width and height.
const PNG_HEADER_BYTES: usize = 24;

/// Refuses bytes that do not start as a PNG does.
fn png_header(head: &[u8]) -> Result<()> {
    match png_size(head) {
        Some(_) => Ok(()),
        None => Err(ApiError::invalid(
            "body",
            "an image logged with mlflow.log_image (images/KEY+step+N+timestamp+MS+ID.png) must be a PNG: its first bytes are not a PNG header",
        )),
    }
}

/// A PNG's width and height, from its header.
fn png_size(bytes: &[u8]) -> Option<(u32, u32)> {
    if bytes.len() < 24 || &bytes[..8] != b"\x89PNG\r\n\x1a\n" || &bytes[12..16] != b"IHDR" {
        return None;
    }
    let be = |at: usize| u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    Some((be(16), be(20)))
}

fn item(
    key: MetricKey,
    step: i64,
    kind: MediaKind,
    blob: trainlog_schema::Sha256,
    mime: &str,
    timestamp_ms: i64,
) -> MediaItem {
    MediaItem {
        key,
        step,
        index: 0,
        kind,
        blob,
        thumbnail: None,
        mime: mime.into(),
        width: None,
        height: None,
        caption: None,
        boxes: vec![],
        masks: vec![],
        class_labels: BTreeMap::new(),
        timestamp_ms,
    }
}

/// After an artifact of `run` was stored through MLflow's artifact proxy: records it as media
/// when it is an image logged with a key and step, a table or a text file. A failure to store
/// or record is answered (the client sends the artifact again); a file that is not what its
/// name says stays an artifact only.
pub(crate) async fn record(state: &State, run: &RunId, project_id: i64, path: &ArtifactPath, size: u64) -> Result<()> {
    let Some(door) = door(path.as_str(), size) else {
        return Ok(());
    };
    let location = trainlog_store::ArtifactStore::location(project_id, run, path)?;
    let (_, mut body) = state.store.artifacts().download(&location).await?;
    let mut bytes = Vec::with_capacity(size as usize);
    while let Some(chunk) = body.next().await {
        bytes.extend_from_slice(&chunk?);
    }
    let media = state.store.media();
    let now = trainlog_meta::now_ms();
    match door {
        Door::Image { key, step, timestamp_ms } => {
            let Ok(key) = MetricKey::parse("key", &key) else { return Ok(()) };
            let Some((width, height)) = png_size(&bytes) else { return Ok(()) };
            let sha = trainlog_store::media::digest(&bytes);
            media.put_blob(project_id, &sha, "image/png", bytes.into()).await?;
            let mut image = item(key, step, MediaKind::Image, sha, "image/png", timestamp_ms);
            (image.width, image.height) = (Some(width), Some(height));
            let run = run.clone();
            meta(state, move |m| m.add_media_item(&run, &image)).await?;
        }
        Door::Json | Door::Text => {
            let Ok(key) = MetricKey::parse("key", path.as_str()) else { return Ok(()) };
            let (rows, bytes) =
                if door == Door::Json { web_block(move || (table_rows(&bytes), bytes)).await? } else { (None, bytes) };
            if let Some((columns, rows)) = rows {
                let Ok(batch) = web_block(move || table::from_json(&columns, &rows, None)).await? else {
                    return Ok(());
                };
                let shape = TablePartShape {
                    mode: TableMode::Replace,
                    rows: batch.num_rows() as u64,
                    columns: table::columns_json(&batch.schema()),
                };
                let encoded = web_block(move || table::encode_part(&batch)).await??;
                let sha = trainlog_store::media::digest(&encoded);
                media.put_blob(project_id, &sha, table::PARQUET_MIME, encoded).await?;
                let part = item(key, 0, MediaKind::Table, sha, table::PARQUET_MIME, now);
                let run = run.clone();
                meta(state, move |m| m.put_table_part(&run, &part, &shape, Some(0))).await?;
            } else if size <= MAX_TEXT_BYTES && std::str::from_utf8(&bytes).is_ok() {
                let sha = trainlog_store::media::digest(&bytes);
                let mime = "text/plain; charset=utf-8";
                media.put_blob(project_id, &sha, mime, bytes.into()).await?;
                let text = item(key, 0, MediaKind::Text, sha, mime, now);
                let run = run.clone();
                meta(state, move |m| m.put_media_items(&run, std::slice::from_ref(&text))).await?;
            }
        }
    }
    Ok(())
}

/// `log_table`'s JSON (pandas' split orient): `columns` and `data`, rows of a value per column,
/// counted as they parse against a table part's limits (past them, the file stays text).
fn table_rows(bytes: &[u8]) -> Option<(Vec<String>, Vec<Vec<serde_json::Value>>)> {
    #[derive(serde::Deserialize)]
    struct Split {
        #[serde(deserialize_with = "crate::routes::media::rows::bounded_columns")]
        columns: Vec<String>,
        #[serde(deserialize_with = "crate::routes::media::rows::bounded_rows")]
        data: Vec<Vec<serde_json::Value>>,
    }
    let split: Split = serde_json::from_slice(bytes).ok()?;
    Some((split.columns, split.data))
}

async fn web_block<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    actix_web::web::block(f).await.map_err(|e| ApiError::Internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mlflow_image_names_give_their_key_and_step() {
        assert_eq!(
            image_name("val~samples+step+12+timestamp+1700000000000+0f3c.png"),
            Some(("val/samples".into(), 12, 1_700_000_000_000))
        );
        assert_eq!(image_name("a#k%step%3%timestamp%5%u.png"), Some(("a/k".into(), 3, 5)));
        assert_eq!(image_name("k+step+3+timestamp+5+u+compressed.webp"), None);
        assert_eq!(image_name("plain.png"), None);
        assert_eq!(door("table.json", 10), Some(Door::Json));
        assert_eq!(door("notes.txt", 10), Some(Door::Text));
        assert_eq!(door("model.bin", 10), None);
        assert_eq!(door("notes.txt", MAX_TEXT_BYTES + 1), None);
    }
}
