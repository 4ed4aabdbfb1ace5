//! The record of each run's media: the blobs of each project (content-addressed bytes in the
//! object store), the items that name them, which run names which blob, the runs whose
//! Parquet index of media is behind, and the blobs no run names, to collect.
//!
//! `media_refs` holds exactly the blobs each run's items name: an item replaced at its
//! `(key, step, index)` takes its blobs' rows with it when no other item of the run names them.
//! A blob no run names, whose bytes were last sent `min_age` ago or earlier, is moved to
//! `media_unreferenced`, where its object waits to be deleted; while it waits, no upload records
//! the blob again (it is answered 503 and sent again), so an object is never deleted after an
//! upload wrote it. On PostgreSQL, the rows of the blobs an item names are locked for share
//! while it is recorded and for update while a blob is moved, so neither misses the other.

use crate::db::{vals, Db, Dialect, Row};
use crate::{not_found, now_ms, Error, MetaStore, Result};
use serde_json::{json, Map, Value as Json};
use std::collections::{BTreeMap, HashSet};
use trainlog_schema::limits::MAX_MEDIA_ITEMS_PER_STEP;
use trainlog_schema::{BoxDomain, MediaBox, MediaItem, MediaKind, MediaMask, MetricKey, RunId, Sha256, TableMode};

/// A blob as recorded: its size and media type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobRow {
    pub sha256: Sha256,
    pub size: u64,
    pub mime: String,
}

/// A recorded item with the size of its bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct MediaRow {
    pub item: MediaItem,
    pub size: u64,
}

/// What a run holds under one media key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaKeyRow {
    pub key: String,
    pub kind: MediaKind,
    pub items: u64,
    pub steps: u64,
    pub first_step: i64,
    pub last_step: i64,
}

/// Which items a listing answers: one key or all, a step range, after a position (paging).
#[derive(Debug, Clone, Default)]
pub struct MediaQuery {
    pub key: Option<MetricKey>,
    pub step_min: Option<i64>,
    pub step_max: Option<i64>,
    /// Items strictly after this `(key, step, index)`.
    pub after: Option<(String, i64, i64)>,
    pub limit: usize,
}

/// How a table part joins the table, how many rows it holds, and its columns as
/// `[{"name", "type"}]`.
#[derive(Debug, Clone, PartialEq)]
pub struct TablePartShape {
    pub mode: TableMode,
    pub rows: u64,
    pub columns: Json,
}

/// A part of a table: where it was logged, the blob of its Parquet bytes, and its shape.
#[derive(Debug, Clone, PartialEq)]
pub struct TablePart {
    pub step: i64,
    pub index: u32,
    pub blob: Sha256,
    pub shape: TablePartShape,
}

/// What an upload of a blob finds: the blob recorded (its bytes are stored: nothing to write),
/// being deleted as unreferenced (send it again later), or neither (write its bytes, then record it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredBlob {
    Recorded(BlobRow),
    Deleting,
    Absent,
}

/// Where a table part goes among the parts under its key at its step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartIndex {
    /// At this index, replacing a part there.
    At(u32),
    /// The next free index for an appended part, 0 for a replacing one.
    Default,
    /// A writer's own number of the part (a writer is one process of the run, named by a token
    /// it makes): the next free index the first time the part arrives, the same index whenever
    /// it is sent again. Another writer's parts are never replaced.
    Writer { writer: String, number: u32 },
}

impl From<Option<u32>> for PartIndex {
    fn from(index: Option<u32>) -> Self {
        index.map_or(PartIndex::Default, PartIndex::At)
    }
}

/// A run whose Parquet index is behind its rows, with the change count its rows were read at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirtyIndex {
    pub run: RunId,
    pub project_id: i64,
    pub changes: i64,
}

const ITEM_COLUMNS: &str =
    "key, step, idx, kind, blob, thumbnail, mime, size, width, height, caption, detail, timestamp_ms";

/// Boxes, masks and class labels as the JSON of the `detail` column.
fn detail_json(item: &MediaItem, table: Option<&TablePartShape>) -> String {
    let boxes: Vec<Json> = item
        .boxes
        .iter()
        .map(|b| {
            json!({"group": b.group, "x_min": b.x_min, "y_min": b.y_min, "x_max": b.x_max, "y_max": b.y_max,
                   "domain": b.domain.as_str(), "class_id": b.class_id, "label": b.label, "score": b.score})
        })
        .collect();
    let masks: Vec<Json> = item.masks.iter().map(|m| json!({"group": m.group, "blob": m.blob.as_str()})).collect();
    let labels: Map<String, Json> =
        item.class_labels.iter().map(|(id, label)| (id.to_string(), Json::from(label.as_str()))).collect();
    let mut detail = json!({"boxes": boxes, "masks": masks, "class_labels": labels});
    if let Some(t) = table {
        detail["table"] = json!({"mode": t.mode.as_str(), "rows": t.rows, "columns": t.columns});
    }
    detail.to_string()
}

/// A table part's mode, row count and columns (`[{"name", "type"}]`) as its `detail` holds them.
fn parse_table_detail(text: &str) -> Result<TablePartShape> {
    let detail: Json = serde_json::from_str(text).map_err(|_| corrupt("detail"))?;
    let table = detail.get("table").ok_or_else(|| corrupt("table"))?;
    Ok(TablePartShape {
        mode: TableMode::parse("mode", table.get("mode").and_then(Json::as_str).unwrap_or_default())
            .map_err(|_| corrupt("table mode"))?,
        rows: table.get("rows").and_then(Json::as_u64).ok_or_else(|| corrupt("table rows"))?,
        columns: table.get("columns").cloned().unwrap_or(Json::Null),
    })
}

fn corrupt(what: &str) -> Error {
    Error::Corrupt(format!("a media item's {what} is not as written"))
}

/// Boxes, masks and class labels, as the `detail` column holds them.
type Detail = (Vec<MediaBox>, Vec<MediaMask>, BTreeMap<i64, String>);

