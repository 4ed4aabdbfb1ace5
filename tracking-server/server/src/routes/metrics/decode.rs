//! Metric batches in JSON or Arrow IPC, parsed into a validated `PointBatch`: every key checked
//! once per batch, a stream's messages bounded before the decoder reads them, and a panic inside
//! the Arrow decoder taken as a refused body.

use crate::body::{media_type, parse_json, JSON_MEDIA_TYPE};
use crate::error::{ApiError, Result};
use actix_web::{web, HttpRequest};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type, Int32Type, Int64Type, TimestampMillisecondType};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, TimeUnit};
use std::collections::HashMap;
use trainlog_schema::arrow::ARROW_STREAM_MEDIA_TYPE;
use trainlog_schema::{BatchPoint, MetricKey, PointBatch};

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
    let body: super::wire::LogMetrics = parse_json(bytes)?;
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

/// Parses an Arrow IPC stream. A corrupt stream is an `Invalid` body, never a panic.
///
/// arrow-ipc 60 offers no option that checks a message's buffers against its body: it slices
/// each buffer with an assertion, and a few of its other checks assert too. So the buffers are
/// checked here first, and whatever panic is left is caught, where the decoder owns everything
/// it touches.
pub fn metrics_from_arrow(bytes: web::Bytes, now_ms: i64) -> Result<PointBatch> {
    check_arrow_message_bounds(&bytes)?;
    refusing_decoder_panics(|| decode_arrow(bytes, now_ms))
}

/// Runs an Arrow decoder, turning a panic inside it into a refusal of the body.
fn refusing_decoder_panics<T>(decode: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(decode)).unwrap_or_else(|panic| {
        Err(ApiError::invalid("body", format!("malformed Arrow IPC stream: {}", panic_message(&*panic))))
    })
}

/// Refuses a stream in which a message declares a body longer than the bytes left (the reader
/// would first allocate it, up to 64 MiB), or a record batch or dictionary message declares a
/// buffer outside its body. Framing this walk cannot follow is left for the reader to refuse.
fn check_arrow_message_bounds(stream: &[u8]) -> Result<()> {
    const CONTINUATION_MARKER: &[u8] = &[0xff; 4];
    let mut rest = stream;
    let mut message_index = 0;
    loop {
        rest = rest.strip_prefix(CONTINUATION_MARKER).unwrap_or(rest);
        let Some((metadata_len, after_len)) = rest.split_first_chunk::<4>() else { return Ok(()) };
        let metadata_len = match usize::try_from(i32::from_le_bytes(*metadata_len)) {
            Ok(0) | Err(_) => return Ok(()),
            Ok(n) => n,
        };
        let Some((metadata, after_metadata)) = after_len.split_at_checked(metadata_len) else { return Ok(()) };
        let Ok(message) = arrow_ipc::root_as_message(metadata) else { return Ok(()) };
        let body_len = message.bodyLength();
        let batch = message.header_as_record_batch().or_else(|| message.header_as_dictionary_batch()?.data());
        let buffers = batch.and_then(|b| b.buffers()).into_iter().flatten();
        for (buffer_index, buffer) in buffers.enumerate() {
            let inside = buffer.offset() >= 0
                && buffer.length() >= 0
                && buffer.offset().checked_add(buffer.length()).is_some_and(|end| end <= body_len);
            if !inside {
                return Err(ApiError::invalid(
                    "body",
                    format!(
                        "malformed Arrow IPC stream: buffer {buffer_index} of message {message_index} \
                         (offset {}, length {}) lies outside its body of {body_len} bytes",
                        buffer.offset(),
                        buffer.length()
                    ),
                ));
            }
        }
        let Ok(body_len) = usize::try_from(body_len) else { return Ok(()) };
        let Some(after_body) = after_metadata.get(body_len..) else {
            return Err(ApiError::invalid(
                "body",
                format!(
                    "malformed Arrow IPC stream: message {message_index} declares a body of {body_len} bytes, \
                     and {} follow it",
                    after_metadata.len()
                ),
            ));
        };
        rest = after_body;
        message_index += 1;
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(message), _) => message,
        (None, Some(message)) => message,
        (None, None) => "the decoder failed",
    }
}

