//! Media logged with a run (images, audio, video, text, files): the kinds, the content address
//! of their bytes, and one item as the server records it, parsed once at the edge.

use crate::limits::{
    check_len, MAX_MEDIA_BOXES, MAX_MEDIA_CAPTION_CHARS, MAX_MEDIA_CLASS_LABELS, MAX_MEDIA_ITEMS_PER_STEP,
    MAX_MEDIA_MASKS, MAX_MEDIA_MIME_CHARS,
};
use crate::{Error, MetricKey, Result};
use std::collections::BTreeMap;
use std::fmt;

/// What a media item is; it decides how the UI shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MediaKind {
    Image,
    Audio,
    Video,
    Text,
    File,
    /// A part of a table: Parquet bytes, one log of the table.
    Table,
    /// A histogram: counts over bin edges, recorded without a blob.
    Histogram,
}

impl MediaKind {
    pub const ALL: [MediaKind; 7] =
        [Self::Image, Self::Audio, Self::Video, Self::Text, Self::File, Self::Table, Self::Histogram];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Image => "image",
            Self::Audio => "audio",
            Self::Video => "video",
            Self::Text => "text",
            Self::File => "file",
            Self::Table => "table",
            Self::Histogram => "histogram",
        }
    }

    pub fn parse(field: &str, s: &str) -> Result<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s).ok_or_else(|| {
            Error::new(
                field,
                format!("a media kind is one of image, audio, video, text, file, table or histogram, got {s:?}"),
            )
        })
    }
}

impl fmt::Display for MediaKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The SHA-256 of a blob's bytes, as 64 lowercase hex digits: its address in the store.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sha256(String);

impl Sha256 {
    pub fn parse(field: &str, s: &str) -> Result<Self> {
        if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            return Err(Error::new(field, "a sha256 is 64 lowercase hex digits"));
        }
        Ok(Self(s.to_owned()))
    }

    /// Wraps a value read back from our own storage, where it was validated on the way in.
    pub fn from_trusted(s: String) -> Self {
        Self(s)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Sha256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A media type such as `image/png`: `type/subtype`, printable ASCII without spaces.
pub fn parse_mime(field: &str, s: &str) -> Result<String> {
    check_len(field, "a media type", s, MAX_MEDIA_MIME_CHARS)?;
    let token =
        |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    let mut parts = s.split(';');
    let essence = parts.next().unwrap_or("").trim();
    let valid = essence.split_once('/').is_some_and(|(t, sub)| token(t) && token(sub))
        && parts
            .all(|p| p.trim().split_once('=').is_some_and(|(name, value)| token(name.trim()) && token(value.trim())));
    if !valid {
        return Err(Error::new(
            field,
            format!(
                "a media type is type/subtype with name=value parameters, such as text/plain; charset=utf-8, got {s:?}"
            ),
        ));
    }
    Ok(s.to_ascii_lowercase())
}

/// The `type/subtype` of a media type that [`parse_mime`] takes, without its parameters; None
/// for one it refuses.
pub fn mime_essence(mime: &str) -> Option<String> {
    parse_mime("mime", mime).ok().map(|m| m.split(';').next().unwrap_or("").trim().to_owned())
}

/// Whether a box's coordinates are in pixels or fractions of the image's width and height.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoxDomain {
    Fraction,
    Pixel,
}

impl BoxDomain {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fraction => "fraction",
            Self::Pixel => "pixel",
        }
    }

    pub fn parse(field: &str, s: &str) -> Result<Self> {
        match s {
            "fraction" => Ok(Self::Fraction),
            "pixel" => Ok(Self::Pixel),
            _ => Err(Error::new(field, format!("a box's domain is fraction or pixel, got {s:?}"))),
        }
    }
}

/// One bounding box on an image, in a named group (`predictions`, `ground_truth`).
#[derive(Debug, Clone, PartialEq)]
pub struct MediaBox {
    pub group: String,
    pub x_min: f64,
    pub y_min: f64,
    pub x_max: f64,
    pub y_max: f64,
    pub domain: BoxDomain,
    pub class_id: Option<i64>,
    pub label: Option<String>,
    pub score: Option<f64>,
}

/// A segmentation mask on an image: a blob holding one class id per pixel (a grey PNG).
#[derive(Debug, Clone, PartialEq)]
pub struct MediaMask {
    pub group: String,
    pub blob: Sha256,
}

/// One item of a run's media, as recorded: the `index`-th item logged under `key` at `step`.
#[derive(Debug, Clone, PartialEq)]
pub struct MediaItem {
    pub key: MetricKey,
    pub step: i64,
    pub index: u32,
    pub kind: MediaKind,
    pub blob: Sha256,
    pub thumbnail: Option<Sha256>,
    pub mime: String,
    pub width: Option<u32>,
    pub height: Option<u32>,
    pub caption: Option<String>,
    pub boxes: Vec<MediaBox>,
    pub masks: Vec<MediaMask>,
    pub class_labels: BTreeMap<i64, String>,
    pub timestamp_ms: i64,
}

impl MediaItem {
    /// Every blob the item names: its bytes, its thumbnail and its masks.
    pub fn blobs(&self) -> impl Iterator<Item = &Sha256> {
        std::iter::once(&self.blob).chain(&self.thumbnail).chain(self.masks.iter().map(|m| &m.blob))
    }