/// The `detail` column read back.
fn parse_detail(text: &str) -> Result<Detail> {
    let detail: Json = serde_json::from_str(text).map_err(|_| corrupt("detail"))?;
    let text_of = |v: &Json, k: &str| v.get(k).and_then(Json::as_str).map(str::to_owned);
    let num = |v: &Json, k: &str| v.get(k).and_then(Json::as_f64).ok_or_else(|| corrupt("box"));
    let mut boxes = Vec::new();
    for b in detail.get("boxes").and_then(Json::as_array).into_iter().flatten() {
        boxes.push(MediaBox {
            group: text_of(b, "group").unwrap_or_default(),
            x_min: num(b, "x_min")?,
            y_min: num(b, "y_min")?,
            x_max: num(b, "x_max")?,
            y_max: num(b, "y_max")?,
            domain: BoxDomain::parse("domain", b.get("domain").and_then(Json::as_str).unwrap_or("fraction"))?,
            class_id: b.get("class_id").and_then(Json::as_i64),
            label: text_of(b, "label"),
            score: b.get("score").and_then(Json::as_f64),
        });
    }
    let mut masks = Vec::new();
    for m in detail.get("masks").and_then(Json::as_array).into_iter().flatten() {
        let blob = text_of(m, "blob").ok_or_else(|| corrupt("mask"))?;
        masks.push(MediaMask { group: text_of(m, "group").unwrap_or_default(), blob: Sha256::from_trusted(blob) });
    }
    let mut labels = BTreeMap::new();
    for (id, label) in detail.get("class_labels").and_then(Json::as_object).into_iter().flatten() {
        let id: i64 = id.parse().map_err(|_| corrupt("class labels"))?;
        labels.insert(id, label.as_str().unwrap_or_default().to_owned());
    }
    Ok((boxes, masks, labels))
}

/// A row of `ITEM_COLUMNS` as a `MediaRow`.
fn media_row(r: &Row) -> Result<MediaRow> {
    let (boxes, masks, class_labels) = parse_detail(&r.get::<String>(11)?)?;
    let kind: String = r.get(3)?;
    let item = MediaItem {
        key: MetricKey::from_trusted(r.get(0)?),
        step: r.get(1)?,
        index: u32::try_from(r.get::<i64>(2)?).map_err(|_| corrupt("index"))?,
        kind: MediaKind::parse("kind", &kind).map_err(|_| corrupt("kind"))?,
        blob: Sha256::from_trusted(r.get(4)?),
        thumbnail: r.get::<Option<String>>(5)?.map(Sha256::from_trusted),
        mime: r.get(6)?,
        width: r.get::<Option<i64>>(8)?.map(|w| w as u32),
        height: r.get::<Option<i64>>(9)?.map(|h| h as u32),
        caption: r.get(10)?,
        boxes,
        masks,
        class_labels,
        timestamp_ms: r.get(12)?,
    };
    Ok(MediaRow { item, size: r.get::<i64>(7)? as u64 })
}

/// The project of a run that exists and is not archived; 404 otherwise.
pub(crate) fn live_run_project(tx: &dyn Db, run: &RunId) -> Result<i64> {
    tx.row("SELECT project_id FROM runs WHERE id = ?1 AND deleted = 0", vals![run.as_str()])?
        .ok_or_else(|| not_found(format!("run {run}")))?
        .get(0)
}

/// Serializes the changes to one run's media on PostgreSQL (SQLite has one writer): which index
/// is free, and whether a replaced item's blob is still named by another item of the run.
fn lock_run_media(tx: &dyn Db, run: &RunId) -> Result<()> {
    if tx.dialect() == Dialect::Postgres {
        tx.exec("SELECT pg_advisory_xact_lock(hashtext(?1))", vals![format!("trainlog-media:{run}")])?;
    }
    Ok(())
}

/// Serializes, on PostgreSQL, recording a blob with starting to delete it.
fn lock_blob(tx: &dyn Db, project_id: i64, sha: &Sha256) -> Result<()> {
    if tx.dialect() == Dialect::Postgres {
        tx.exec("SELECT pg_advisory_xact_lock(hashtext(?1))", vals![format!("trainlog-blob:{project_id}:{sha}")])?;
    }
    Ok(())
}

/// A row lock in the dialect's words, after a `SELECT` of one table (`FOR SHARE`, `FOR
/// UPDATE`); nothing on SQLite, whose one writer serializes every write.
fn row_lock(tx: &dyn Db, lock: &str) -> String {
    if tx.dialect() == Dialect::Postgres {
        format!(" {lock}")
    } else {
        String::new()
    }
}

/// Whether the blob is being deleted as unreferenced.
fn deleting(tx: &dyn Db, project_id: i64, sha: &Sha256) -> Result<bool> {
    tx.exists("SELECT 1 FROM media_unreferenced WHERE project_id = ?1 AND sha256 = ?2", vals![project_id, sha.as_str()])
}

/// A blob's row, which the transaction holds.
fn blob_row(tx: &dyn Db, project_id: i64, sha: &Sha256) -> Result<BlobRow> {
    let row = tx
        .row(
            "SELECT size, mime FROM media_blobs WHERE project_id = ?1 AND sha256 = ?2",
            vals![project_id, sha.as_str()],
        )?
        .ok_or_else(|| corrupt("blob"))?;
    Ok(BlobRow { sha256: sha.clone(), size: row.get::<i64>(0)? as u64, mime: row.get(1)? })
}

/// The blobs the item at `item`'s place names, before it is replaced.
fn blobs_at(tx: &dyn Db, run: &RunId, item: &MediaItem) -> Result<Vec<Sha256>> {
    let Some(row) = tx.row(
        "SELECT blob, thumbnail, detail FROM media_items WHERE run_id = ?1 AND key = ?2 AND step = ?3 AND idx = ?4",
        vals![run.as_str(), item.key.as_str(), item.step, i64::from(item.index)],
    )?
    else {
        return Ok(Vec::new());
    };
    let mut blobs = vec![Sha256::from_trusted(row.get(0)?)];
    blobs.extend(row.get::<Option<String>>(1)?.map(Sha256::from_trusted));
    let (_, masks, _) = parse_detail(&row.get::<String>(2)?)?;
    blobs.extend(masks.into_iter().map(|m| m.blob));
    Ok(blobs)
}

/// Drops the run's row naming `sha` unless one of its items still names it. A mask is found in
/// the detail's text: a caption or label holding the same 64 hex digits only keeps a row.
fn unreference_unless_named(tx: &dyn Db, run: &RunId, sha: &Sha256) -> Result<()> {
    let named = tx.exists(
        "SELECT 1 FROM media_items WHERE run_id = ?1 AND (blob = ?2 OR thumbnail = ?2 OR detail LIKE ?3) LIMIT 1",
        vals![run.as_str(), sha.as_str(), format!("%{sha}%")],
    )?;
    if !named {
        tx.exec("DELETE FROM media_refs WHERE run_id = ?1 AND sha256 = ?2", vals![run.as_str(), sha.as_str()])?;
    }
    Ok(())
}

