//! Request bodies: reading with a size limit, JSON with errors that name the field, and metric
//! batches in JSON or Arrow IPC parsed into a validated `PointBatch`.

use crate::error::{ApiError, Result};
use actix_web::{web, HttpRequest};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type, Int32Type, Int64Type, TimestampMillisecondType};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, TimeUnit};
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use std::collections::HashMap;
use trainlog_schema::arrow::ARROW_STREAM_MEDIA_TYPE;
use trainlog_schema::{parse_non_finite, BatchPoint, MetricKey, PointBatch};

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 64 << 20;

/// Reads the whole body, refusing more than `MAX_BODY_BYTES` without buffering the excess.
pub async fn read_body(req: &HttpRequest, mut payload: web::Payload) -> Result<web::Bytes> {
    let declared = req
        .headers()
        .get(actix_web::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES) {
        return Err(ApiError::TooLarge { limit: MAX_BODY_BYTES });
    }
    let mut body = web::BytesMut::with_capacity(declared.unwrap_or(8192).min(MAX_BODY_BYTES));
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| ApiError::invalid("body", format!("could not read the body: {e}")))?;
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(ApiError::TooLarge { limit: MAX_BODY_BYTES });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// Parses JSON; on failure, re-parses to name the field at fault (`points[3].value`).
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid("body", "expected a JSON object, got an empty body"));
    }
    match serde_json::from_slice(bytes) {
        Ok(v) => Ok(v),
        Err(_) => {
            let de = &mut serde_json::Deserializer::from_slice(bytes);
            match serde_path_to_error::deserialize::<_, T>(de) {
                Ok(v) => Ok(v),
                Err(e) => {
                    let path = e.path().to_string();
                    let field = if path == "." || path.is_empty() { "body".to_owned() } else { path };
                    Err(ApiError::invalid(field, e.inner().to_string()))
                }
            }
        }
    }
}

pub async fn json_body<T: DeserializeOwned>(req: &HttpRequest, payload: web::Payload) -> Result<T> {
    let bytes = read_body(req, payload).await?;
    parse_json(&bytes)
}

/// A float given as a JSON number or as "NaN", "Infinity" or "-Infinity".
#[derive(Debug, Clone, Copy)]
pub struct JsonF64(pub f64);

impl<'de> Deserialize<'de> for JsonF64 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = JsonF64;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a number, or \"NaN\", \"Infinity\" or \"-Infinity\"")
            }
            fn visit_f64<E>(self, v: f64) -> std::result::Result<JsonF64, E> {
                Ok(JsonF64(v))
            }
            fn visit_i64<E>(self, v: i64) -> std::result::Result<JsonF64, E> {
                Ok(JsonF64(v as f64))
            }
            fn visit_u64<E>(self, v: u64) -> std::result::Result<JsonF64, E> {
                Ok(JsonF64(v as f64))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<JsonF64, E> {
                parse_non_finite(v).map(JsonF64).ok_or_else(|| E::invalid_value(serde::de::Unexpected::Str(v), &self))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonPoint {
    key: String,
    step: i64,
    value: JsonF64,
    #[serde(default)]
    timestamp: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonBatch {
    points: Vec<JsonPoint>,
}

/// Interns keys of one batch, validating each distinct key once.
#[derive(Default)]
struct KeyTable {
    index: HashMap<String, u32>,
    keys: Vec<MetricKey>,
}

impl KeyTable {
    fn intern(&mut self, key: &str, field: impl FnOnce() -> String) -> Result<u32> {
        if let Some(&i) = self.index.get(key) {
            return Ok(i);
        }
        let parsed = MetricKey::parse(&field(), key)?;
        let i = self.keys.len() as u32;
        self.keys.push(parsed);
        self.index.insert(key.to_owned(), i);
        Ok(i)
    }
}

pub fn metrics_from_json(bytes: &[u8], now_ms: i64) -> Result<PointBatch> {
    let body: JsonBatch = parse_json(bytes)?;
    let mut keys = KeyTable::default();
    let mut points = Vec::with_capacity(body.points.len());
    for (i, p) in body.points.iter().enumerate() {
        let key = keys.intern(&p.key, || format!("points[{i}].key"))?;
        points.push(BatchPoint { key, step: p.step, timestamp_ms: p.timestamp.unwrap_or(now_ms), value: p.value.0 });
    }
    Ok(PointBatch { keys: keys.keys, points })
}

fn column<'a>(batch: &'a RecordBatch, name: &str) -> Option<&'a ArrayRef> {
    batch.column_by_name(name)
}

fn no_nulls(array: &ArrayRef, name: &str) -> Result<()> {
    match array.nulls().and_then(|n| (0..array.len()).find(|&i| n.is_null(i))) {
        Some(row) => Err(ApiError::invalid(name, format!("row {row} is null"))),
        None => Ok(()),
    }
}

fn int64_values(array: &ArrayRef, name: &str) -> Result<Vec<i64>> {
    no_nulls(array, name)?;
    Ok(match array.data_type() {
        DataType::Int64 => array.as_primitive::<Int64Type>().values().to_vec(),
        DataType::Int32 => array.as_primitive::<Int32Type>().values().iter().map(|&v| v as i64).collect(),
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            array.as_primitive::<TimestampMillisecondType>().values().to_vec()
        }
        other => return Err(ApiError::invalid(name, format!("expected int64, got {other}"))),
    })
}

