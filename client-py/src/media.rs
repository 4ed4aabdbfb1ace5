//! Media items as the Python layer hands them over (plain dicts: kind, pixels or bytes or a path,
//! boxes, masks, class labels), turned into the SDK's `Media`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::collections::BTreeMap;
use trainlog::media::{BoxDomain, MediaBox, MediaKind};
use trainlog::{Content, Mask, Media, Pixels};

fn get<'py, T: FromPyObjectOwned<'py>>(d: &Bound<'py, PyDict>, key: &str) -> PyResult<Option<T>> {
    match d.get_item(key)? {
        Some(v) if !v.is_none() => Ok(Some(v.extract::<T>().map_err(Into::into)?)),
        _ => Ok(None),
    }
}

fn need<'py, T: FromPyObjectOwned<'py>>(d: &Bound<'py, PyDict>, key: &str) -> PyResult<T> {
    get(d, key)?.ok_or_else(|| PyValueError::new_err(format!("a media item needs {key:?}")))
}

fn pixels(d: &Bound<'_, PyDict>) -> PyResult<Pixels> {
    let data: Vec<u8> = need::<Bound<'_, PyBytes>>(d, "pixels")?.as_bytes().to_vec();
    Ok(Pixels { width: need(d, "width")?, height: need(d, "height")?, channels: need(d, "channels")?, data })
}

/// One item from its dict.
pub fn media_from_dict(d: &Bound<'_, PyDict>) -> PyResult<Media> {
    let kind: String = need(d, "kind")?;
    let kind = trainlog_kind(&kind)?;
    let content = if d.get_item("pixels")?.is_some_and(|v| !v.is_none()) {
        Content::Pixels(pixels(d)?)
    } else if let Some(bytes) = get::<Bound<'_, PyBytes>>(d, "bytes")? {
        Content::Bytes(bytes.as_bytes().to_vec())
    } else {
        Content::File(need::<std::path::PathBuf>(d, "path")?)
    };
    let mut media = Media::new(kind, content);
    media.mime = get(d, "mime")?;
    media.caption = get(d, "caption")?;
    for b in get::<Vec<Bound<'_, PyDict>>>(d, "boxes")?.unwrap_or_default() {
        let domain: String = get(&b, "domain")?.unwrap_or_else(|| "fraction".to_owned());
        media.boxes.push(MediaBox {
            group: get(&b, "group")?.unwrap_or_else(|| "predictions".to_owned()),
            x_min: need(&b, "x_min")?,
            y_min: need(&b, "y_min")?,
            x_max: need(&b, "x_max")?,
            y_max: need(&b, "y_max")?,
            domain: BoxDomain::parse("domain", &domain).map_err(|e| PyValueError::new_err(e.to_string()))?,
            class_id: get(&b, "class_id")?,
            label: get(&b, "label")?,
            score: get(&b, "score")?,
        });
    }
    for m in get::<Vec<Bound<'_, PyDict>>>(d, "masks")?.unwrap_or_default() {
        media
            .masks
            .push(Mask { group: get(&m, "group")?.unwrap_or_else(|| "mask".to_owned()), class_ids: pixels(&m)? });
    }
    let labels: BTreeMap<i64, String> = get(d, "class_labels")?.unwrap_or_default();
    media.class_labels = labels;
    Ok(media)
}

fn trainlog_kind(kind: &str) -> PyResult<MediaKind> {
    MediaKind::parse("kind", kind).map_err(|e| PyValueError::new_err(e.to_string()))
}