/// Records items of a live run (see [`MetaStore::put_media_items`]), a table part's shape
/// joining each item's detail when given, and the writer that sent it with its own number of
/// the part (None: an item placed by its index). An item replaced at its place leaves the run's
/// rows of the blobs no other item of it names.
fn insert_items(
    tx: &dyn Db,
    run: &RunId,
    items: &[MediaItem],
    table: Option<&TablePartShape>,
    writer: Option<(&str, u32)>,
) -> Result<usize> {
    let project_id = live_run_project(tx, run)?;
    lock_run_media(tx, run)?;
    for (i, item) in items.iter().enumerate() {
        let mut size = 0;
        for (which, sha) in item.blobs().enumerate() {
            let found = tx.row(
                &format!(
                    "SELECT size FROM media_blobs WHERE project_id = ?1 AND sha256 = ?2{}",
                    row_lock(tx, "FOR SHARE")
                ),
                vals![project_id, sha.as_str()],
            )?;
            let Some(found) = found else {
                let field = match which {
                    0 => format!("items[{i}].blob"),
                    1 if item.thumbnail.is_some() => format!("items[{i}].thumbnail"),
                    _ => format!("items[{i}].masks"),
                };
                return Err(Error::Conflict {
                    field,
                    reason: format!(
                        "blob {sha} has not been uploaded; PUT its bytes to /api/v1/runs/{run}/media/blobs/{sha} first"
                    ),
                });
            };
            if which == 0 {
                size = found.get::<i64>(0)?;
            }
            tx.exec(
                "INSERT INTO media_refs (run_id, sha256, project_id) VALUES (?1, ?2, ?3)
                     ON CONFLICT (run_id, sha256) DO NOTHING",
                vals![run.as_str(), sha.as_str(), project_id],
            )?;
        }
        let replaced = blobs_at(tx, run, item)?;
        tx.exec(
            &format!(
                "INSERT INTO media_items (run_id, {ITEM_COLUMNS}, writer, writer_idx)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)
                     ON CONFLICT (run_id, key, step, idx) DO UPDATE SET kind = excluded.kind, blob = excluded.blob,
                       thumbnail = excluded.thumbnail, mime = excluded.mime, size = excluded.size,
                       width = excluded.width, height = excluded.height, caption = excluded.caption,
                       detail = excluded.detail, timestamp_ms = excluded.timestamp_ms,
                       writer = excluded.writer, writer_idx = excluded.writer_idx"
            ),
            vals![
                run.as_str(),
                item.key.as_str(),
                item.step,
                i64::from(item.index),
                item.kind.as_str(),
                item.blob.as_str(),
                item.thumbnail.as_ref().map(Sha256::as_str),
                item.mime.as_str(),
                size,
                item.width.map(i64::from),
                item.height.map(i64::from),
                item.caption.as_deref(),
                detail_json(item, table),
                item.timestamp_ms,
                writer.map(|w| w.0),
                writer.map(|w| i64::from(w.1)),
            ],
        )?;
        for sha in replaced.iter().filter(|sha| !item.blobs().any(|b| b == *sha)) {
            unreference_unless_named(tx, run, sha)?;
        }
    }
    if !items.is_empty() {
        mark_dirty(tx, run, project_id)?;
    }
    Ok(items.len())
}

/// The index a table part takes at its step (see [`PartIndex`]). Refused past the parts a step
/// holds, and for an appended part whose columns are not those of the part before it under the key.
fn place_table_part(
    db: &dyn Db,
    run: &RunId,
    key: &MetricKey,
    step: i64,
    part: &TablePartShape,
    index: &PartIndex,
) -> Result<u32> {
    let index = match (index, part.mode) {
        (PartIndex::At(i), _) => *i,
        (PartIndex::Default, TableMode::Replace) => 0,
        (PartIndex::Default, TableMode::Append) => next_index(db, run, key, step)?,
        (PartIndex::Writer { writer, number }, _) => {
            let sent = db.row(
                "SELECT idx FROM media_items WHERE run_id = ?1 AND key = ?2 AND step = ?3 AND writer = ?4
                   AND writer_idx = ?5",
                vals![run.as_str(), key.as_str(), step, writer.as_str(), i64::from(*number)],
            )?;
            match sent {
                Some(row) => u32::try_from(row.get::<i64>(0)?).map_err(|_| corrupt("index"))?,
                None => next_index(db, run, key, step)?,
            }
        }
    };
    if index as usize >= MAX_MEDIA_ITEMS_PER_STEP {
        return Err(Error::Invalid {
            field: "index".into(),
            reason: format!("a key holds at most {MAX_MEDIA_ITEMS_PER_STEP} parts at one step"),
        });
    }
    if part.mode == TableMode::Append {
        let before = db.row(
            "SELECT detail FROM media_items WHERE run_id = ?1 AND key = ?2 AND kind = 'table'
               AND (step < ?3 OR (step = ?3 AND idx < ?4)) ORDER BY step DESC, idx DESC LIMIT 1",
            vals![run.as_str(), key.as_str(), step, i64::from(index)],
        )?;
        if let Some(before) = before {
            let before = parse_table_detail(&before.get::<String>(0)?)?;
            if before.columns != part.columns {
                return Err(Error::Conflict {
                    field: "columns".into(),
                    reason: format!(
                        "an appended part has the columns of the part before it ({}), got {}",
                        before.columns, part.columns
                    ),
                });
            }
        }
    }
    Ok(index)
}

/// The index after the last one under `key` at `step` (0 for none).
fn next_index(db: &dyn Db, run: &RunId, key: &MetricKey, step: i64) -> Result<u32> {
    Ok(db
        .row(
            "SELECT COALESCE(MAX(idx) + 1, 0) FROM media_items WHERE run_id = ?1 AND key = ?2 AND step = ?3",
            vals![run.as_str(), key.as_str(), step],
        )?
        .map(|r| r.get::<i64>(0))
        .transpose()?
        .unwrap_or(0) as u32)
}

/// Marks a run's Parquet index of media as behind its rows.
pub(crate) fn mark_dirty(tx: &dyn Db, run: &RunId, project_id: i64) -> Result<()> {
    tx.exec(
        "INSERT INTO media_index_dirty (run_id, project_id, since_ms, changes) VALUES (?1, ?2, ?3, 1)
         ON CONFLICT (run_id) DO UPDATE SET changes = media_index_dirty.changes + 1",
        vals![run.as_str(), project_id, now_ms()],
    )?;
    Ok(())
}