    /// Checks what the types alone cannot: the index, the caption, and the boxes, masks and
    /// labels against their limits. `field` names the item in errors (`items[3]`).
    pub fn check(&self, field: &str) -> Result<()> {
        if self.step < 0 {
            return Err(Error::new(format!("{field}.step"), "a step is 0 or more"));
        }
        if self.index as usize >= MAX_MEDIA_ITEMS_PER_STEP {
            return Err(Error::new(
                format!("{field}.index"),
                format!(
                    "a key holds at most {MAX_MEDIA_ITEMS_PER_STEP} items at one step (index 0 to {})",
                    MAX_MEDIA_ITEMS_PER_STEP - 1
                ),
            ));
        }
        if let Some(caption) = &self.caption {
            check_len(&format!("{field}.caption"), "a caption", caption, MAX_MEDIA_CAPTION_CHARS)?;
        }
        if self.boxes.len() > MAX_MEDIA_BOXES {
            return Err(Error::new(
                format!("{field}.boxes"),
                format!("an item holds at most {MAX_MEDIA_BOXES} boxes, got {}", self.boxes.len()),
            ));
        }
        for (i, b) in self.boxes.iter().enumerate() {
            let at = format!("{field}.boxes[{i}]");
            check_len(&format!("{at}.group"), "a box group", &b.group, 100)?;
            let coords = [b.x_min, b.y_min, b.x_max, b.y_max];
            if coords.iter().any(|c| !c.is_finite()) {
                return Err(Error::new(at, "a box's coordinates are finite numbers"));
            }
            if b.x_min > b.x_max || b.y_min > b.y_max {
                return Err(Error::new(at, "a box's x_min is at most its x_max, and y_min at most y_max"));
            }
            if b.score.is_some_and(|s| !s.is_finite()) {
                return Err(Error::new(format!("{at}.score"), "a score is a finite number"));
            }
            if let Some(label) = &b.label {
                check_len(&format!("{at}.label"), "a box label", label, 1000)?;
            }
        }
        if self.masks.len() > MAX_MEDIA_MASKS {
            return Err(Error::new(
                format!("{field}.masks"),
                format!("an item holds at most {MAX_MEDIA_MASKS} masks, got {}", self.masks.len()),
            ));
        }
        for (i, m) in self.masks.iter().enumerate() {
            check_len(&format!("{field}.masks[{i}].group"), "a mask group", &m.group, 100)?;
        }
        if self.class_labels.len() > MAX_MEDIA_CLASS_LABELS {
            return Err(Error::new(
                format!("{field}.class_labels"),
                format!("an item holds at most {MAX_MEDIA_CLASS_LABELS} class labels, got {}", self.class_labels.len()),
            ));
        }
        for (id, label) in &self.class_labels {
            check_len(&format!("{field}.class_labels.{id}"), "a class label", label, 1000)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item() -> MediaItem {
        MediaItem {
            key: MetricKey::parse("key", "samples").unwrap(),
            step: 3,
            index: 0,
            kind: MediaKind::Image,
            blob: Sha256::parse("blob", &"a".repeat(64)).unwrap(),
            thumbnail: None,
            mime: "image/png".into(),
            width: Some(4),
            height: Some(4),
            caption: None,
            boxes: vec![],
            masks: vec![],
            class_labels: BTreeMap::new(),
            timestamp_ms: 0,
        }
    }

    #[test]
    fn shas_kinds_and_media_types_are_parsed_strictly() {
        assert!(Sha256::parse("blob", &"0f".repeat(32)).is_ok());
        assert_eq!(Sha256::parse("blob", &"0F".repeat(32)).unwrap_err().field, "blob");
        assert!(Sha256::parse("blob", "abc").is_err());
        assert_eq!(MediaKind::parse("kind", "video").unwrap(), MediaKind::Video);
        assert!(MediaKind::parse("kind", "hologram").unwrap_err().reason.contains("image, audio"));
        assert_eq!(parse_mime("mime", "Image/PNG").unwrap(), "image/png");
        assert!(parse_mime("mime", "png").is_err());
        assert!(parse_mime("mime", "image/").is_err());
        assert!(parse_mime("mime", "text/plain; charset=utf-8").is_ok());
        for bad in
            ["text/plain;x=1,text/html", "text/plain, text/html", "text/html;x=\"a\"", "text/ plain", "text/plain;x"]
        {
            assert!(parse_mime("mime", bad).is_err(), "{bad}");
        }
        assert_eq!(mime_essence("Text/Plain ; Charset=UTF-8").as_deref(), Some("text/plain"));
        assert_eq!(mime_essence("text/plain;x=1,text/html"), None);
    }

    #[test]
    fn an_item_past_a_limit_is_refused_naming_the_field() {
        assert!(item().check("items[0]").is_ok());
        let mut bad = item();
        bad.index = MAX_MEDIA_ITEMS_PER_STEP as u32;
        assert_eq!(bad.check("items[2]").unwrap_err().field, "items[2].index");
        let mut bad = item();
        bad.boxes.push(MediaBox {
            group: "predictions".into(),
            x_min: 0.5,
            y_min: 0.0,
            x_max: 0.4,
            y_max: 1.0,
            domain: BoxDomain::Fraction,
            class_id: None,
            label: None,
            score: None,
        });
        assert_eq!(bad.check("items[0]").unwrap_err().field, "items[0].boxes[0]");
        let mut bad = item();
        bad.caption = Some("x".repeat(MAX_MEDIA_CAPTION_CHARS + 1));
        assert_eq!(bad.check("items[0]").unwrap_err().field, "items[0].caption");
        let mut with_mask = item();
        with_mask.thumbnail = Some(Sha256::parse("t", &"b".repeat(64)).unwrap());
        with_mask.masks.push(MediaMask { group: "truth".into(), blob: Sha256::parse("m", &"c".repeat(64)).unwrap() });
        assert_eq!(with_mask.blobs().count(), 3);
    }
}
