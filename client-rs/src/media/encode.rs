//! Turning what a user logs into bytes to upload: pixels into PNG, a JPEG thumbnail for large
//! images, the media type of given bytes, and the manifest entry naming every blob by SHA-256.

use super::{Content, Media, Pixels};
use crate::{Error, Result};
use serde_json::{json, Map, Value};
use trainlog_schema::MediaKind;

/// Images larger than this on a side get a thumbnail that fits in it.
pub const THUMBNAIL_SIDE: u32 = 256;

/// A blob to upload.
#[derive(Debug, Clone)]
pub struct Blob {
    pub sha256: String,
    pub mime: String,
    pub bytes: Vec<u8>,
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes).as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

fn blob(bytes: Vec<u8>, mime: &str) -> Blob {
    Blob { sha256: sha256_hex(&bytes), mime: mime.to_owned(), bytes }
}

fn image_of(p: &Pixels) -> Result<image::DynamicImage> {
    let expected = p.width as usize * p.height as usize * p.channels as usize;
    if p.data.len() != expected {
        return Err(Error::Invalid(format!(
            "{}x{} pixels of {} channels need {expected} bytes, got {}",
            p.width,
            p.height,
            p.channels,
            p.data.len()
        )));
    }
    let (w, h, data) = (p.width, p.height, p.data.clone());
    let bad = || Error::Invalid("the pixels do not make an image".into());
    Ok(match p.channels {
        1 => image::DynamicImage::ImageLuma8(image::GrayImage::from_raw(w, h, data).ok_or_else(bad)?),
        2 => image::DynamicImage::ImageLumaA8(image::GrayAlphaImage::from_raw(w, h, data).ok_or_else(bad)?),
        3 => image::DynamicImage::ImageRgb8(image::RgbImage::from_raw(w, h, data).ok_or_else(bad)?),
        4 => image::DynamicImage::ImageRgba8(image::RgbaImage::from_raw(w, h, data).ok_or_else(bad)?),
        n => return Err(Error::Invalid(format!("an image has 1 to 4 channels, got {n}"))),
    })
}

/// A lossless PNG, with fast compression: the media thread keeps up with images logged often.
fn png(img: &image::DynamicImage) -> Result<Vec<u8>> {
    use image::codecs::png::{CompressionType, FilterType, PngEncoder};
    let mut out = Vec::new();
    let encoder = PngEncoder::new_with_quality(&mut out, CompressionType::Fast, FilterType::Adaptive);
    img.write_with_encoder(encoder).map_err(|e| Error::Invalid(format!("encoding PNG: {e}")))?;
    Ok(out)
}

/// A JPEG that fits in `THUMBNAIL_SIDE`, for an image larger than that.
fn thumbnail(img: &image::DynamicImage) -> Result<Option<Vec<u8>>> {
    if img.width().max(img.height()) <= THUMBNAIL_SIDE {
        return Ok(None);
    }
    let small = image::DynamicImage::ImageRgb8(img.thumbnail(THUMBNAIL_SIDE, THUMBNAIL_SIDE).to_rgb8());
    let mut out = std::io::Cursor::new(Vec::new());
    small
        .write_with_encoder(image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 85))
        .map_err(|e| Error::Invalid(format!("encoding a thumbnail: {e}")))?;
    Ok(Some(out.into_inner()))
}

/// The media type of bytes, from their first bytes, else from a file name's extension.
pub fn sniff_mime(bytes: &[u8], name: Option<&str>) -> &'static str {
    let magic: [(&[u8], &str); 6] = [
        (b"\x89PNG\r\n\x1a\n", "image/png"),
        (b"\xff\xd8\xff", "image/jpeg"),
        (b"GIF8", "image/gif"),
        (b"OggS", "audio/ogg"),
        (b"fLaC", "audio/flac"),
        (b"ID3", "audio/mpeg"),
    ];
    if let Some((_, mime)) = magic.iter().find(|(m, _)| bytes.starts_with(m)) {
        return mime;
    }
    if bytes.len() >= 12 && &bytes[..4] == b"RIFF" {
        match &bytes[8..12] {
            b"WEBP" => return "image/webp",
            b"WAVE" => return "audio/wav",
            _ => {}
        }
    }
    if bytes.len() >= 12 && &bytes[4..8] == b"ftyp" {
        return "video/mp4";
    }
    let ext = name.and_then(|n| n.rsplit_once('.')).map(|(_, e)| e.to_ascii_lowercase());
    match ext.as_deref() {
        Some("txt" | "log") => "text/plain",
        Some("md") => "text/markdown",
        Some("json") => "application/json",
        Some("csv") => "text/csv",
        Some("html" | "htm") => "text/html",
        Some("svg") => "image/svg+xml",
        Some("mp3") => "audio/mpeg",
        Some("wav") => "audio/wav",
        Some("mp4") => "video/mp4",
        Some("webm") => "video/webm",
        Some("gif") => "image/gif",
        _ => "application/octet-stream",
    }
}