impl MetaStore {
    /// A blob of the project, if its bytes were stored.
    pub fn media_blob(&self, project_id: i64, sha: &Sha256) -> Result<Option<BlobRow>> {
        self.read(|db| {
            db.row(
                "SELECT size, mime FROM media_blobs WHERE project_id = ?1 AND sha256 = ?2",
                vals![project_id, sha.as_str()],
            )?
            .map(|r| Ok(BlobRow { sha256: sha.clone(), size: r.get::<i64>(0)? as u64, mime: r.get(1)? }))
            .transpose()
        })
    }

    /// Records a blob whose bytes are in the object store, and answers its row; a blob already
    /// recorded keeps its size and type, and counts as sent now. Answers None, recording
    /// nothing, while the blob is being deleted as unreferenced: its object may go, and the
    /// upload must be sent again.
    pub fn put_media_blob(&self, project_id: i64, sha: &Sha256, size: u64, mime: &str) -> Result<Option<BlobRow>> {
        self.write(|tx| {
            lock_blob(tx, project_id, sha)?;
            if deleting(tx, project_id, sha)? {
                return Ok(None);
            }
            let now = now_ms();
            tx.exec(
                "INSERT INTO media_blobs (project_id, sha256, size, mime, created_ms, stored_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?5)
                 ON CONFLICT (project_id, sha256) DO UPDATE SET stored_ms = excluded.stored_ms",
                vals![project_id, sha.as_str(), size as i64, mime, now],
            )?;
            blob_row(tx, project_id, sha).map(Some)
        })
    }

    /// An upload of a blob: a recorded blob counts as sent now (its items may follow), and is
    /// answered; else whether it is being deleted.
    pub fn touch_media_blob(&self, project_id: i64, sha: &Sha256) -> Result<StoredBlob> {
        self.write(|tx| {
            let touched = tx.exec(
                "UPDATE media_blobs SET stored_ms = ?3 WHERE project_id = ?1 AND sha256 = ?2",
                vals![project_id, sha.as_str(), now_ms()],
            )?;
            if touched == 0 {
                return Ok(if deleting(tx, project_id, sha)? { StoredBlob::Deleting } else { StoredBlob::Absent });
            }
            blob_row(tx, project_id, sha).map(StoredBlob::Recorded)
        })
    }

    /// Up to `limit` blobs that no run names, last sent at `before_ms` or earlier, by project
    /// and SHA-256, after `after` (paging).
    pub fn media_orphans(
        &self,
        before_ms: i64,
        after: Option<&(i64, Sha256)>,
        limit: usize,
    ) -> Result<Vec<(i64, Sha256)>> {
        let (project, sha) = after.map_or((-1, ""), |(p, s)| (*p, s.as_str()));
        self.read(|db| {
            db.rows(
                &format!(
                    "SELECT b.project_id, b.sha256 FROM media_blobs b WHERE b.stored_ms <= ?1
                       AND (b.project_id > ?2 OR (b.project_id = ?2 AND b.sha256 > ?3)) AND NOT EXISTS (
                         SELECT 1 FROM media_refs r WHERE r.project_id = b.project_id AND r.sha256 = b.sha256)
                     ORDER BY b.project_id, b.sha256 LIMIT {limit}"
                ),
                vals![before_ms, project, sha],
            )?
            .iter()
            .map(|r| Ok((r.get(0)?, Sha256::from_trusted(r.get(1)?))))
            .collect()
        })
    }

    /// Starts deleting a blob that no run names and whose bytes were last sent at `before_ms`
    /// or earlier: its row goes, and it waits in `media_unreferenced` for its object to be
    /// deleted. Answers false, changing nothing, when it is named or sent since.
    pub fn unreference_orphan(&self, project_id: i64, sha: &Sha256, before_ms: i64) -> Result<bool> {
        self.write(|tx| {
            lock_blob(tx, project_id, sha)?;
            let old = tx.exists(
                &format!(
                    "SELECT 1 FROM media_blobs WHERE project_id = ?1 AND sha256 = ?2 AND stored_ms <= ?3{}",
                    row_lock(tx, "FOR UPDATE")
                ),
                vals![project_id, sha.as_str(), before_ms],
            )?;
            // Read after the row is locked: an item recorded over it meanwhile has committed.
            if !old
                || tx.exists(
                    "SELECT 1 FROM media_refs WHERE project_id = ?1 AND sha256 = ?2",
                    vals![project_id, sha.as_str()],
                )?
            {
                return Ok(false);
            }
            tx.exec("DELETE FROM media_blobs WHERE project_id = ?1 AND sha256 = ?2", vals![project_id, sha.as_str()])?;
            tx.exec(
                "INSERT INTO media_unreferenced (project_id, sha256) VALUES (?1, ?2)
                 ON CONFLICT (project_id, sha256) DO NOTHING",
                vals![project_id, sha.as_str()],
            )?;
            Ok(true)
        })
    }

    /// Of `shas`, those the project has recorded.
    pub fn media_blobs_recorded(&self, project_id: i64, shas: &[Sha256]) -> Result<HashSet<Sha256>> {
        let mut found = HashSet::new();
        for chunk in shas.chunks(500) {
            let marks: Vec<String> = (0..chunk.len()).map(|i| format!("?{}", i + 2)).collect();
            let mut params = vec![crate::db::Value::from(project_id)];
            params.extend(chunk.iter().map(|sha| crate::db::Value::from(sha.as_str())));
            let sql =
                format!("SELECT sha256 FROM media_blobs WHERE project_id = ?1 AND sha256 IN ({})", marks.join(", "));
            for row in self.read(|db| db.rows(&sql, &params))? {
                found.insert(Sha256::from_trusted(row.get(0)?));
            }
        }
        Ok(found)
    }

    /// Starts deleting an object of the store that no blob's row stands for (its upload died
    /// before recording it): it waits in `media_unreferenced`, and no upload records it until it
    /// is gone. Answers false, changing nothing, when the blob is recorded.
    pub fn unreference_unrecorded(&self, project_id: i64, sha: &Sha256) -> Result<bool> {
        self.write(|tx| {
            lock_blob(tx, project_id, sha)?;
            if tx.exists(
                "SELECT 1 FROM media_blobs WHERE project_id = ?1 AND sha256 = ?2",
                vals![project_id, sha.as_str()],
            )? {
                return Ok(false);
            }
            tx.exec(
                "INSERT INTO media_unreferenced (project_id, sha256) VALUES (?1, ?2)
                 ON CONFLICT (project_id, sha256) DO NOTHING",
                vals![project_id, sha.as_str()],
            )?;
            Ok(true)
        })
    }