fn key_ids(array: &ArrayRef, keys: &mut KeyTable) -> Result<Vec<u32>> {
    no_nulls(array, "key")?;
    let mut per_value = |value: &str| keys.intern(value, || "key".to_owned());
    match array.data_type() {
        DataType::Utf8 => array.as_string::<i32>().iter().map(|v| per_value(v.unwrap_or(""))).collect(),
        DataType::LargeUtf8 => array.as_string::<i64>().iter().map(|v| per_value(v.unwrap_or(""))).collect(),
        DataType::Utf8View => array.as_string_view().iter().map(|v| per_value(v.unwrap_or(""))).collect(),
        DataType::Dictionary(_, value_type) if **value_type == DataType::Utf8 => {
            let dict = array.as_any_dictionary();
            let values = dict.values().as_string::<i32>();
            let mapped: Vec<u32> = values.iter().map(|v| per_value(v.unwrap_or(""))).collect::<Result<_>>()?;
            dict.normalized_keys()
                .into_iter()
                .map(|k| {
                    mapped.get(k).copied().ok_or_else(|| ApiError::invalid("key", "dictionary index out of range"))
                })
                .collect()
        }
        other => Err(ApiError::invalid("key", format!("expected utf8 or a dictionary of utf8, got {other}"))),
    }
}

pub fn metrics_from_arrow(bytes: web::Bytes, now_ms: i64) -> Result<PointBatch> {
    let reader = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
        .map_err(|e| ApiError::invalid("body", format!("not an Arrow IPC stream: {e}")))?;
    let mut keys = KeyTable::default();
    let mut points = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| ApiError::invalid("body", format!("malformed Arrow IPC stream: {e}")))?;
        let need = |name: &str| column(&batch, name).ok_or_else(|| ApiError::invalid(name, "the column is missing"));
        let key = key_ids(need("key")?, &mut keys)?;
        let step = int64_values(need("step")?, "step")?;
        let value_col = need("value")?;
        no_nulls(value_col, "value")?;
        let value: Vec<f64> = match value_col.data_type() {
            DataType::Float64 => value_col.as_primitive::<Float64Type>().values().to_vec(),
            DataType::Float32 => value_col.as_primitive::<Float32Type>().values().iter().map(|&v| v as f64).collect(),
            other => return Err(ApiError::invalid("value", format!("expected float64, got {other}"))),
        };
        let timestamp = match column(&batch, "timestamp") {
            Some(c) if c.null_count() == 0 => Some(int64_values(c, "timestamp")?),
            Some(c) if c.null_count() == c.len() => None,
            Some(_) => return Err(ApiError::invalid("timestamp", "give every row a timestamp or none")),
            None => None,
        };
        points.reserve(batch.num_rows());
        for i in 0..batch.num_rows() {
            points.push(BatchPoint {
                key: key[i],
                step: step[i],
                timestamp_ms: timestamp.as_ref().map_or(now_ms, |t| t[i]),
                value: value[i],
            });
        }
    }
    Ok(PointBatch { keys: keys.keys, points })
}

/// Parses a metrics batch by its content type.
pub fn metrics_batch(req: &HttpRequest, bytes: web::Bytes, now_ms: i64) -> Result<PointBatch> {
    let content_type = req
        .headers()
        .get(actix_web::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let media = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    match media.as_str() {
        "application/json" | "" => metrics_from_json(&bytes, now_ms),
        m if m == ARROW_STREAM_MEDIA_TYPE => metrics_from_arrow(bytes, now_ms),
        other => Err(ApiError::UnsupportedMediaType(format!(
            "content type {other:?} is not accepted; send application/json or {ARROW_STREAM_MEDIA_TYPE}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_batches_accept_non_finite_strings_and_name_bad_fields() {
        let b = metrics_from_json(br#"{"points":[{"key":"a","step":1,"value":"NaN"},{"key":"a","step":2,"value":"-Infinity","timestamp":5}]}"#, 9).unwrap();
        assert_eq!(b.keys.len(), 1);
        assert!(b.points[0].value.is_nan());
        assert_eq!((b.points[0].timestamp_ms, b.points[1].timestamp_ms), (9, 5));
        let err =
            metrics_from_json(br#"{"points":[{"key":"a","step":1,"value":1},{"key":"a","step":2,"value":"high"}]}"#, 0)
                .unwrap_err();
        assert!(matches!(err, ApiError::Invalid { ref field, .. } if field == "points[1].value"), "{err:?}");
        let err = metrics_from_json(br#"{"points":[{"key":"","step":1,"value":1}]}"#, 0).unwrap_err();
        assert!(matches!(err, ApiError::Invalid { ref field, .. } if field == "points[0].key"), "{err:?}");
        let err = metrics_from_json(br#"{"points":[{"key":"a","value":1}]}"#, 0).unwrap_err();
        assert!(matches!(err, ApiError::Invalid { ref field, .. } if field == "points[0]"), "{err:?}");
    }
}