/// Bytes given as they are: their media type (given, else sniffed), and for an image its size
/// and a thumbnail when this build can decode it (a format it cannot is stored as it is).
fn given_bytes(
    kind: &MediaKind,
    mime: Option<&str>,
    bytes: Vec<u8>,
    name: Option<&str>,
    blobs: &mut Vec<Blob>,
) -> Result<(Blob, Option<(u32, u32)>)> {
    let mime = match (mime, kind) {
        (Some(m), _) => m.to_owned(),
        (None, MediaKind::Text) => "text/plain; charset=utf-8".to_owned(),
        (None, _) => sniff_mime(&bytes, name).to_owned(),
    };
    let mut size = None;
    if *kind == MediaKind::Image {
        if let Ok(img) = image::load_from_memory(&bytes) {
            size = Some((img.width(), img.height()));
            if let Some(t) = thumbnail(&img)? {
                blobs.push(blob(t, "image/jpeg"));
            }
        }
    }
    Ok((blob(bytes, &mime), size))
}

/// Where a prepared item is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Its blobs are uploaded, then `item` is recorded with `POST /runs/{id}/media`.
    Media,
    /// `item` is a histogram, recorded with `POST /runs/{id}/histograms`.
    Histogram,
    /// `item` names the part (key, step, mode, index); its one blob is the body of
    /// `POST /runs/{id}/tables`.
    Table,
}

/// An item ready to send: its manifest entry and the blobs it names.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub route: Route,
    pub item: Value,
    pub blobs: Vec<Blob>,
}

/// A histogram or a table part, ready to send.
fn prepare_series(key: &str, step: i64, index: usize, timestamp_ms: i64, media: Media) -> Result<Prepared> {
    let histogram = |edges: Vec<f64>, counts: Vec<f64>| Prepared {
        route: Route::Histogram,
        item: json!({"key": key, "step": step, "edges": edges, "counts": counts, "timestamp": timestamp_ms}),
        blobs: vec![],
    };
    let table = |bytes: Vec<u8>, mime: &str| Prepared {
        route: Route::Table,
        item: json!({"key": key, "step": step, "mode": media.table_mode.as_str(), "index": index}),
        blobs: vec![blob(bytes, mime)],
    };
    Ok(match media.content {
        Content::Values { values, bins } => {
            let (edges, counts) = trainlog_schema::Histogram::bin(&values, bins);
            histogram(edges, counts)
        }
        Content::Binned { edges, counts } => histogram(edges, counts),
        Content::Rows { ref columns, ref rows } => {
            table(json!({"columns": columns, "rows": rows}).to_string().into_bytes(), "application/json")
        }
        Content::ArrowStream(ref bytes) => table(bytes.clone(), ARROW_STREAM),
        Content::Batch(ref batch) => {
            let mut out = Vec::new();
            let mut writer = arrow_ipc::writer::StreamWriter::try_new(&mut out, &batch.schema())
                .map_err(|e| Error::Invalid(format!("writing a table: {e}")))?;
            writer
                .write(batch)
                .and_then(|()| writer.finish())
                .map_err(|e| Error::Invalid(format!("writing a table: {e}")))?;
            drop(writer);
            table(out, ARROW_STREAM)
        }
        _ => return Err(Error::Invalid(format!("a {} is logged from values, counts or rows", media.kind))),
    })
}

/// The media type of an Arrow IPC stream.
const ARROW_STREAM: &str = "application/vnd.apache.arrow.stream";

