//! Media items as the Python layer hands them over (plain dicts: kind, pixels or bytes or a path,
//! boxes, masks, class labels), turned into the SDK's `Media`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::collections::BTreeMap;
use trainlog::media::{BoxDomain, MediaBox, MediaKind, TableMode};
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

/// A table cell as JSON: a float that is not finite is null (JSON has no NaN).
fn cell(v: &Bound<'_, PyAny>) -> PyResult<serde_json::Value> {
    if let Ok(f) = v.cast::<pyo3::types::PyFloat>() {
        let f = f.value();
        return Ok(serde_json::Number::from_f64(f).map_or(serde_json::Value::Null, serde_json::Value::Number));
    }
    crate::to_json(v)
}

/// A histogram or a table part from its dict.
fn series_from_dict(d: &Bound<'_, PyDict>, kind: MediaKind) -> PyResult<Media> {
    if kind == MediaKind::Histogram {
        if let Some(values) = get::<Bound<'_, PyBytes>>(d, "values")? {
            let values = values.as_bytes().chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])));
            return Ok(Media::histogram(values.collect(), need(d, "bins")?));
        }
        return Ok(Media::histogram_binned(need(d, "counts")?, need(d, "edges")?));
    }
    let mut media = if let Some(stream) = get::<Bound<'_, PyBytes>>(d, "arrow")? {
        Media::table_arrow(stream.as_bytes().to_vec())
    } else {
        let columns: Vec<String> = need(d, "columns")?;
        let rows = need::<Vec<Vec<Bound<'_, PyAny>>>>(d, "rows")?
            .iter()
            .map(|r| r.iter().map(cell).collect::<PyResult<Vec<_>>>())
            .collect::<PyResult<Vec<_>>>()?;
        Media::table_rows(columns, rows)
    };
    let mode: String = get(d, "mode")?.unwrap_or_else(|| "replace".to_owned());
    media.table_mode = TableMode::parse("mode", &mode).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(media)
}

/// One item from its dict.
pub fn media_from_dict(d: &Bound<'_, PyDict>) -> PyResult<Media> {
    let kind: String = need(d, "kind")?;
    let kind = trainlog_kind(&kind)?;
    if matches!(kind, MediaKind::Histogram | MediaKind::Table) {
        return series_from_dict(d, kind);
    }
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
