//! Media logged with a run (images, audio, video, text, files). `Run::log_media` only queues;
//! a thread of its own encodes (`encode`: PNG, thumbnails, SHA-256), uploads each blob, then
//! records the items. Items the server cannot take now go to the media spool (`spool`) and are
//! sent again; the queue is bounded in bytes, and what it could not hold is counted.

mod encode;
mod spool;
mod uploader;

pub use encode::{sha256_hex, sniff_mime, THUMBNAIL_SIDE};
pub(crate) use uploader::{send_spool_of, MediaQueue};

use std::collections::BTreeMap;
use std::path::PathBuf;
pub use trainlog_schema::{BoxDomain, MediaBox, MediaKind, TableMode};

/// The runs whose media wait in the media spool under `spool_dir`.
pub(crate) fn spooled_runs(spool_dir: &std::path::Path) -> Vec<String> {
    let mut runs: Vec<String> = std::fs::read_dir(spool_dir.join("media"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|run| has_spool(spool_dir, run))
        .collect();
    runs.sort();
    runs
}

/// Whether an earlier process of the run left media in the spool.
pub(crate) fn has_spool(spool_dir: &std::path::Path, run_id: &str) -> bool {
    !spool::MediaSpool::open(spool_dir, run_id).is_empty()
}

/// Pixels, row by row, `channels` bytes each (1 grey, 2 grey and alpha, 3 RGB, 4 RGBA).
#[derive(Debug, Clone, PartialEq)]
pub struct Pixels {
    pub width: u32,
    pub height: u32,
    pub channels: u8,
    pub data: Vec<u8>,
}

/// What a media item holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    /// Encoded as a PNG on the media thread.
    Pixels(Pixels),
    /// Bytes as they are (a PNG, an MP4, text).
    Bytes(Vec<u8>),
    /// A file, read on the media thread.
    File(PathBuf),
    /// Values for a histogram, binned on the media thread as `numpy.histogram` bins them.
    Values { values: Vec<f64>, bins: usize },
    /// A histogram already binned: `counts[i]` over `[edges[i], edges[i + 1])`.
    Binned { edges: Vec<f64>, counts: Vec<f64> },
    /// A part of a table as rows of JSON values; the server infers the column types.
    Rows { columns: Vec<String>, rows: Vec<Vec<serde_json::Value>> },
    /// A part of a table as an Arrow IPC stream.
    ArrowStream(Vec<u8>),
    /// A part of a table as a record batch, written as an Arrow IPC stream on the media thread.
    Batch(arrow_array::RecordBatch),
}

/// A segmentation mask: one class id per pixel.
#[derive(Debug, Clone, PartialEq)]
pub struct Mask {
    pub group: String,
    pub class_ids: Pixels,
}

/// One item to log under a key at a step.
#[derive(Debug, Clone, PartialEq)]
pub struct Media {
    pub kind: MediaKind,
    pub content: Content,
    /// Its media type; sniffed from the bytes (or the file's name) when absent.
    pub mime: Option<String>,
    pub caption: Option<String>,
    pub boxes: Vec<MediaBox>,
    pub masks: Vec<Mask>,
    pub class_labels: BTreeMap<i64, String>,
    /// For a table: whether this part replaces the table or adds rows to it.
    pub table_mode: TableMode,
}

impl Media {
    pub fn new(kind: MediaKind, content: Content) -> Self {
        Self {
            kind,
            content,
            mime: None,
            caption: None,
            boxes: Vec::new(),
            masks: Vec::new(),
            class_labels: BTreeMap::new(),
            table_mode: TableMode::Replace,
        }
    }

    /// A histogram of `values` in `bins` equal bins (numpy's edges and counts).
    pub fn histogram(values: Vec<f64>, bins: usize) -> Self {
        Self::new(MediaKind::Histogram, Content::Values { values, bins })
    }

    /// A histogram already binned.
    pub fn histogram_binned(counts: Vec<f64>, edges: Vec<f64>) -> Self {
        Self::new(MediaKind::Histogram, Content::Binned { edges, counts })
    }

    /// A table from column names and rows.
    pub fn table_rows(columns: Vec<String>, rows: Vec<Vec<serde_json::Value>>) -> Self {
        Self::new(MediaKind::Table, Content::Rows { columns, rows })
    }

    /// A table from a record batch.
    pub fn table(batch: arrow_array::RecordBatch) -> Self {
        Self::new(MediaKind::Table, Content::Batch(batch))
    }

    /// A table from an Arrow IPC stream.
    pub fn table_arrow(stream: Vec<u8>) -> Self {
        Self::new(MediaKind::Table, Content::ArrowStream(stream))
    }

    /// For a table: its rows follow the rows logged before under the key, without sending
    /// those again.
    pub fn append(mut self) -> Self {
        self.table_mode = TableMode::Append;
        self
    }

    /// An image from pixels, stored as a PNG.
    pub fn image(pixels: Pixels) -> Self {
        Self::new(MediaKind::Image, Content::Pixels(pixels))
    }

    pub fn text(text: impl Into<String>) -> Self {
        Self::new(MediaKind::Text, Content::Bytes(text.into().into_bytes()))
    }

    pub fn caption(mut self, caption: impl Into<String>) -> Self {
        self.caption = Some(caption.into());
        self
    }

    pub fn mime(mut self, mime: impl Into<String>) -> Self {
        self.mime = Some(mime.into());
        self
    }

    /// The bytes it queues, before encoding.
    fn queued_bytes(&self) -> usize {
        let content = match &self.content {
            Content::Pixels(p) => p.data.len(),
            Content::Bytes(b) => b.len(),
            Content::File(_) => 0,
            Content::Values { values, .. } => values.len() * 8,
            Content::Binned { edges, counts } => (edges.len() + counts.len()) * 8,
            Content::Rows { columns, rows } => columns.len() * 16 * (1 + rows.len()),
            Content::ArrowStream(b) => b.len(),
            Content::Batch(b) => b.get_array_memory_size(),
        };
        content + self.masks.iter().map(|m| m.class_ids.data.len()).sum::<usize>() + 256 * (1 + self.boxes.len())
    }
}