fn decode_arrow(bytes: web::Bytes, now_ms: i64) -> Result<PointBatch> {
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

/// How a metrics body is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsEncoding {
    Json,
    ArrowStream,
}

/// The encoding a metrics request declares in its Content-Type.
pub fn metrics_encoding(req: &HttpRequest) -> Result<MetricsEncoding> {
    let accepted = format!("{JSON_MEDIA_TYPE} or {ARROW_STREAM_MEDIA_TYPE}");
    match media_type(req, &accepted)?.as_str() {
        JSON_MEDIA_TYPE => Ok(MetricsEncoding::Json),
        ARROW_STREAM_MEDIA_TYPE => Ok(MetricsEncoding::ArrowStream),
        other => {
            Err(ApiError::UnsupportedMediaType(format!("content type {other:?} is not accepted; send {accepted}")))
        }
    }
}

/// Decodes a metrics body; CPU work, to run off the async workers.
pub fn decode_metrics(encoding: MetricsEncoding, bytes: web::Bytes, now_ms: i64) -> Result<PointBatch> {
    match encoding {
        MetricsEncoding::Json => metrics_from_json(&bytes, now_ms),
        MetricsEncoding::ArrowStream => metrics_from_arrow(bytes, now_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;
    use arrow_array::{DictionaryArray, Float64Array, Int64Array, StringArray};
    use proptest::prelude::*;
    use proptest::sample::Index;
    use proptest::test_runner::{Config as ProptestConfig, RngAlgorithm, RngSeed};
    use std::sync::Arc;

    const KEYS: [&str; 4] = ["train/loss", "lr", "train/loss", "val/acc"];

    /// A valid metrics body of two batches: keys as utf8 or as a dictionary of utf8, step,
    /// value and timestamp.
    fn arrow_body(dictionary_keys: bool) -> Vec<u8> {
        let batch = |first_step: i64| {
            let key: ArrayRef = if dictionary_keys {
                Arc::new(KEYS.into_iter().collect::<DictionaryArray<Int32Type>>())
            } else {
                Arc::new(StringArray::from(KEYS.to_vec()))
            };
            let steps: Vec<i64> = (first_step..first_step + KEYS.len() as i64).collect();
            let values: Vec<f64> = steps.iter().map(|&s| 0.5 + s as f64).collect();
            let timestamps: Vec<i64> = steps.iter().map(|&s| 1_700_000_000_000 + s).collect();
            let columns: Vec<(&str, ArrayRef)> = vec![
                ("key", key),
                ("step", Arc::new(Int64Array::from(steps))),
                ("value", Arc::new(Float64Array::from(values))),
                ("timestamp", Arc::new(Int64Array::from(timestamps))),
            ];
            RecordBatch::try_from_iter(columns).unwrap()
        };
        let (first, second) = (batch(0), batch(4));
        let mut body = Vec::new();
        let mut writer = arrow_ipc::writer::StreamWriter::try_new(&mut body, &first.schema()).unwrap();
        writer.write(&first).unwrap();
        writer.write(&second).unwrap();
        writer.finish().unwrap();
        drop(writer);
        body
    }

    const JSON_BODY: &str = r#"{"points":[{"key":"train/loss","step":0,"value":0.5,"timestamp":1700000000000},
        {"key":"lr","step":0,"value":"NaN"},{"key":"val/acc","step":1,"value":-1e300,"timestamp":-5}]}"#;

    /// One change to a body; positions are scaled to the body's length when applied.
    #[derive(Debug, Clone)]
    enum Mutation {
        FlipBits {
            at: Index,
            mask: u8,
        },
        /// Overwrites up to 8 bytes with a little-endian integer, to reach lengths and offsets.
        SetWord {
            at: Index,
            word: i64,
        },
        Truncate {
            at: Index,
        },
        Insert {
            at: Index,
            bytes: Vec<u8>,
        },
        Remove {
            at: Index,
            len: usize,
        },
    }

    fn mutation() -> impl Strategy<Value = Mutation> {
        let word = prop_oneof![
            Just(0i64),
            Just(-1),
            Just(i64::MAX),
            Just(i64::MIN),
            Just(i32::MAX as i64),
            Just(i32::MIN as i64),
            Just(u32::MAX as i64),
            -64i64..4096,
        ];
        prop_oneof![
            4 => (any::<Index>(), 1u8..=255).prop_map(|(at, mask)| Mutation::FlipBits { at, mask }),
            2 => (any::<Index>(), word).prop_map(|(at, word)| Mutation::SetWord { at, word }),
            1 => any::<Index>().prop_map(|at| Mutation::Truncate { at }),
            1 => (any::<Index>(), prop::collection::vec(any::<u8>(), 1..16))
                .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
            1 => (any::<Index>(), 1usize..32).prop_map(|(at, len)| Mutation::Remove { at, len }),
        ]
    }

    fn mutate(mut body: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
        for m in mutations {
            let len = body.len();
            match m {
                Mutation::Insert { at, bytes } => {
                    let at = at.index(len + 1);
                    body.splice(at..at, bytes.iter().copied());
                }
                Mutation::Truncate { at } => body.truncate(at.index(len + 1)),
                _ if len == 0 => {}
                Mutation::FlipBits { at, mask } => body[at.index(len)] ^= mask,
                Mutation::SetWord { at, word } => {
                    let at = at.index(len);
                    let end = (at + 8).min(len);
                    body[at..end].copy_from_slice(&word.to_le_bytes()[..end - at]);
                }
                Mutation::Remove { at, len: n } => {
                    let at = at.index(len);
                    body.drain(at..(at + n).min(len));
                }
            }
        }
        body
    }

    /// What every decoder answer must be: a batch whose points name keys of the batch, or a
    /// refusal of the request (400), never an internal error.
    fn assert_sound(decoded: &Result<PointBatch>) {
        match decoded {
            Ok(batch) => assert!(
                batch.points.iter().all(|p| (p.key as usize) < batch.keys.len()),
                "a point names a key outside the batch"
            ),
            Err(e) => assert!(matches!(e, ApiError::Invalid { .. }), "expected a refusal of the body, got {e:?}"),
        }
    }

    fn fuzz_config(cases: u32) -> ProptestConfig {
        ProptestConfig {
            cases,
            rng_algorithm: RngAlgorithm::ChaCha,
            rng_seed: RngSeed::Fixed(0x0072_6169_6e6c_6f67),
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    }

    proptest! {
        #![proptest_config(fuzz_config(2_000))]

        #[test]
        fn arrow_decoder_answers_every_mutated_stream(
            dictionary_keys in any::<bool>(),
            mutations in prop::collection::vec(mutation(), 1..6),
        ) {
            let body = mutate(arrow_body(dictionary_keys), &mutations);
            assert_sound(&metrics_from_arrow(web::Bytes::from(body), 0));
        }

        #[test]
        fn json_decoder_answers_every_mutated_body(mutations in prop::collection::vec(mutation(), 1..6)) {
            let body = mutate(JSON_BODY.as_bytes().to_vec(), &mutations);
            assert_sound(&metrics_from_json(&body, 0));
            let _ = parse_json::<serde_json::Value>(&body);
        }

        #[test]
        fn decoders_answer_arbitrary_bytes(body in prop::collection::vec(any::<u8>(), 0..512)) {
            assert_sound(&metrics_from_json(&body, 0));
            assert_sound(&metrics_from_arrow(web::Bytes::from(body.clone()), 0));
            let _ = parse_json::<serde_json::Value>(&body);
        }

        #[test]
        fn json_decoders_answer_json_like_text(body in r#"[\[\]{}",:0-9a-z.eE+ -]{0,300}"#) {
            assert_sound(&metrics_from_json(body.as_bytes(), 0));
            let _ = parse_json::<serde_json::Value>(body.as_bytes());
        }
    }

    /// Parses a metrics batch by its content type: `application/json` or an Arrow IPC stream.
    fn metrics_batch(req: &HttpRequest, bytes: web::Bytes, now_ms: i64) -> Result<PointBatch> {
        decode_metrics(metrics_encoding(req)?, bytes, now_ms)
    }

    fn request_with(content_type: &[u8]) -> HttpRequest {
        let value = actix_web::http::header::HeaderValue::from_bytes(content_type).unwrap();
        TestRequest::default().insert_header((actix_web::http::header::CONTENT_TYPE, value)).to_http_request()
    }

    #[test]
    fn metrics_batches_are_read_by_content_type() {
        let json = web::Bytes::from_static(br#"{"points":[{"key":"a","step":1,"value":1}]}"#);
        let decoded = metrics_batch(&request_with(b"application/json; charset=utf-8"), json.clone(), 0).unwrap();
        assert_eq!(decoded.points.len(), 1);
        let arrow = web::Bytes::from(arrow_body(true));
        assert_eq!(metrics_batch(&request_with(ARROW_STREAM_MEDIA_TYPE.as_bytes()), arrow, 0).unwrap().points.len(), 8);
        let missing = TestRequest::default().to_http_request();
        for request in [request_with(b"text/plain"), request_with(b"application/octet-stream"), missing] {
            let err = metrics_batch(&request, json.clone(), 0).unwrap_err();
            let names_both = |m: &str| m.contains("application/json") && m.contains(ARROW_STREAM_MEDIA_TYPE);
            assert!(matches!(&err, ApiError::UnsupportedMediaType(m) if names_both(m)), "{err:?}");
        }
    }

    #[test]
    fn valid_arrow_bodies_decode_in_both_key_layouts() {
        for dictionary_keys in [false, true] {
            let batch = metrics_from_arrow(web::Bytes::from(arrow_body(dictionary_keys)), 0).unwrap();
            let keys: Vec<&str> = batch.keys.iter().map(MetricKey::as_str).collect();
            assert_eq!(keys, ["train/loss", "lr", "val/acc"]);
            assert_eq!(batch.points.len(), 8);
            let last = batch.points[7];
            assert_eq!((last.key, last.step, last.value, last.timestamp_ms), (2, 7, 7.5, 1_700_000_000_007));
        }
    }

    #[test]
    fn every_single_bit_flip_of_an_arrow_stream_is_answered() {
        let mut buffers_outside_the_body = 0;
        for dictionary_keys in [false, true] {
            let body = arrow_body(dictionary_keys);
            for at in 0..body.len() {
                for bit in 0..8 {
                    let mut flipped = body.clone();
                    flipped[at] ^= 1 << bit;
                    let decoded = metrics_from_arrow(web::Bytes::from(flipped), 0);
                    assert_sound(&decoded);
                    if matches!(&decoded, Err(ApiError::Invalid { reason, .. }) if reason.contains("outside its body"))
                    {
                        buffers_outside_the_body += 1;
                    }
                }
            }
        }
        assert!(buffers_outside_the_body > 0, "no flip moved a buffer outside its message's body");
    }

    #[test]
    fn a_panic_inside_the_arrow_decoder_refuses_the_body() {
        let err = refusing_decoder_panics(|| -> Result<()> { panic!("buffer slice out of range") }).unwrap_err();
        assert!(
            matches!(&err, ApiError::Invalid { field, reason }
                if field == "body" && reason == "malformed Arrow IPC stream: buffer slice out of range"),
            "{err:?}"
        );
    }

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