    /// Up to `limit` blobs of any project whose objects wait to be deleted, by project and
    /// SHA-256, after `after` (paging).
    pub fn media_unreferenced_all(&self, after: Option<&(i64, Sha256)>, limit: usize) -> Result<Vec<(i64, Sha256)>> {
        let (project, sha) = after.map_or((-1, ""), |(p, s)| (*p, s.as_str()));
        self.read(|db| {
            db.rows(
                &format!(
                    "SELECT project_id, sha256 FROM media_unreferenced
                     WHERE project_id > ?1 OR (project_id = ?1 AND sha256 > ?2)
                     ORDER BY project_id, sha256 LIMIT {limit}"
                ),
                vals![project, sha],
            )?
            .iter()
            .map(|r| Ok((r.get(0)?, Sha256::from_trusted(r.get(1)?))))
            .collect()
        })
    }

    /// Records items of a live run in one transaction, replacing any at the same
    /// `(key, step, index)`. Every blob an item names must be recorded in the run's project;
    /// the first one missing refuses the whole request (409, naming the item's field).
    pub fn put_media_items(&self, run: &RunId, items: &[MediaItem]) -> Result<usize> {
        self.write(|tx| insert_items(tx, run, items, None, None))
    }

    /// Records an item at the next free index under its key and step, unless an item there
    /// already names its blob (the same upload sent again); answers the index it holds.
    pub fn add_media_item(&self, run: &RunId, item: &MediaItem) -> Result<u32> {
        self.write(|tx| {
            lock_run_media(tx, run)?;
            let same = tx.row(
                "SELECT idx FROM media_items WHERE run_id = ?1 AND key = ?2 AND step = ?3 AND blob = ?4",
                vals![run.as_str(), item.key.as_str(), item.step, item.blob.as_str()],
            )?;
            if let Some(same) = same {
                return Ok(same.get::<i64>(0)? as u32);
            }
            let next = next_index(tx, run, &item.key, item.step)?;
            if next as usize >= MAX_MEDIA_ITEMS_PER_STEP {
                return Err(Error::Invalid {
                    field: "index".into(),
                    reason: format!("a key holds at most {MAX_MEDIA_ITEMS_PER_STEP} items at one step"),
                });
            }
            let mut item = item.clone();
            item.index = next;
            insert_items(tx, run, std::slice::from_ref(&item), None, None)?;
            Ok(item.index)
        })
    }

    /// Records a part of a table (a media item of kind `table` over its Parquet blob) with its
    /// mode, row count and columns, at the index `index` says (see [`PartIndex`]). An appended
    /// part's columns must be those of the part before it under the key (409, `columns`,
    /// otherwise). The index it was recorded at is answered.
    pub fn put_table_part(
        &self,
        run: &RunId,
        item: &MediaItem,
        part: &TablePartShape,
        index: impl Into<PartIndex>,
    ) -> Result<u32> {
        let index = index.into();
        let writer = match &index {
            PartIndex::Writer { writer, number } => Some((writer.as_str(), *number)),
            _ => None,
        };
        self.write(|tx| {
            lock_run_media(tx, run)?;
            let mut item = item.clone();
            item.index = place_table_part(tx, run, &item.key, item.step, part, &index)?;
            insert_items(tx, run, std::slice::from_ref(&item), Some(part), writer)?;
            Ok(item.index)
        })
    }

    /// Whether [`MetaStore::put_table_part`] would take the part now, before its bytes are
    /// stored: the run is live, the index under the limit, an appended part's columns those of
    /// the part before it.
    pub fn check_table_part(
        &self,
        run: &RunId,
        key: &MetricKey,
        step: i64,
        part: &TablePartShape,
        index: &PartIndex,
    ) -> Result<()> {
        self.read(|db| {
            live_run_project(db, run)?;
            place_table_part(db, run, key, step, part, index).map(|_| ())
        })
    }

    /// The parts that make up the table under `key` as of `step` (the last step when `None`):
    /// the last part logged with mode replace at or before it, and every part after that, in
    /// order of step and index.
    pub fn table_parts(&self, run: &RunId, key: &MetricKey, step: Option<i64>) -> Result<Vec<TablePart>> {
        self.read(|db| {
            let rows = db.rows(
                "SELECT step, idx, blob, detail FROM media_items WHERE run_id = ?1 AND key = ?2 AND kind = 'table'
                   AND step <= ?3 ORDER BY step DESC, idx DESC",
                vals![run.as_str(), key.as_str(), step.unwrap_or(i64::MAX)],
            )?;
            let mut parts = Vec::new();
            for r in &rows {
                let shape = parse_table_detail(&r.get::<String>(3)?)?;
                let replace = shape.mode == TableMode::Replace;
                parts.push(TablePart {
                    step: r.get(0)?,
                    index: u32::try_from(r.get::<i64>(1)?).map_err(|_| corrupt("index"))?,
                    blob: Sha256::from_trusted(r.get(2)?),
                    shape,
                });
                if replace {
                    break;
                }
            }
            parts.reverse();
            Ok(parts)
        })
    }

    /// The keys of a run's media, with how many items and steps each holds.
    pub fn media_keys(&self, run: &RunId) -> Result<Vec<MediaKeyRow>> {
        self.read(|db| {
            db.rows(
                "SELECT key, kind, COUNT(*), COUNT(DISTINCT step), MIN(step), MAX(step) FROM media_items
                 WHERE run_id = ?1 GROUP BY key, kind
                 UNION ALL
                 SELECT key, 'histogram', COUNT(*), COUNT(*), MIN(step), MAX(step) FROM media_histograms
                 WHERE run_id = ?1 GROUP BY key
                 ORDER BY 1, 2",
                vals![run.as_str()],
            )?
            .iter()
            .map(|r| {
                let kind: String = r.get(1)?;
                Ok(MediaKeyRow {
                    key: r.get(0)?,
                    kind: MediaKind::parse("kind", &kind).map_err(|_| corrupt("kind"))?,
                    items: r.get::<i64>(2)? as u64,
                    steps: r.get::<i64>(3)? as u64,
                    first_step: r.get(4)?,
                    last_step: r.get(5)?,
                })
            })
            .collect()
        })
    }