/// Encodes one logged item (the slow part: PNG, thumbnails, hashing).
pub fn prepare(key: &str, step: i64, index: usize, timestamp_ms: i64, media: Media) -> Result<Prepared> {
    if matches!(media.kind, MediaKind::Histogram | MediaKind::Table) {
        return prepare_series(key, step, index, timestamp_ms, media);
    }
    let mut blobs = Vec::new();
    let (mut width, mut height) = (None, None);
    let main = match media.content {
        Content::Pixels(p) => {
            let img = image_of(&p)?;
            (width, height) = (Some(img.width()), Some(img.height()));
            if let Some(t) = thumbnail(&img)? {
                blobs.push(blob(t, "image/jpeg"));
            }
            (blob(png(&img)?, media.mime.as_deref().unwrap_or("image/png")), None)
        }
        Content::Bytes(bytes) => given_bytes(&media.kind, media.mime.as_deref(), bytes, None, &mut blobs)?,
        Content::File(path) => {
            let bytes = std::fs::read(&path).map_err(crate::io_err(format!("reading {}", path.display())))?;
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            given_bytes(&media.kind, media.mime.as_deref(), bytes, name.as_deref(), &mut blobs)?
        }
        _ => {
            return Err(Error::Invalid(format!(
                "values, counts and rows make histograms and tables, not a {}",
                media.kind
            )))
        }
    };
    if let (None, Some(size)) = (width, main.1) {
        (width, height) = (Some(size.0), Some(size.1));
    }
    let main = main.0;
    let thumbnail_sha = blobs.first().map(|b| b.sha256.clone());
    let mut masks = Vec::new();
    for mask in media.masks {
        if mask.class_ids.channels != 1 {
            return Err(Error::Invalid("a mask has one class id per pixel (one channel)".into()));
        }
        let encoded = blob(png(&image_of(&mask.class_ids)?)?, "image/png");
        masks.push(json!({"group": mask.group, "blob": encoded.sha256}));
        blobs.push(encoded);
    }
    let boxes: Vec<Value> = media
        .boxes
        .iter()
        .map(|b| {
            json!({"group": b.group, "x_min": b.x_min, "y_min": b.y_min, "x_max": b.x_max, "y_max": b.y_max,
                   "domain": b.domain.as_str(), "class_id": b.class_id, "label": b.label, "score": b.score})
        })
        .collect();
    let labels: Map<String, Value> =
        media.class_labels.iter().map(|(id, l)| (id.to_string(), Value::from(l.as_str()))).collect();
    let item = json!({
        "key": key, "step": step, "index": index, "kind": media.kind.as_str(), "blob": main.sha256,
        "thumbnail": thumbnail_sha, "mime": main.mime, "width": width, "height": height,
        "caption": media.caption, "boxes": boxes, "masks": masks, "class_labels": labels,
        "timestamp": timestamp_ms,
    });
    blobs.push(main);
    Ok(Prepared { route: Route::Media, item, blobs })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pixels_become_a_png_and_large_images_get_a_jpeg_thumbnail() {
        let small = Pixels { width: 4, height: 2, channels: 3, data: (0..24).collect() };
        let p = prepare("s", 1, 0, 5, Media::image(small)).unwrap();
        assert_eq!(p.blobs.len(), 1);
        assert_eq!(p.item["mime"], "image/png");
        assert_eq!((p.item["width"].as_u64(), p.item["height"].as_u64()), (Some(4), Some(2)));
        let back = image::load_from_memory(&p.blobs[0].bytes).unwrap().to_rgb8();
        assert_eq!(back.into_raw(), (0..24).collect::<Vec<u8>>(), "PNG is lossless");
        assert_eq!(p.item["blob"], sha256_hex(&p.blobs[0].bytes));

        let big = Pixels { width: 600, height: 300, channels: 1, data: vec![7; 180_000] };
        let p = prepare("s", 1, 0, 5, Media::image(big)).unwrap();
        assert_eq!(p.blobs.len(), 2);
        let thumb = image::load_from_memory(&p.blobs[0].bytes).unwrap();
        assert_eq!((thumb.width(), thumb.height()), (256, 128));
        assert_eq!(p.item["thumbnail"], p.blobs[0].sha256);

        let wrong = Pixels { width: 3, height: 3, channels: 3, data: vec![0; 10] };
        assert!(prepare("s", 1, 0, 5, Media::image(wrong)).is_err());
    }

    #[test]
    fn media_types_come_from_the_bytes_then_the_name() {
        assert_eq!(sniff_mime(b"\x89PNG\r\n\x1a\nrest", None), "image/png");
        assert_eq!(sniff_mime(b"RIFF....WAVEfmt ", None), "audio/wav");
        assert_eq!(sniff_mime(b"plain", Some("notes.md")), "text/markdown");
        assert_eq!(sniff_mime(b"?", Some("blob")), "application/octet-stream");
    }
}
