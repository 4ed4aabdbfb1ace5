//! The media's wire types: items recorded, listed and read back, and the blobs they name.

use super::counted::{self, at_most, at_most_entries};
use crate::error::Result;
use crate::wire::{integer, KeyText};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use trainlog_meta::{BlobRow, MediaKeyRow, MediaRow};
use trainlog_schema::limits::{MAX_MEDIA_CAPTION_CHARS, MAX_MEDIA_ITEMS_PER_STEP};
use trainlog_schema::{parse_mime, BoxDomain, MediaBox, MediaItem, MediaKind, MediaMask, MetricKey, RunId, Sha256};
use utoipa::{PartialSchema, ToSchema};

#[derive(Deserialize, Serialize, ToSchema, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Image,
    Audio,
    Video,
    Text,
    File,
    Table,
    Histogram,
}

impl From<Kind> for MediaKind {
    fn from(k: Kind) -> Self {
        match k {
            Kind::Image => MediaKind::Image,
            Kind::Audio => MediaKind::Audio,
            Kind::Video => MediaKind::Video,
            Kind::Text => MediaKind::Text,
            Kind::File => MediaKind::File,
            Kind::Table => MediaKind::Table,
            Kind::Histogram => MediaKind::Histogram,
        }
    }
}

impl From<MediaKind> for Kind {
    fn from(k: MediaKind) -> Self {
        match k {
            MediaKind::Image => Kind::Image,
            MediaKind::Audio => Kind::Audio,
            MediaKind::Video => Kind::Video,
            MediaKind::Text => Kind::Text,
            MediaKind::File => Kind::File,
            MediaKind::Table => Kind::Table,
            MediaKind::Histogram => Kind::Histogram,
        }
    }
}

#[derive(Deserialize, Serialize, ToSchema, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Domain {
    /// Fractions of the image's width and height, 0 to 1.
    #[default]
    Fraction,
    Pixel,
}

/// A bounding box on an image.
#[derive(Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BoxWire {
    /// The box's set, such as `predictions` or `ground_truth`; the UI toggles each.
    #[serde(default = "default_group")]
    #[schema(max_length = 100)]
    pub group: String,
    pub x_min: f64,
    pub y_min: f64,
    pub x_max: f64,
    pub y_max: f64,
    #[serde(default)]
    pub domain: Domain,
    #[serde(default, deserialize_with = "integer::optional")]
    pub class_id: Option<i64>,
    #[schema(max_length = 1000)]
    pub label: Option<String>,
    pub score: Option<f64>,
}

fn default_group() -> String {
    "predictions".into()
}

/// A segmentation mask: a blob of one class id per pixel (a grey PNG the size of the image).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MaskIn {
    #[serde(default = "default_group")]
    #[schema(max_length = 100)]
    pub group: String,
    #[schema(pattern = "^[0-9a-f]{64}$")]
    pub blob: String,
}