    /// A run's items by key, step and index, as `query` picks them.
    pub fn media_items(&self, run: &RunId, query: &MediaQuery) -> Result<Vec<MediaRow>> {
        let mut sql = format!("SELECT {ITEM_COLUMNS} FROM media_items WHERE run_id = ?1");
        let mut params = vec![crate::db::Value::from(run.as_str())];
        let mut bind = |sql: &mut String, clause: &str, value: crate::db::Value| {
            params.push(value);
            sql.push_str(&clause.replace("?N", &format!("?{}", params.len())));
        };
        if let Some(key) = &query.key {
            bind(&mut sql, " AND key = ?N", key.as_str().into());
        }
        if let Some(min) = query.step_min {
            bind(&mut sql, " AND step >= ?N", min.into());
        }
        if let Some(max) = query.step_max {
            bind(&mut sql, " AND step <= ?N", max.into());
        }
        if let Some((key, step, idx)) = &query.after {
            bind(&mut sql, " AND (key > ?N", key.as_str().into());
            bind(&mut sql, " OR (key = ?N", key.as_str().into());
            bind(&mut sql, " AND (step > ?N", (*step).into());
            bind(&mut sql, " OR (step = ?N", (*step).into());
            bind(&mut sql, " AND idx > ?N))))", (*idx).into());
        }
        sql.push_str(&format!(" ORDER BY key, step, idx LIMIT {}", query.limit));
        self.read(|db| db.rows(&sql, &params)?.iter().map(media_row).collect())
    }

