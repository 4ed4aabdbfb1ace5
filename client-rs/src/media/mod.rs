//! Media logged with a run (images, audio, video, text, files). `Run::log_media` only queues;
//! a thread of its own encodes (`encode`: PNG, thumbnails, SHA-256), uploads each blob, then
//! records the items. Items the server cannot take now go to the media spool (`spool`) and are
//! sent again; the queue is bounded in bytes, and what it could not hold is counted.

mod encode;
mod spool;
mod uploader;

pub use encode::{sha256_hex, sniff_mime, THUMBNAIL_SIDE};
pub(crate) use uploader::MediaQueue;

use std::collections::BTreeMap;
use std::path::PathBuf;
pub use trainlog_schema::{BoxDomain, MediaBox, MediaKind};

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
        }
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
        };
        content + self.masks.iter().map(|m| m.class_ids.data.len()).sum::<usize>() + 256 * (1 + self.boxes.len())
    }
}