/// One item to record. Its bytes (and its thumbnail's and masks') are uploaded first, to
/// `PUT /api/v1/runs/{id}/media/blobs/{sha256}`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MediaItemIn {
    #[schema(schema_with = KeyText::schema)]
    pub key: String,
    #[serde(deserialize_with = "integer::required")]
    #[schema(minimum = 0)]
    pub step: i64,
    /// Its place among the items logged under the key at this step; 0 when absent.
    #[serde(default, deserialize_with = "integer::optional")]
    #[schema(minimum = 0, maximum = 999)]
    pub index: Option<i64>,
    pub kind: Kind,
    /// The SHA-256 of its bytes.
    #[schema(pattern = "^[0-9a-f]{64}$")]
    pub blob: String,
    /// The SHA-256 of a smaller image shown in lists.
    #[schema(pattern = "^[0-9a-f]{64}$")]
    pub thumbnail: Option<String>,
    /// Its media type, such as `image/png`.
    #[schema(max_length = 200, pattern = "^[!-.0-~]+/[ -~]+$")]
    pub mime: String,
    #[serde(default, deserialize_with = "integer::optional")]
    #[schema(minimum = 0, maximum = 4294967295_i64)]
    pub width: Option<i64>,
    #[serde(default, deserialize_with = "integer::optional")]
    #[schema(minimum = 0, maximum = 4294967295_i64)]
    pub height: Option<i64>,
    #[schema(max_length = 4096)]
    pub caption: Option<String>,
    #[serde(default, deserialize_with = "at_most::<_, _, counted::Boxes>")]
    pub boxes: Vec<BoxWire>,
    #[serde(default, deserialize_with = "at_most::<_, _, counted::Masks>")]
    pub masks: Vec<MaskIn>,
    /// Names of the class ids of its boxes and masks.
    #[serde(default, deserialize_with = "at_most_entries::<_, _, _, counted::ClassLabels>")]
    pub class_labels: BTreeMap<String, String>,
    /// Milliseconds since the Unix epoch; the server's time when absent.
    #[serde(default, deserialize_with = "integer::optional")]
    pub timestamp: Option<i64>,
}