    /// The steps at which a run logged media under `key`, ascending.
    pub fn media_steps(&self, run: &RunId, key: &MetricKey) -> Result<Vec<i64>> {
        self.read(|db| {
            db.rows(
                "SELECT step FROM media_items WHERE run_id = ?1 AND key = ?2
                 UNION SELECT step FROM media_histograms WHERE run_id = ?1 AND key = ?2 ORDER BY 1",
                vals![run.as_str(), key.as_str()],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect()
        })
    }

    /// A blob that one of the run's items names, with its size and media type.
    pub fn run_media_blob(&self, run: &RunId, sha: &Sha256) -> Result<Option<BlobRow>> {
        self.read(|db| {
            db.row(
                "SELECT b.size, b.mime FROM media_refs r
                 JOIN media_blobs b ON b.project_id = r.project_id AND b.sha256 = r.sha256
                 WHERE r.run_id = ?1 AND r.sha256 = ?2",
                vals![run.as_str(), sha.as_str()],
            )?
            .map(|r| Ok(BlobRow { sha256: sha.clone(), size: r.get::<i64>(0)? as u64, mime: r.get(1)? }))
            .transpose()
        })
    }

    /// Runs whose Parquet index of media has been behind since `before_ms` or earlier.
    pub fn media_indexes_due(&self, before_ms: i64) -> Result<Vec<DirtyIndex>> {
        self.read(|db| {
            db.rows(
                "SELECT run_id, project_id, changes FROM media_index_dirty WHERE since_ms <= ?1 ORDER BY since_ms",
                vals![before_ms],
            )?
            .iter()
            .map(|r| Ok(DirtyIndex { run: RunId::from_trusted(r.get(0)?), project_id: r.get(1)?, changes: r.get(2)? }))
            .collect()
        })
    }

    /// Every item of a run, by key, step and index, for its Parquet index.
    pub fn media_index_rows(&self, run: &RunId) -> Result<Vec<MediaRow>> {
        self.read(|db| {
            db.rows(
                &format!("SELECT {ITEM_COLUMNS} FROM media_items WHERE run_id = ?1 ORDER BY key, step, idx"),
                vals![run.as_str()],
            )?
            .iter()
            .map(media_row)
            .collect()
        })
    }

    /// Records that the run's index was written from rows read at `dirty.changes`; a change
    /// since leaves it due.
    pub fn media_index_written(&self, dirty: &DirtyIndex) -> Result<()> {
        self.write(|tx| {
            tx.exec(
                "DELETE FROM media_index_dirty WHERE run_id = ?1 AND changes = ?2",
                vals![dirty.run.as_str(), dirty.changes],
            )?;
            Ok(())
        })
    }

    /// Blobs of the project that no run names any more, whose objects are still to be deleted.
    pub fn media_unreferenced(&self, project_id: i64) -> Result<Vec<Sha256>> {
        self.read(|db| {
            db.rows("SELECT sha256 FROM media_unreferenced WHERE project_id = ?1", vals![project_id])?
                .iter()
                .map(|r| Ok(Sha256::from_trusted(r.get(0)?)))
                .collect()
        })
    }

    /// Forgets an unreferenced blob once its object is deleted, or once it was stored again.
    pub fn forget_unreferenced_blob(&self, project_id: i64, sha: &Sha256) -> Result<()> {
        self.write(|tx| {
            tx.exec(
                "DELETE FROM media_unreferenced WHERE project_id = ?1 AND sha256 = ?2",
                vals![project_id, sha.as_str()],
            )?;
            Ok(())
        })
    }
}

/// In a purge's transaction, before the run's rows go: the blobs only this run names become
/// unreferenced, and their rows go.
pub(crate) fn unreference_run_blobs(tx: &dyn Db, run: &str) -> Result<()> {
    tx.exec(
        "INSERT INTO media_unreferenced (project_id, sha256)
         SELECT r.project_id, r.sha256 FROM media_refs r WHERE r.run_id = ?1 AND NOT EXISTS (
             SELECT 1 FROM media_refs o WHERE o.project_id = r.project_id AND o.sha256 = r.sha256 AND o.run_id <> ?1)
         ON CONFLICT (project_id, sha256) DO NOTHING",
        vals![run],
    )?;
    tx.exec(
        "DELETE FROM media_blobs WHERE EXISTS (SELECT 1 FROM media_unreferenced u
             WHERE u.project_id = media_blobs.project_id AND u.sha256 = media_blobs.sha256)",
        vals![],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NewRun;
    use trainlog_schema::ProjectName;

    fn sha(c: char) -> Sha256 {
        Sha256::parse("sha", &c.to_string().repeat(64)).unwrap()
    }

    fn image(key: &str, step: i64, index: u32, blob: Sha256) -> MediaItem {
        MediaItem {
            key: MetricKey::parse("key", key).unwrap(),
            step,
            index,
            kind: MediaKind::Image,
            blob,
            thumbnail: None,
            mime: "image/png".into(),
            width: Some(8),
            height: Some(6),
            caption: Some(format!("{key} {step}")),
            boxes: vec![],
            masks: vec![],
            class_labels: BTreeMap::new(),
            timestamp_ms: 1000 + step,
        }
    }

    #[test]
    fn items_name_only_stored_blobs_page_in_order_and_keep_their_boxes_masks_and_labels() {
        let dir = tempfile::tempdir().unwrap();
        let meta = crate::test_store(dir.path());
        let new = |id: &str| NewRun {
            project: Some(ProjectName::parse("project", "p").unwrap()),
            id: Some(RunId::parse("id", id).unwrap()),
            ..NewRun::default()
        };
        let (run, _) = meta.create_run(&new("r1")).unwrap();
        let (other, _) = meta.create_run(&new("r2")).unwrap();
        let p = run.project_id;

        let refused = meta.put_media_items(&run.id, &[image("a", 0, 0, sha('a'))]).unwrap_err();
        assert!(matches!(&refused, Error::Conflict { field, .. } if field == "items[0].blob"), "{refused}");
        assert_eq!(meta.media_keys(&run.id).unwrap(), vec![], "a refused request writes nothing");
        assert!(meta.media_indexes_due(i64::MAX).unwrap().is_empty());

        for c in ['a', 'b', 'c', 'd'] {
            meta.put_media_blob(p, &sha(c), 10 + c as u64, "image/png").unwrap();
        }
        meta.put_media_blob(p, &sha('a'), 999, "text/plain").unwrap();
        assert_eq!(meta.media_blob(p, &sha('a')).unwrap().unwrap().size, 10 + 'a' as u64, "a blob is written once");

        let mut boxed = image("a", 5, 1, sha('b'));
        boxed.thumbnail = Some(sha('c'));
        boxed.masks.push(MediaMask { group: "truth".into(), blob: sha('d') });
        boxed.boxes.push(MediaBox {
            group: "predictions".into(),
            x_min: 1.0,
            y_min: 2.0,
            x_max: 3.5,
            y_max: 4.0,
            domain: BoxDomain::Pixel,
            class_id: Some(2),
            label: Some("cat".into()),
            score: Some(0.75),
        });
        boxed.class_labels.insert(2, "cat".into());
        let items =
            vec![image("a", 5, 0, sha('a')), boxed.clone(), image("a", 9, 0, sha('a')), image("b", 1, 0, sha('a'))];
        assert_eq!(meta.put_media_items(&run.id, &items).unwrap(), 4);
        meta.put_media_items(&other.id, &[image("a", 1, 0, sha('a'))]).unwrap();

        let keys = meta.media_keys(&run.id).unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!((keys[0].items, keys[0].steps, keys[0].first_step, keys[0].last_step), (3, 2, 5, 9));
        assert_eq!(meta.media_steps(&run.id, &MetricKey::parse("k", "a").unwrap()).unwrap(), vec![5, 9]);

        let all = meta.media_items(&run.id, &MediaQuery { limit: 100, ..MediaQuery::default() }).unwrap();
        assert_eq!(all.iter().map(|r| r.item.clone()).collect::<Vec<_>>(), items, "by key, step and index");
        assert_eq!(all[1].size, 10 + 'b' as u64);
        let mut pages = Vec::new();
        let mut after = None;
        for _ in 0..10 {
            let page = meta
                .media_items(&run.id, &MediaQuery { limit: 1, after: after.clone(), ..MediaQuery::default() })
                .unwrap();
            let Some(last) = page.last() else { break };
            after = Some((last.item.key.to_string(), last.item.step, i64::from(last.item.index)));
            pages.extend(page);
        }
        assert_eq!(pages, all, "pages of one item cover everything once");
        let ranged = MediaQuery {
            key: Some(MetricKey::parse("k", "a").unwrap()),
            step_min: Some(6),
            limit: 10,
            ..MediaQuery::default()
        };
        assert_eq!(meta.media_items(&run.id, &ranged).unwrap().len(), 1);

        assert!(meta.run_media_blob(&run.id, &sha('d')).unwrap().is_some(), "a mask is the run's blob");
        assert!(meta.run_media_blob(&other.id, &sha('d')).unwrap().is_none(), "another run's is not");

        let due = meta.media_indexes_due(i64::MAX).unwrap();
        assert_eq!(due.len(), 2);
        let mine = due.iter().find(|d| d.run == run.id).unwrap().clone();
        meta.put_media_items(&run.id, &[image("b", 2, 0, sha('a'))]).unwrap();
        meta.media_index_written(&mine).unwrap();
        assert!(
            meta.media_indexes_due(i64::MAX).unwrap().iter().any(|d| d.run == run.id),
            "a later change keeps it due"
        );
        for d in meta.media_indexes_due(i64::MAX).unwrap() {
            meta.media_index_written(&d).unwrap();
        }
        assert!(meta.media_indexes_due(i64::MAX).unwrap().is_empty());

        meta.set_run_deleted(&run.id, true).unwrap();
        meta.purge_run(&run.id).unwrap();
        let mut gone = meta.media_unreferenced(p).unwrap();
        gone.sort();
        assert_eq!(gone, vec![sha('b'), sha('c'), sha('d')], "blob a is still named by the other run");
        assert!(meta.media_blob(p, &sha('b')).unwrap().is_none());
        assert!(meta.put_media_blob(p, &sha('c'), 1, "image/png").unwrap().is_none(), "not while being deleted");
        assert!(meta.media_blob(p, &sha('c')).unwrap().is_none());
        meta.forget_unreferenced_blob(p, &sha('b')).unwrap();
        meta.forget_unreferenced_blob(p, &sha('c')).unwrap();
        assert_eq!(meta.media_unreferenced(p).unwrap(), vec![sha('d')]);
        assert!(meta.put_media_blob(p, &sha('c'), 1, "image/png").unwrap().is_some(), "stored again once deleted");
        assert!(meta.media_blob(p, &sha('c')).unwrap().is_some());
    }

    #[test]
    fn a_replaced_item_leaves_the_blobs_no_other_item_names_to_collect_once_old_enough() {
        let dir = tempfile::tempdir().unwrap();
        let meta = crate::test_store(dir.path());
        let new = |id: &str| NewRun {
            project: Some(ProjectName::parse("project", "p").unwrap()),
            id: Some(RunId::parse("id", id).unwrap()),
            ..NewRun::default()
        };
        let (run, _) = meta.create_run(&new("r1")).unwrap();
        let (other, _) = meta.create_run(&new("r2")).unwrap();
        let p = run.project_id;
        for c in ['a', 'b', 'c', 'd', 'e', 'f'] {
            assert!(meta.put_media_blob(p, &sha(c), 10, "image/png").unwrap().is_some());
        }
        let mut boxed = image("k", 0, 0, sha('a'));
        boxed.thumbnail = Some(sha('b'));
        boxed.masks.push(MediaMask { group: "truth".into(), blob: sha('c') });
        meta.put_media_items(&run.id, &[boxed, image("k", 1, 0, sha('d')), image("k", 2, 0, sha('c'))]).unwrap();
        meta.put_media_items(&other.id, &[image("k", 0, 0, sha('a'))]).unwrap();
        let later = now_ms() + 1;
        assert_eq!(
            meta.media_orphans(later, None, 100).unwrap(),
            vec![(p, sha('e')), (p, sha('f'))],
            "never named yet"
        );

        // Replaced by e: a is still the other run's, c this run's mask elsewhere, b no one's.
        meta.put_media_items(&run.id, &[image("k", 0, 0, sha('e'))]).unwrap();
        assert!(meta.run_media_blob(&run.id, &sha('b')).unwrap().is_none(), "the run no longer names b");
        assert!(meta.run_media_blob(&run.id, &sha('a')).unwrap().is_none());
        assert!(meta.run_media_blob(&run.id, &sha('c')).unwrap().is_some());
        assert!(meta.run_media_blob(&other.id, &sha('a')).unwrap().is_some());
        let later = now_ms() + 1;
        assert_eq!(meta.media_orphans(later, None, 100).unwrap(), vec![(p, sha('b')), (p, sha('f'))]);
        assert_eq!(meta.media_orphans(later, Some(&(p, sha('b'))), 100).unwrap(), vec![(p, sha('f'))], "paged");
        assert!(meta.media_orphans(0, None, 100).unwrap().is_empty(), "younger than the minimum age");

        // An upload of f since: it is kept for the minimum age again.
        let before_upload = now_ms() - 1;
        assert!(matches!(meta.touch_media_blob(p, &sha('f')).unwrap(), StoredBlob::Recorded(r) if r.size == 10));
        assert!(!meta.unreference_orphan(p, &sha('f'), before_upload).unwrap());
        assert!(!meta.unreference_orphan(p, &sha('a'), later).unwrap(), "a is named");

        assert!(meta.unreference_orphan(p, &sha('b'), later).unwrap());
        assert!(meta.media_blob(p, &sha('b')).unwrap().is_none());
        assert_eq!(meta.media_unreferenced_all(None, 10).unwrap(), vec![(p, sha('b'))]);
        assert_eq!(meta.touch_media_blob(p, &sha('b')).unwrap(), StoredBlob::Deleting);
        assert!(meta.put_media_blob(p, &sha('b'), 10, "image/png").unwrap().is_none(), "not while being deleted");
        assert!(meta.media_blob(p, &sha('b')).unwrap().is_none());
        meta.forget_unreferenced_blob(p, &sha('b')).unwrap();
        assert_eq!(meta.touch_media_blob(p, &sha('b')).unwrap(), StoredBlob::Absent);
        assert!(meta.put_media_blob(p, &sha('b'), 10, "image/png").unwrap().is_some());

        // An object without a row (its upload died before recording it).
        assert!(!meta.unreference_unrecorded(p, &sha('a')).unwrap());
        assert!(meta.unreference_unrecorded(p, &sha('9')).unwrap());
        assert_eq!(meta.touch_media_blob(p, &sha('9')).unwrap(), StoredBlob::Deleting);
        let recorded = meta.media_blobs_recorded(p, &[sha('a'), sha('b'), sha('9')]).unwrap();
        assert_eq!(recorded, [sha('a'), sha('b')].into_iter().collect());
    }

    #[test]
    fn a_writers_parts_take_free_indexes_and_a_part_sent_again_lands_where_it_did() {
        let dir = tempfile::tempdir().unwrap();
        let meta = crate::test_store(dir.path());
        let new = NewRun {
            project: Some(ProjectName::parse("project", "p").unwrap()),
            id: Some(RunId::parse("id", "r1").unwrap()),
            ..NewRun::default()
        };
        let (run, _) = meta.create_run(&new).unwrap();
        for c in ['a', 'b', 'c', 'd', 'e'] {
            meta.put_media_blob(run.project_id, &sha(c), 10, "application/vnd.apache.parquet").unwrap();
        }
        let part = |blob: char| MediaItem { kind: MediaKind::Table, ..image("t", 3, 0, sha(blob)) };
        let shape =
            |column: &str| TablePartShape { mode: TableMode::Append, rows: 1, columns: json!([{"name": column}]) };
        let by = |writer: &str, number: u32| PartIndex::Writer { writer: writer.into(), number };
        let put = |blob: char, index: PartIndex| meta.put_table_part(&run.id, &part(blob), &shape("x"), index).unwrap();
        assert_eq!(put('a', by("first", 0)), 0);
        assert_eq!(put('b', by("first", 1)), 1);
        // A second process of the run numbers its parts from 0 too: they follow, replacing nothing.
        assert_eq!(put('c', by("second", 0)), 2);
        assert_eq!(put('b', by("first", 1)), 1, "sent again after a lost answer: where it was");
        assert_eq!(put('d', PartIndex::Default), 3);
        assert_eq!(put('e', by("second", 1)), 4);
        let blobs: Vec<Sha256> = meta
            .table_parts(&run.id, &MetricKey::parse("key", "t").unwrap(), None)
            .unwrap()
            .into_iter()
            .map(|p| p.blob)
            .collect();
        assert_eq!(blobs, ['a', 'b', 'c', 'd', 'e'].map(sha));

        let key = MetricKey::parse("key", "t").unwrap();
        meta.check_table_part(&run.id, &key, 3, &shape("x"), &by("third", 0)).unwrap();
        let refused = meta.check_table_part(&run.id, &key, 3, &shape("y"), &by("third", 0)).unwrap_err();
        assert!(matches!(&refused, Error::Conflict { field, .. } if field == "columns"), "{refused}");
        // Placed by index, a part takes the writer's place and the writer's number is free again.
        assert_eq!(meta.put_table_part(&run.id, &part('a'), &shape("x"), Some(1)).unwrap(), 1);
        assert_eq!(put('b', by("first", 1)), 5);
    }
}