impl MediaItemIn {
    /// The item, parsed and checked; `field` names it in errors (`items[3]`).
    pub fn parse(self, field: &str, now_ms: i64) -> Result<MediaItem> {
        let at = |name: &str| format!("{field}.{name}");
        let index = self.index.unwrap_or(0);
        if !(0..MAX_MEDIA_ITEMS_PER_STEP as i64).contains(&index) {
            return Err(crate::error::ApiError::invalid(
                at("index"),
                format!("expected 0 to {}, got {index}", MAX_MEDIA_ITEMS_PER_STEP - 1),
            ));
        }
        let dimension = |name: &str, v: Option<i64>| -> Result<Option<u32>> {
            v.map(|v| {
                u32::try_from(v).map_err(|_| crate::error::ApiError::invalid(at(name), "expected 0 to 4294967295"))
            })
            .transpose()
        };
        let mut class_labels = BTreeMap::new();
        for (id, label) in self.class_labels {
            let parsed: i64 = id.parse().map_err(|_| {
                crate::error::ApiError::invalid(at("class_labels"), format!("a class id is an integer, got {id:?}"))
            })?;
            class_labels.insert(parsed, label);
        }
        if matches!(self.kind, Kind::Table | Kind::Histogram) {
            return Err(crate::error::ApiError::invalid(
                at("kind"),
                "tables are logged with POST /api/v1/runs/{id}/tables and histograms with POST /api/v1/runs/{id}/histograms",
            ));
        }
        let item = MediaItem {
            key: MetricKey::parse(&at("key"), &self.key)?,
            step: self.step,
            index: index as u32,
            kind: self.kind.into(),
            blob: Sha256::parse(&at("blob"), &self.blob)?,
            thumbnail: self.thumbnail.as_deref().map(|t| Sha256::parse(&at("thumbnail"), t)).transpose()?,
            mime: parse_mime(&at("mime"), &self.mime)?,
            width: dimension("width", self.width)?,
            height: dimension("height", self.height)?,
            caption: self.caption,
            boxes: self
                .boxes
                .into_iter()
                .map(|b| MediaBox {
                    group: b.group,
                    x_min: b.x_min,
                    y_min: b.y_min,
                    x_max: b.x_max,
                    y_max: b.y_max,
                    domain: match b.domain {
                        Domain::Fraction => BoxDomain::Fraction,
                        Domain::Pixel => BoxDomain::Pixel,
                    },
                    class_id: b.class_id,
                    label: b.label,
                    score: b.score,
                })
                .collect(),
            masks: self
                .masks
                .into_iter()
                .enumerate()
                .map(|(i, m)| {
                    Ok(MediaMask { group: m.group, blob: Sha256::parse(&format!("{field}.masks[{i}].blob"), &m.blob)? })
                })
                .collect::<Result<_>>()?,
            class_labels,
            timestamp_ms: self.timestamp.unwrap_or(now_ms),
        };
        item.check(field)?;
        Ok(item)
    }
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RecordMedia {
    /// At most 1000; recorded together or not at all. An item at the `(key, step, index)` of
    /// an earlier one replaces it.
    #[serde(deserialize_with = "at_most::<_, _, counted::Items>")]
    pub items: Vec<MediaItemIn>,
}

#[derive(Serialize, ToSchema)]
pub struct Recorded {
    pub recorded: usize,
}

/// A stored blob.
#[derive(Serialize, ToSchema)]
pub struct BlobView {
    pub sha256: String,
    pub size: u64,
    pub mime: String,
}

impl BlobView {
    pub fn new(b: &BlobRow) -> Self {
        BlobView { sha256: b.sha256.to_string(), size: b.size, mime: b.mime.clone() }
    }
}

#[derive(Serialize, ToSchema)]
pub struct MaskView {
    pub group: String,
    pub sha256: String,
    pub url: String,
}

/// A recorded item, with where to read its bytes.
#[derive(Serialize, ToSchema)]
pub struct MediaItemView {
    pub key: String,
    pub step: i64,
    pub index: u32,
    pub kind: Kind,
    pub sha256: String,
    /// `GET` this for the bytes.
    pub url: String,
    pub thumbnail_sha256: Option<String>,
    pub thumbnail_url: Option<String>,
    pub mime: String,
    pub size: u64,
    pub width: Option<u32>,
    pub height: Option<u32>,
    #[schema(max_length = 4096)]
    pub caption: Option<String>,
    pub boxes: Vec<BoxWire>,
    pub masks: Vec<MaskView>,
    pub class_labels: BTreeMap<String, String>,
    /// Milliseconds since the Unix epoch.
    pub timestamp: i64,
}

/// `/api/v1/runs/{run}/media/blobs/{sha256}`
pub fn blob_url(run: &RunId, sha: &Sha256) -> String {
    format!("/api/v1/runs/{run}/media/blobs/{sha}")
}

impl MediaItemView {
    pub fn new(run: &RunId, row: &MediaRow) -> Self {
        let i = &row.item;
        MediaItemView {
            key: i.key.to_string(),
            step: i.step,
            index: i.index,
            kind: i.kind.into(),
            sha256: i.blob.to_string(),
            url: blob_url(run, &i.blob),
            thumbnail_sha256: i.thumbnail.as_ref().map(Sha256::to_string),
            thumbnail_url: i.thumbnail.as_ref().map(|t| blob_url(run, t)),
            mime: i.mime.clone(),
            size: row.size,
            width: i.width,
            height: i.height,
            caption: i.caption.clone(),
            boxes: i
                .boxes
                .iter()
                .map(|b| BoxWire {
                    group: b.group.clone(),
                    x_min: b.x_min,
                    y_min: b.y_min,
                    x_max: b.x_max,
                    y_max: b.y_max,
                    domain: match b.domain {
                        BoxDomain::Fraction => Domain::Fraction,
                        BoxDomain::Pixel => Domain::Pixel,
                    },
                    class_id: b.class_id,
                    label: b.label.clone(),
                    score: b.score,
                })
                .collect(),
            masks: i
                .masks
                .iter()
                .map(|m| MaskView { group: m.group.clone(), sha256: m.blob.to_string(), url: blob_url(run, &m.blob) })
                .collect(),
            class_labels: i.class_labels.iter().map(|(id, l)| (id.to_string(), l.clone())).collect(),
            timestamp: i.timestamp_ms,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct MediaPage {
    /// By key, step and index.
    pub items: Vec<MediaItemView>,
    /// Give it back as `page_token` for the next page; absent on the last.
    pub next_page_token: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct MediaKeyView {
    pub key: String,
    pub kind: Kind,
    pub items: u64,
    pub steps: u64,
    pub first_step: i64,
    pub last_step: i64,
}

impl MediaKeyView {
    pub fn new(k: &MediaKeyRow) -> Self {
        MediaKeyView {
            key: k.key.clone(),
            kind: k.kind.into(),
            items: k.items,
            steps: k.steps,
            first_step: k.first_step,
            last_step: k.last_step,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct MediaKeys {
    pub keys: Vec<MediaKeyView>,
}

#[derive(Serialize, ToSchema)]
pub struct MediaSteps {
    /// Ascending.
    pub steps: Vec<i64>,
}

/// The limits the caption's schema states, tied to the store's.
const _: () = assert!(MAX_MEDIA_CAPTION_CHARS == 4096);

/// One histogram to record: `counts[i]` values fell in `[edges[i], edges[i + 1])`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HistogramIn {
    #[schema(schema_with = KeyText::schema)]
    pub key: String,
    #[serde(deserialize_with = "integer::required")]
    #[schema(minimum = 0)]
    pub step: i64,
    /// Strictly increasing, one more than `counts`.
    #[schema(min_items = 2, max_items = 513)]
    #[serde(deserialize_with = "at_most::<_, _, counted::Edges>")]
    pub edges: Vec<f64>,
    /// At most 512 bins, each 0 or more.
    #[schema(min_items = 1, max_items = 512)]
    #[serde(deserialize_with = "at_most::<_, _, counted::Bins>")]
    pub counts: Vec<f64>,
    /// Milliseconds since the Unix epoch; the server's time when absent.
    #[serde(default, deserialize_with = "integer::optional")]
    pub timestamp: Option<i64>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RecordHistograms {
    /// At most 1000; recorded together or not at all.
    #[serde(deserialize_with = "at_most::<_, _, counted::Histograms>")]
    pub histograms: Vec<HistogramIn>,
}

#[derive(Serialize, ToSchema)]
pub struct HistogramView {
    pub step: i64,
    pub edges: Vec<f64>,
    pub counts: Vec<f64>,
    /// Milliseconds since the Unix epoch.
    pub timestamp: i64,
}

#[derive(Serialize, ToSchema)]
pub struct HistogramPage {
    /// By step.
    pub histograms: Vec<HistogramView>,
    /// Give it back as `page_token` for the next page; absent on the last.
    pub next_page_token: Option<String>,
}

/// A table part sent as JSON: column names and rows of values, one per column.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TableRows {
    /// At most 1000 names, each 1 to 250 characters.
    #[serde(deserialize_with = "super::rows::bounded_columns")]
    pub columns: Vec<String>,
    /// At most 100000 rows and 10,000,000 values in all (rows × columns), in a body of at most
    /// 16 MiB. Column types are inferred: integers, numbers, booleans, else text.
    #[schema(value_type = Vec<Vec<Object>>)]
    #[serde(deserialize_with = "super::rows::bounded_rows")]
    pub rows: Vec<Vec<serde_json::Value>>,
}

/// A recorded part of a table.
#[derive(Serialize, ToSchema)]
pub struct TablePartView {
    pub key: String,
    pub step: i64,
    pub index: u32,
    pub mode: String,
    pub rows: u64,
    /// The SHA-256 of its Parquet bytes.
    pub blob: String,
}

#[derive(Serialize, ToSchema)]
pub struct ColumnView {
    pub name: String,
    /// int64, float64, bool, string, or another Arrow type's name.
    #[serde(rename = "type")]
    pub kind: String,
}

/// Rows of a table as of a step.
#[derive(Serialize, ToSchema)]
pub struct TableView {
    pub key: String,
    /// The step of the last part joined.
    pub step: i64,
    /// How many parts were joined.
    pub parts: usize,
    pub columns: Vec<ColumnView>,
    pub total_rows: usize,
    pub matched_rows: usize,
    pub offset: usize,
    /// A value per column.
    #[schema(value_type = Vec<Vec<Object>>)]
    pub rows: Vec<serde_json::Value>,
}
